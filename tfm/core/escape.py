"""Any value shown back to a user as plain, short text: the one escape of the project.

A value that came from a link, a widget or a file (or an engine message that quotes one) is
shown inside Markdown-rendering calls; without this a link such as `?seed=[Log in](https://x)`
draws a working link, or `![x](http://host/pixel)` fetches an image, inside the app's own UI.

    plain("[Log in](https://x)")  -> '\\[Log in\\](https\\://x)'   (renders as typed)
    short("a" * 50_000)            -> 'aaaa…a… (50,000 characters)'
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["plain", "short", "visible", "escape_markdown", "LIMIT", "ZWSP"]

LIMIT = 80  # characters of a value shown before it is cut
# What can make markup inside a line (`plain` writes newlines out with `visible`; other text keeps
# them, and each line is escaped as a line): code, emphasis, links and images (`[`), autolinks (`<`, `https:`, `a@b`,
# `www.`), HTML tags and entities, headings, tables, strikethrough, LaTeX `$`, Streamlit's
# `:color[...]` and `:emoji:` codes, and the backslash itself. An underscore inside a word is no
# emphasis (CommonMark), so `vocab_size` stays readable; a block marker is escaped at each line's start
# (after any indent: token text and generated text keep their newlines).
# GFM turns bare URLs and emails into links after parsing, in the text itself (escapes do not stop
# it): a zero-width space inside `https://`, `www.` and before `@` does (the text reads the same).
_AUTOLINK = re.compile(r"(?<=:)(?=//)|(?<=[wW]{3})(?=\.)|(?<=[\w.+-])(?=@)")
ZWSP = "\u200b"
_MARKUP = re.compile(r"[\\`*\[\]<>#|~$&:@]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|(?<=[wW]{3})\.")
_LINE_START = re.compile(r"^([ \t]*)(?:([-+=])|(\d{1,9})([.)]))", re.M)  # a list item, a setext underline


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
    """Every character that could start markup backslash-escaped and bare URLs and emails broken
    by a zero-width space: Markdown and HTML show as typed, and nothing becomes a link. The one
    Markdown escape of the project: echoed values (`plain`), token text, generated text."""
    text = _MARKUP.sub(lambda m: "\\" + m.group(0), _AUTOLINK.sub(ZWSP, text))
    return _LINE_START.sub(lambda m: m[1] + ("\\" + m[2] if m[2] else m[3] + "\\" + m[4]), text)


def plain(value, limit: int = LIMIT) -> str:
    """`value` (any object: str() of it) as plain, short, visible text for a Markdown-rendering
    call: shortened first (so the cut never splits an escape), then invisible characters
    written out, then Markdown escaped."""
    return escape_markdown(visible(short(str(value), limit)))
