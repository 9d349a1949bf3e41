"""Figures: plotly builders shared by the app and notebooks (pure functions: numbers and labels
in, a plotly Figure out; no Streamlit). One module per topic: attention, sampling, why, norms,
positions, shapes, tour, lessons, encdec, experiments; `notebook` calls them on a trace (or on
Hugging Face attentions) for Jupyter, and its functions are re-exported here:

    tfm.viz.head_view(trace, tfm.viz.tokens(lm, ids), layer=1)

Layer 7: may import every layer below.
"""
from .notebook import (WINDOW, all_heads, attention_pattern, attribution_bars, generation_attention,
                       generation_timeline, head_table, head_table_frame, head_view, layer_heads, logit_lens,
                       next_token, norm_statistics, positional_encodings, record_generation, residual_norms, tokens)

__all__ = ["WINDOW", "all_heads", "attention_pattern", "attribution_bars", "generation_attention",
           "generation_timeline", "head_table", "head_table_frame", "head_view", "layer_heads", "logit_lens",
           "next_token", "norm_statistics", "positional_encodings", "record_generation", "residual_norms", "tokens"]
