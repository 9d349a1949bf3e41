"""The "Why this token?" page's settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from ui.views import PageView

TABS = (
    "Attribution",
    "Attribution vs ablation",
    "Intervene",
    "MLP neurons",
    "Activation patching",
    "Contribution graph",
    "SAE features",
)


@dataclass(frozen=True)
class WhyView(PageView):
    """The explained position, token and versus token (as typed: empty for the top prediction and
    for none), and the open tab. The patching panel's prompts are its own (ui.why_panels)."""

    LINK: ClassVar[Mapping[str, str]] = {"pos": "pos", "token": "token", "versus": "vs", "tab": "tab"}
    pos: int
    token: str
    versus: str
    tab: str
