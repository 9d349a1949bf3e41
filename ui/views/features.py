"""The Features page's settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from ui.views import PageView


@dataclass(frozen=True)
class FeaturesView(PageView):
    """The feature opened (in the link)."""

    LINK: ClassVar[Mapping[str, str]] = {"feature": "feature"}
    feature: int
