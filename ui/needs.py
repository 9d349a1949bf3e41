"""A page's requirement on the model (by capability, `tfm.analysis.capability`): one line saying
what it needs, and a button that opens a model that has it, instead of the page (no error box)."""

from __future__ import annotations

import streamlit as st

from tfm.analysis import capability
from ui import links, models
from ui.model_run import active_model
from ui.packaged import PACKAGED


def _switch(kind: str) -> None:
    st.session_state["sidebar.model_kind"] = kind
    st.session_state["app.model_spec"] = kind if kind in PACKAGED else models.bundled_model_spec()
    links.remember("sidebar.model_kind")


def _offer(kind: str, label: str) -> None:
    if kind != "default" and not PACKAGED[kind][0]():
        kind, label = "default", "Open the bundled model"
    st.button(label, key="needs.switch", on_click=_switch, args=(kind,))


def _require(missing, page: str, kind: str, label: str) -> None:
    """Stop the page with one line and a button when `missing(config, page)` names what the model lacks."""
    model = active_model()
    if model is None:
        st.stop()
    note = missing(model.lm.config, page)
    if note:
        st.info(note)
        _offer(kind, label)
        st.stop()


def _language_model() -> str:
    return "smollm2" if models.default_model_spec() == "smollm2" else "default"


def next_token_head(page: str) -> None:
    """Stop the page, saying so, unless the model predicts the next token."""
    _require(capability.missing_next_token_head, page, _language_model(), "Open a language model")


def token_head(page: str) -> None:
    """Stop the page, saying so, unless the model predicts tokens (next-token or fill-mask)."""
    _require(capability.missing_token_head, page, _language_model(), "Open a language model")


def encoder(page: str) -> None:
    """Stop the page, saying so, unless the model is an encoder."""
    _require(capability.missing_encoder, page, "minilm", "Open MiniLM")
