"""Any value shown back to a user as plain, short text: the one escape of the project.

A value that came from a link, a widget or a file (or an engine message that quotes one) is
shown inside Markdown-rendering calls; without this a link such as `?seed=[Log in](https://x)`
draws a working link, or `![x](http://host/pixel)` fetches an image, inside the app's own UI.

    plain("[Log in](https://x)")  -> '\\[Log in\\]\\(https\\:\\/\\/x\\)'   (renders as typed)
    short("a" * 50_000)            -> 'aaaa…a… (50,000 characters)'
"""
from __future__ import annotations

import string
import unicodedata

__all__ = ["plain", "short", "visible", "escape_markdown", "LIMIT"]

LIMIT = 80  # characters of a value shown before it is cut
# CommonMark lets a backslash escape every ASCII punctuation character, and escaping all of them
# also breaks GFM's bare-URL autolinks (`https\:`, `www\.`), emails (`\@`), Streamlit's
# `:color[...]` directives and LaTeX `$`.
_ESCAPE = {c: "\\" + c for c in string.punctuation}


def short(text: str, limit: int = LIMIT) -> str:
    """The first `limit` characters of `text` and its length when it is longer."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def visible(text: str) -> str:
    """Invisible characters written out: control and format characters (null bytes, newlines,
    right-to-left overrides, zero-width spaces) as `\\u202e`-style escapes, so a value cannot
    reorder or hide the message around it."""
    return "".join(c if c.isprintable() or unicodedata.category(c) == "Zs" else _code(c) for c in text)


def _code(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def escape_markdown(text: str) -> str:
    """Every ASCII punctuation character backslash-escaped: Markdown and HTML show as typed."""
    return "".join(_ESCAPE.get(c, c) for c in text)


def plain(value, limit: int = LIMIT) -> str:
    """`value` (any object: str() of it) as plain, short, visible text for a Markdown-rendering
    call: shortened first (so the cut never splits an escape), then invisible characters
    written out, then Markdown escaped."""
    return escape_markdown(visible(short(str(value), limit)))
