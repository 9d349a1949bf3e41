"""Figures: plotly builders shared by the app and notebooks (pure functions: numbers and labels
in, a plotly Figure out; no Streamlit). One module per topic: attention, sampling, why, norms,
positions, shapes, tour, lessons, encdec, experiments; `notebook` calls them on a trace (or on
Hugging Face attentions) for Jupyter, and its functions are re-exported here:

    trace, tokens = tfm.viz.trace_prompt(tfm.load("default"), "The cat sat on the mat. The cat sat on the")
    tfm.viz.head_view(trace, tokens, layer=5, heads=[2, 5])

Layer 7: may import every layer below.
"""

from . import notebook
from .notebook import *  # noqa: F403 (the notebook's functions, as its __all__ names them: one list)

__all__ = notebook.__all__
