"""The Induction-head page's lesson (`tfm.teach.lessons`): its settings from the page's view,
training it, and the probe's position labels."""

from __future__ import annotations

from tfm.teach.lessons import MAX_STEPS, LessonSettings, probe_tokens, train
from tfm.text.token_view import position_labels
from ui.views.induction import InductionView

__all__ = ["DEFAULT_STEPS", "MAX_STEPS", "lesson", "probe_labels", "train"]
DEFAULT_STEPS = LessonSettings().steps


def lesson(view: InductionView) -> LessonSettings:
    return LessonSettings(seed=view.seed, steps=view.steps)


def probe_labels(settings: LessonSettings) -> list[str]:
    """The probe's tokens (distinct random tokens written twice) as unique position labels."""
    return position_labels([str(t) for t in probe_tokens(settings).tolist()])
