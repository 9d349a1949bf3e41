"""Tokens: the prompt as the model sees it."""

import html

import pandas as pd
import streamlit as st

from ui import sidebar
from ui.run import current_run

# Pastel backgrounds that alternate so neighbouring tokens are told apart (readable on a projector).
CHIP_COLOURS = ("#dbeafe", "#fde68a", "#bbf7d0", "#fecaca", "#e9d5ff", "#fed7aa")
CHIP_STYLE = (
    "display:inline-block;margin:2px 1px;padding:1px 5px;border-radius:4px;border:1px solid #0002;"
    "font-family:ui-monospace,monospace;font-size:1.05rem;color:#111;white-space:pre"
)


def chips(pieces: list[str], ids: tuple[int, ...]) -> str:
    """The tokens as coloured chips; every piece is escaped, so typed HTML stays text."""
    spans = [
        f'<span title="position {i} · id {t}" style="{CHIP_STYLE};background:{CHIP_COLOURS[i % len(CHIP_COLOURS)]}">'
        f'{html.escape(p)}<sub style="color:#555;font-size:0.6em;margin-left:2px">{t}</sub></span>'
        for i, (p, t) in enumerate(zip(pieces, ids))
    ]
    return f'<div class="tfm-chips" style="line-height:2.1">{"".join(spans)}</div>'


def main() -> None:
    shown = sidebar.render()
    st.title("Tokens")
    run = current_run()
    text = shown.prompt
    view = run.token_view(text)
    st.caption(
        f"{len(view.ids)} tokens from {len(text)} characters ({view.chars_per_token:.2f} characters per token). "
        "␣ is a space, ↵ a newline, ⇥ a tab; <E2 80> marks bytes that are only part of a character. "
        "The small number on each chip is the token id; hover a chip for its position."
    )
    if view.note:
        st.caption(view.note)
    st.html(chips(list(view.pieces), view.ids))
    table = pd.DataFrame(
        {"position": range(len(view.ids)), "piece": view.pieces, "id": view.ids, "bytes": view.n_bytes}
        | ({"segment": view.segments} if view.segments else {})
    )
    st.dataframe(table, hide_index=True, key="tokens.table", height=min(600, 38 + 35 * len(table)))


main()
