"""Twelve clicks along the Steer page's strength slider kept the server busy for half a minute:
each superseded run's generation ran to its end inside its cached computation, where Streamlit's
stop request never reached it. Now a superseded run's computation stops within a token, unless
another session still waits for the same result, nothing half made is cached, and the page
shows the latest setting's result."""

from __future__ import annotations

import threading
import time

import pytest

from tfm.analysis.steering import calibrate as calib
from tfm.analysis.steering import vectors as steering
from tfm.core.cancel import Cancelled
from tfm.generation.generate import Generation
from tfm.core.escape import escape_markdown
from ui import cache, models, stopping
from ui.st_private import RerunData, ScriptRequests

from tests.app.conftest import open_page
from tests.test_app_cache import Waiter

PROMPT = "Once upon a time there was a little dog"


def asked(requests: ScriptRequests) -> tuple[bool, bool]:
    """(our probe's answer, then Streamlit's own: does its next yield point end the run?)"""
    ours = stopping.asked_to_stop(requests)
    return ours, requests.on_scriptrunner_yield() is not None


def test_the_stop_probe_answers_as_streamlits_own_yield_point_decides():
    running = ScriptRequests()
    running.request_rerun(RerunData())
    running.on_scriptrunner_ready()  # the run started: nothing pending
    assert asked(running) == (False, False)
    rerun = ScriptRequests()
    rerun.request_rerun(RerunData())
    rerun.on_scriptrunner_ready()
    rerun.request_rerun(RerunData(query_string="a=1"))  # fastReruns off: a click asks for a rerun
    assert asked(rerun) == (True, True)
    fragment = ScriptRequests()
    fragment.request_rerun(RerunData())
    fragment.on_scriptrunner_ready()
    fragment.request_rerun(RerunData(fragment_id="f"))  # a fragment's rerun does not end the page
    assert asked(fragment) == (False, False)
    stopped = ScriptRequests()
    stopped.request_stop()  # fastReruns (the default): the old run is stopped
    assert asked(stopped) == (True, True)


class Slow:
    """steering's `generate`, each token DELAY s slower (a slow machine), the tokens counted."""

    def __init__(self, delay: float) -> None:
        self.real, self.delay, self.made = steering.generate, delay, []

    def __call__(self, *args, **kwargs) -> Generation:
        gen = self.real(*args, **kwargs)

        def steps():
            for step in gen:
                self.made.append(time.perf_counter())
                time.sleep(self.delay)
                yield step

        return Generation(gen.prompt, gen.settings, steps())


def _session(left: dict, texts, strength: float, flag: Waiter, out: list) -> threading.Thread:
    """A thread standing for one browser session: it asks the cache for `texts` at `strength`, with
    `flag` as its "my page moved on" signal (`left`, by thread); `out` gets the texts or Cancelled."""

    def run():
        left[threading.get_ident()] = flag
        try:
            out.append(cache.derived("test.texts", texts, models.default_model_spec(), "cpu", strength, stoppable=True))
        except Cancelled as e:
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_steering_text_goes_on_while_another_session_waits_and_stops_when_none_does(monkeypatch):
    """Sessions as threads calling what the page calls (`cache.derived(..., stoppable=True)`),
    each with its own "my page moved on" flag in place of its script run's."""
    lm = models.load_lm(models.default_model_spec(), "cpu")
    vec = steering.pair_vector(lm, " happy", " sad", lm.config.n_layer // 2)
    slow, left, new = Slow(0.05), {}, 8
    monkeypatch.setattr(steering, "generate", slow)
    monkeypatch.setattr(stopping, "page_stop", lambda: left[threading.get_ident()])

    def texts(lm, strength, should_stop=None):
        return steering.steered_pair(lm, PROMPT, vec, strength, 1, new, 0.8, should_stop=should_stop)

    for strength, both_leave in ((2.0, False), (3.0, True)):
        slow.made.clear()
        a, b, out_a, out_b = Waiter(), Waiter(), [], []
        ta = _session(left, texts, strength, a, out_a)
        while len(slow.made) < 2:
            time.sleep(0.01)
        tb = _session(left, texts, strength, b, out_b)  # a second session asks for the same texts
        assert b.asked.wait(10)  # and waits for them
        a.left.set()  # the first one's student clicked again
        if both_leave:
            b.left.set()
        ta.join(30), tb.join(30)
        key = ("derived", models.default_model_spec(), "cpu", "test.texts", strength)
        if both_leave:
            assert isinstance(out_a[0], Cancelled) and isinstance(out_b[0], Cancelled)
            assert len(slow.made) < 2 * new and key not in models.PROMPTS.keys()
        else:
            monkeypatch.setattr(steering, "generate", slow.real)
            assert out_a[0] == out_b[0] == texts(lm, strength) and len(slow.made) == 2 * new
            monkeypatch.setattr(steering, "generate", slow)


def test_a_superseded_steer_run_stops_and_the_latest_strength_shows(monkeypatch):
    new = 16
    at = open_page("steer", PROMPT)
    at.number_input(key="steer.new").set_value(new).run()  # the calibration, vector and sweep are cached now
    slow = Slow(0.25)  # the texts alone would take >= 8 s
    monkeypatch.setattr(steering, "generate", slow)
    at.slider(key="steer.strength").set_value(1.0)
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="timed out"):
        at.run(timeout=1.0)  # then AppTest asks the run to stop, as a click does, and waits for its end
    assert time.perf_counter() - start < 1.0 + 2.0 and len(slow.made) < 12
    assert not [k for k in models.PROMPTS.keys() if k[3] == "steer.texts" and k[6] == 1.0]  # nothing half made
    monkeypatch.setattr(steering, "generate", slow.real)
    at.slider(key="steer.strength").set_value(1.2).run()
    assert not at.exception and not at.error
    lm, ss = models.load_lm(models.default_model_spec(), "cpu"), at.session_state
    vec = steering.pair_vector(lm, *calib.PAIR, int(ss["steer.layer"]), "mean")
    plain, steered = steering.steered_pair(lm, ss["steer.prompt"], vec, 1.2, int(ss["sidebar.seed"]), new, 0.8)
    shown = [" ".join(m.value.split()) for m in at.markdown]  # Streamlit trims blank lines
    assert " ".join(escape_markdown(plain).split()) in shown and " ".join(escape_markdown(steered).split()) in shown
    assert "Steered (strength +1.20)" in [h.value for h in at.subheader]
