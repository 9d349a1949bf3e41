"""Figures: plotly builders shared by the app and notebooks (pure functions: numbers and labels
in, a plotly Figure out; no Streamlit). One module per topic: attention, sampling, why, norms,
positions, shapes, tour, lessons, encdec, experiments; `notebook` calls them on a trace (or on
Hugging Face attentions) for Jupyter, and its functions are re-exported here:

    trace, tokens = tfm.viz.trace_prompt(tfm.load("default"), "The cat sat on the mat. The cat sat on the")
    tfm.viz.head_view(trace, tokens, layer=5, heads=[2, 5])

Layer 7: may import every layer below.
"""

from .notebook import (
    WINDOW,
    all_heads,
    attention_pattern,
    attribution_bars,
    generation_attention,
    generation_timeline,
    head_table,
    head_table_frame,
    head_view,
    layer_heads,
    lens_comparison,
    logit_lens,
    next_token,
    norm_statistics,
    positional_encodings,
    record_generation,
    residual_norms,
    tokens,
    trace_prompt,
)

__all__ = [
    "WINDOW",
    "all_heads",
    "attention_pattern",
    "attribution_bars",
    "generation_attention",
    "generation_timeline",
    "head_table",
    "head_table_frame",
    "head_view",
    "layer_heads",
    "lens_comparison",
    "logit_lens",
    "next_token",
    "norm_statistics",
    "positional_encodings",
    "record_generation",
    "residual_norms",
    "tokens",
    "trace_prompt",
]
