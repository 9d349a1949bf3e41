"""The app's pages by section: app.py builds the navigation from it, the home page its index."""

from __future__ import annotations

import copy
import threading
from pathlib import Path

import streamlit as st

# (file in pages/, title, what it shows). A page's URL path is its file stem (/attention,
# /next_token): the name Streamlit's pages/ folder convention also gives it, so a shared link
# works even as a fresh server's first request (see ui.sidebar.leave_legacy_pages_mode).
SECTIONS: dict[str, list[tuple[str, str, str]]] = {
    "Start": [
        ("home.py", "Home", "what tfm is and where to start"),
        ("tour.py", "Tour", "one forward pass step by step, with the real numbers and questions for a class"),
        (
            "classroom.py",
            "Class",
            "a room for a class: your screen leads, students predict on their phones, the model reveals",
        ),
        (
            "induction.py",
            "Induction head, live",
            "train a 2-layer attention-only model and watch an induction head form",
        ),
    ],
    "Look inside": [
        ("tokens.py", "Tokens", "how the prompt is cut into the pieces the model reads"),
        (
            "attention.py",
            "Attention",
            "every head of every layer, with a head table that finds previous-token and induction heads",
        ),
        (
            "look_at.py",
            "What heads look at",
            "an encoder's heads: attention to [CLS], [SEP], punctuation, the previous and next token (Clark et al. 2019)",
        ),
        (
            "similarity.py",
            "Sentence similarity",
            "an encoder's sentence embeddings, their cosines, and which tokens make them",
        ),
        (
            "positions.py",
            "Positional encodings",
            "how the model knows where a token is: learned, sinusoidal, RoPE, or nothing",
        ),
        (
            "norms.py",
            "LayerNorm & residual stream",
            "what each LayerNorm receives and returns, and how the residual stream grows",
        ),
        ("shapes.py", "Shapes & parameters", "the shape of every tensor and where the parameters are"),
        (
            "quant.py",
            "Quantization",
            "how a GGUF model stores its weights in 4 or 8 bits, and what a coarser type does to its predictions",
        ),
        ("logit_lens.py", "Logit lens", "what each layer would predict if it were the last"),
        (
            "why.py",
            "Why this token?",
            "which heads and MLPs wrote the prediction, and what happens when you switch them off or patch them",
        ),
        (
            "features.py",
            "Features (SAE)",
            "what a sparse autoencoder finds on each token: features, their top examples, what they promote",
        ),
        (
            "attribution_graph.py",
            "Attribution graph",
            "which transcoder features made the prediction and through what; switch them off in the real model",
        ),
    ],
    "Generate": [
        ("next_token.py", "Next-token sampling", "temperature, top-k and top-p on the real next-token distribution"),
        ("generate.py", "Generation & timeline", "text arriving token by token, and how each token was chosen"),
        ("steer.py", "Steer", "add a direction to the residual stream and watch the text change mood or topic"),
    ],
    "The 2017 Transformer": [
        ("encdec.py", "Encoder-decoder, trained live", "the 2017 encoder-decoder, trained live on a toy task"),
        ("experiments.py", "Experiments", "why the Transformer is built this way, measured"),
    ],
}


_built: dict[str, list[st.Page]] | None = None
_building = threading.Lock()


def pages(root: Path) -> dict[str, list[st.Page]]:
    """Each section's st.Page objects (sections without a page left out). They are built once per
    process: building resolves and stats every page file, a visible share of the server's CPU with
    a class connected (py-spy, bench/bench_load.py). Every run gets fresh copies, because st.navigation
    marks the page it picks as callable on the object itself and sessions run at once."""
    global _built
    with _building:
        if _built is None:
            _built = {
                section: [
                    st.Page(f"pages/{f}", title=t, url_path=Path(f).stem, default=(f == "home.py"))
                    for f, t, _ in entries
                    if (root / "pages" / f).is_file()
                ]
                for section, entries in SECTIONS.items()
            }
    return {section: [copy.copy(p) for p in ps] for section, ps in _built.items() if ps}
