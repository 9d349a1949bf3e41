"""The Tour's settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from ui.views import PageView


@dataclass(frozen=True)
class TourView(PageView):
    """The step shown (its key), the token, block and head followed, and presentation mode: all in the link."""

    LINK: ClassVar[Mapping[str, str]] = {
        "step": "step",
        "pos": "pos",
        "layer": "layer",
        "head": "head",
        "present": "present",
    }
    step: str
    pos: int
    layer: int
    head: int
    present: bool
