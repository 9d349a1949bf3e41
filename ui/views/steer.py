"""The Steer page's settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ui.views import PageView


@dataclass(frozen=True)
class SteerView(PageView):
    """The page's own prompt, the direction's recipe (a prompt pair, or an SAE feature), how strongly
    and where it is added, the generation's length and temperature, and the words the sweep follows
    (none in the link)."""

    prompt: str
    source: Literal["Prompt pair", "SAE feature"]
    pos: str
    neg: str
    how: Literal["mean", "last"]
    layer: int
    feature: int
    strength: float
    where: Literal["all", "prompt", "generated"]
    new: int
    temperature: float
    first: bool
    words: str
