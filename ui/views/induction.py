"""The Induction-head page's settings."""

from __future__ import annotations

from dataclasses import dataclass

from ui.views import PageView


@dataclass(frozen=True)
class InductionView(PageView):
    """The training run's seed and steps (none in the link); the scrubber's layer, head and step
    belong to the finished run it scrubs."""

    seed: int
    steps: int
