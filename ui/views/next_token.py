"""The Next-token page's settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from ui.views import PageView


@dataclass(frozen=True)
class NextTokenView(PageView):
    """The sampling settings (in the link) and how many tokens the chart shows."""

    LINK: ClassVar[Mapping[str, str]] = {"temperature": "t", "top_k": "top_k", "top_p": "top_p"}
    temperature: float
    top_k: int
    top_p: float
    count: int
