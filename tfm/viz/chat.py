"""A rendered chat prompt as token chips, special tokens marked (HTML; every piece escaped)."""

from __future__ import annotations

import html

_CHIP = (
    "display:inline-block;margin:2px 1px;padding:1px 5px;border-radius:4px;border:1px solid #0003;"
    "font-family:ui-monospace,monospace;font-size:1.0rem;white-space:pre"
)
_PLAIN = ("#dbeafe", "#fde68a", "#bbf7d0", "#fecaca")  # alternating, so neighbours are told apart
_SPECIAL = "background:#312e81;color:#fff;font-weight:700"


def chat_chips(pieces: list[str], ids: list[int], special: list[bool]) -> str:
    """One chip per token; special tokens dark with white text. A newline piece (↵) also breaks
    the line, so the rendered conversation keeps its shape."""
    spans = []
    for i, (p, t, s) in enumerate(zip(pieces, ids, special)):
        style = _SPECIAL if s else f"background:{_PLAIN[i % len(_PLAIN)]};color:#111"
        kind = "special token" if s else "token"
        spans.append(
            f'<span title="position {i} · id {t} · {kind}" style="{_CHIP};{style}">{html.escape(p)}'
            f'<sub style="opacity:.7;font-size:0.6em;margin-left:2px">{t}</sub></span>'
        )
        if p.endswith("↵"):
            spans.append("<br>")
    return f'<div class="tfm-chat-chips" style="line-height:2.1">{"".join(spans)}</div>'
