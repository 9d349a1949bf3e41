"""What a page may show of an untrusted value (issue #29), shared by test_hostile_links.py and
fuzz.py: no link, image or HTML made from the value in any Markdown the page renders, and every
message bounded."""

from __future__ import annotations

import re

MAX_MESSAGE = 1_000  # characters of any alert or caption (the values are cut to ~80 + their length)
# Markup that would draw a link, an image or HTML once escaped characters are taken out.
MARKUP = re.compile(r"\]\(|<img|<a\s|https?://|www\.|\w@\w|<https")  # (a zero-width space breaks the last three)
MARKDOWN_KINDS = ("error", "warning", "info", "success", "caption", "markdown", "toast", "exception")


def rendered(at) -> list[str]:
    """The Markdown source of every element that renders Markdown, with the value's own text."""
    out = []
    for kind in MARKDOWN_KINDS:
        out += [str(getattr(el, "value", "")) for el in at.get(kind)]
    return out


def unescaped(source: str) -> str:
    """What Markdown acts on: a backslash-escaped character is plain text, so drop it."""
    return re.sub(r"\\.", "", source)


def markup_in(text: str) -> set[str]:
    return {m.group(0) for m in MARKUP.finditer(unescaped(text))}


def own_markup(at) -> set[str]:
    """Markup the page writes itself (its own links, if any), seen with a harmless link."""
    return {found for text in rendered(at) for found in markup_in(text)}


def markup_problems(at, baseline: set[str]) -> list[tuple[set[str], str]]:
    """(markup, text) of every rendered text holding markup the page does not write itself."""
    return [(found, text[:300]) for text in rendered(at) if (found := markup_in(text) - baseline)]


def long_messages(at) -> list[tuple[int, str]]:
    """(length, start) of every alert or caption longer than MAX_MESSAGE."""
    return [
        (len(el.value), el.value[:200])
        for el in [*at.error, *at.warning, *at.info, *at.caption]
        if len(el.value) > MAX_MESSAGE
    ]
