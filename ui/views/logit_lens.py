"""The logit-lens page's settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from ui.views import PageView


@dataclass(frozen=True)
class LensView(PageView):
    """Which lens (in the link), and the window of positions start..start+width-1."""

    LINK: ClassVar[Mapping[str, str]] = {"kind": "lens"}
    kind: Literal["logit", "tuned"]
    width: int
    start: int
