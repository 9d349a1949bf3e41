"""Figures: plotly builders shared by the app and notebooks (pure functions: numbers and labels
in, a plotly Figure out; no Streamlit). One module per topic: attention, sampling, why, norms,
positions, shapes, tour, lessons, encdec, experiments.

Layer 7: may import every layer below.
"""
