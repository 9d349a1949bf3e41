"""Echoed values as plain text: every value from a link, a widget, a file or an engine message
that quotes one goes through `plain` before any Markdown-rendering st.* call (alerts, captions,
markdown, help, labels, chart titles). See tfm.core.escape for what it escapes and why."""

from __future__ import annotations

from tfm.core.escape import LIMIT, escape_markdown, plain as _plain
from tfm.core.trace_names import head_label

__all__ = ["LIMIT", "MESSAGE_LIMIT", "escape_markdown", "head_label", "message", "plain"]

MESSAGE_LIMIT = 400  # an engine message: long enough for what to change, never a whole paste


def plain(value, limit: int = LIMIT) -> str:
    """A value shown back to the user: escaped for Markdown and HTML, at most `limit` characters
    (then its length)."""
    return _plain(value, limit)


def message(error) -> str:
    """An exception's message for st.error / st.warning: engine messages may quote what the user
    sent, so the whole message is plain text, bounded."""
    return _plain(error, MESSAGE_LIMIT)
