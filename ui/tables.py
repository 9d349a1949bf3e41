"""Streamlit table settings shared by pages (figures themselves are tfm.viz's)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from tfm.analysis import SCORES


def head_columns(table: pd.DataFrame) -> dict:
    """st.dataframe column_config: bars for the 0..1 scores, the explanation on hover."""
    cols = {
        "layer": None,
        "index": None,
        "entropy": st.column_config.NumberColumn("entropy (nats)", help=SCORES["entropy"], format="%.3f"),
    }
    for name in table.columns:
        if name in SCORES and name != "entropy":
            cols[name] = st.column_config.ProgressColumn(
                name.replace("_", " "), help=SCORES[name], min_value=0.0, max_value=1.0, format="%.3f"
            )
    return cols
