"""The sentence-similarity page's settings."""

from __future__ import annotations

from dataclasses import dataclass

from ui.views import PageView


@dataclass(frozen=True)
class SimilarityView(PageView):
    """The sentences compared (at most 8, each cut to 300 characters) and the pair opened (none in the link)."""

    texts: tuple[str, ...]
    a: int
    b: int
