"""Induction-head lesson page: trains on the page, then shows the engine's scores and patterns."""

from __future__ import annotations

import numpy as np
import pytest

from tfm.teach.lessons import LessonSettings, probe_tokens
from ui import cache

from tests.app.conftest import chart_by_title, decode, open_page


@pytest.mark.slow  # a whole training run (the page opens in the quick matrix): CI only
def test_training_on_the_page_shows_scores_and_patterns_of_the_run():
    at = open_page("induction")
    assert at.info and not at.get("plotly_chart")  # nothing runs before Train is pressed
    assert at.slider(key="lesson.steps").value == LessonSettings().steps
    at.button(key="lesson.train").click().run()  # the default run: the head forms
    assert not at.exception, at.exception
    res = cache.finished(LessonSettings(seed=0))
    assert res is not None and len(res.losses) == LessonSettings().steps
    step, layer, head = res.formed_at()
    sentence = at.success[0].value
    assert f"layer {layer}, head {head}** became an induction head" in sentence and f"at step {step} " in sentence
    assert f"until step {res.plateau()[0]}," in sentence
    half = len(probe_tokens(res.settings)) // 2
    scores = chart_by_title(at, "Induction score per head")["data"]
    for trace in scores:  # the mean attention from each second-copy query to the key after its first copy
        layer, head = int(trace["name"].split()[1]), int(trace["name"].split()[3])
        want = [
            float(s.patterns[layer, head, np.arange(half, 2 * half), np.arange(1, half + 1)].mean())
            for s in res.snapshots
        ]
        np.testing.assert_allclose(decode(trace["y"]), want, rtol=1e-5)
    np.testing.assert_allclose(decode(chart_by_title(at, "Loss")["data"][0]["y"]), res.losses, rtol=1e-6)
    at.select_slider(key="lesson.snap").set_value(res.snapshots[0].step).run()
    assert not at.exception
    layer, head = at.selectbox(key="lesson.layer").value, at.selectbox(key="lesson.head").value
    z = decode(chart_by_title(at, f"Step {res.snapshots[0].step}: layer {layer} head {head}")["data"][0]["z"])
    np.testing.assert_allclose(z, res.snapshots[0].patterns[layer, head].numpy(), rtol=1e-6)
    at.button(key="lesson.train").click().run()  # a finished run is reused, not retrained
    assert cache.finished(LessonSettings(seed=0)) is res
