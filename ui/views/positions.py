"""The positional-encodings page's settings."""

from __future__ import annotations

from dataclasses import dataclass

from ui.views import PageView


@dataclass(frozen=True)
class PositionsView(PageView):
    """Part 1's positions and sine dims (learned or sinusoidal models only: else 0 and ()), and
    part 3's table size (none in the link)."""

    max_pos: int
    dims: tuple[int, ...]
    d_model: int
    length: int
