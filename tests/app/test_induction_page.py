"""Induction-head lesson page: trains on the page, then shows the engine's scores and patterns."""
from __future__ import annotations

import numpy as np

from tfm import analysis
from tfm.lessons import LessonSettings, probe_tokens
from ui import state

from tests.app.conftest import chart_by_title, decode, open_page


def test_training_on_the_page_shows_scores_and_patterns_of_the_run():
    at = open_page("induction")
    assert at.info and not at.get("plotly_chart")                   # nothing runs before Train is pressed
    at.slider(key="lesson.steps").set_value(100)
    at.button(key="lesson.train").click().run()
    assert not at.exception, at.exception
    res = state.finished(("induction", LessonSettings(seed=0, steps=100)))
    assert res is not None and len(res.losses) == 100
    det = analysis.induction_detection(probe_tokens(res.settings))
    scores = chart_by_title(at, "Induction score per head")["data"]
    for trace in scores:
        layer, head = int(trace["name"].split()[1]), int(trace["name"].split()[3])
        want = [float(analysis.detection_score(s.patterns[layer, head], det)) for s in res.snapshots]
        np.testing.assert_allclose(decode(trace["y"]), want, rtol=1e-5)
    np.testing.assert_allclose(decode(chart_by_title(at, "Loss")["data"][0]["y"]), res.losses, rtol=1e-6)
    at.select_slider(key="lesson.snap").set_value(res.snapshots[0].step).run()
    assert not at.exception
    layer, head = at.selectbox(key="lesson.layer").value, at.selectbox(key="lesson.head").value
    z = decode(chart_by_title(at, f"Step {res.snapshots[0].step}: layer {layer} head {head}")["data"][0]["z"])
    np.testing.assert_allclose(z, res.snapshots[0].patterns[layer, head].numpy(), rtol=1e-6)
    at.button(key="lesson.train").click().run()                      # a finished run is reused, not retrained
    assert state.finished(("induction", LessonSettings(seed=0, steps=100))) is res
