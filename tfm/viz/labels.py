"""Token text for figures: HTML-escaped, because plotly renders a subset of HTML in labels and
hover, and axis labels made unique (a category axis merges equal labels)."""

from __future__ import annotations

import html


def esc(text: str) -> str:
    return html.escape(text, quote=True)


def unique_labels(pieces: list[str], ids: list[int]) -> list[str]:
    """Escaped axis labels; two tokens with the same readable piece get their ids appended."""
    seen = {p: pieces.count(p) for p in pieces}
    return [esc(p if seen[p] == 1 else f"{p} #{i}") for p, i in zip(pieces, ids)]
