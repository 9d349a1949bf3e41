"""The encoder-decoder page's settings."""

from __future__ import annotations

from dataclasses import dataclass

from ui.views import PageView


@dataclass(frozen=True)
class EncDecView(PageView):
    """The task and training steps of a fresh model (none in the link); the try-it panel's digits,
    layer and head belong to the trained model it shows."""

    task: str
    steps: int
