"""The attention page's settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from ui.views import PageView


@dataclass(frozen=True)
class AttentionView(PageView):
    """The head (in the link), what is shown of it, and the window of positions a..b."""

    LINK: ClassVar[Mapping[str, str]] = {"layer": "layer", "head": "head"}
    layer: int
    head: int
    mode: Literal["head", "mean", "max", "rollout"]
    hide_first: bool
    log: bool
    a: int
    b: int
