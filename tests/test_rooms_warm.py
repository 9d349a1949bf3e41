"""ui/rooms/warm.py's watcher without a server: which of a room's views a process opens, in what
order, once each, and that a view the teacher left is stopped. (tests/test_rooms_processes.py
checks the real thing: two app processes, the second one's students computing nothing.) With
TFM_ROOMS_WARM=off the app runs without it: two real processes, a student's view computed cold."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import pytest

from services.rooms import Moment, open_store
from ui.rooms import warm
from ui.rooms.warm import Warmer


def views(tmp_path):
    store = open_store(tmp_path / "rooms.sqlite3")
    made = store.create("t")
    return store, made.code, made.teacher_key


def test_a_process_opens_the_pushed_view_then_the_previewed_one_once_each_on_its_own_pages(tmp_path):
    store, code, key = views(tmp_path)
    opened = []
    warmer = Warmer(lambda: store, {"tour", "logit_lens"}, lambda m, wanted: opened.append(m) or True)
    warmer.warm(code)
    assert opened == []  # nothing shown yet
    store.push(code, key, Moment("tour", (("prompt", "a"),)))
    store.preview(code, key, Moment("logit_lens", (("prompt", "b"),)))
    warmer.warm(code)
    warmer.warm(code)
    assert opened == [Moment("tour", (("prompt", "a"),)), Moment("logit_lens", (("prompt", "b"),))]
    store.preview(code, key, Moment("secrets", (("prompt", "c"),)))  # not one of this app's pages
    warmer.shown_here(Moment("tour", (("prompt", "d"),)).to_json())  # the teacher's own screen is here
    store.preview(code, key, Moment("tour", (("prompt", "d"),)))
    warmer.warm(code)
    assert len(opened) == 2


def test_a_view_the_teacher_left_is_no_longer_wanted_and_is_opened_again_if_shown_again(tmp_path):
    store, code, key = views(tmp_path)
    first, second = Moment("tour", (("prompt", "a"),)), Moment("tour", (("prompt", "b"),))
    asked = []

    def opener(moment, wanted):
        asked.append((moment, wanted()))
        if moment == first and len(asked) == 1:
            store.preview(code, key, second)  # the teacher moves on while it opens
            asked.append((moment, wanted()))
            return False  # (open_view stops when wanted() is False)
        return True

    warmer = Warmer(lambda: store, {"tour"}, opener)
    store.preview(code, key, first)
    warmer.warm(code)
    warmer.warm(code)
    assert asked == [(first, True), (first, False), (second, True)]
    store.preview(code, key, first)
    warmer.warm(code)
    assert asked[-1] == (first, True)  # stopped before, so opened when it is shown again


def test_an_ended_room_is_no_longer_watched(tmp_path):
    store, code, key = views(tmp_path)
    warmer = Warmer(lambda: store, {"tour"}, lambda m, wanted: True)
    warmer.codes[code] = 0.0
    store.close(code, key)
    warmer.warm(code)
    assert code not in warmer.codes


def test_the_switch_reads_on_and_off_and_refuses_anything_else():
    assert warm.enabled({}) and warm.enabled({warm.SWITCH: "on"}) and warm.enabled({warm.SWITCH: " ON "})
    assert not warm.enabled({warm.SWITCH: "off"})
    with pytest.raises(ValueError, match="'on' .* or 'off'"):
        warm.enabled({warm.SWITCH: "0"})


def test_with_the_warm_up_off_a_watched_room_starts_no_watcher_and_opens_nothing(tmp_path):
    store, code, key = views(tmp_path)
    store.preview(code, key, Moment("tour", (("prompt", "a"),)))
    opened = []
    off = Warmer(lambda: store, {"tour"}, lambda m, wanted: opened.append(m) or True, on=lambda: False)
    off.watch(code)
    off.watch(code)
    assert off.thread is None and off.codes == {} and opened == []
    on = Warmer(lambda: store, {"tour"}, lambda m, wanted: opened.append(m) or True, on=lambda: True)
    on.watch(code)  # the same room with it on: watched, and its view opened by the thread
    assert on.thread is not None and code in on.codes
    deadline = time.monotonic() + 30
    while not opened and time.monotonic() < deadline:
        time.sleep(0.05)
    assert opened == [Moment("tour", (("prompt", "a"),))]
    on.codes.clear()  # the thread ends at its next look


@pytest.mark.slow
def test_a_class_on_two_processes_runs_with_the_warm_up_off(tmp_path, monkeypatch):
    """Two real app processes sharing one rooms file, TFM_ROOMS_WARM=off: the student on the process
    the teacher is not on follows the push and gets the view, computed there when asked (its page
    shows the status line of uncached work), and that process's log says the warm-up is off."""
    from tests.e2e.conftest import SHOTS, streamlit_server
    from tests.test_rooms_processes import follow, joined, load_bench

    db = tmp_path / "rooms.sqlite3"
    monkeypatch.setenv("TFM_ROOMS_DB", str(db))
    monkeypatch.setenv(warm.SWITCH, "off")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    bench, store = load_bench(), open_store(db)
    with streamlit_server("server-warm-off-a") as url_a, streamlit_server("server-warm-off-b") as url_b:
        a, b = (int(u.rsplit(":", 1)[1]) for u in (url_a, url_b))
        made = store.create("teacher")
        ada = joined(bench, b, made.code, "Ada")
        params = {"model": "default", "prompt": "The teacher shows this prompt with the warm-up off.", "seed": "0"}
        teacher = bench.RoomStudent(a, made.code, 240)
        teacher.query = urlencode({"room": made.code, "teacher": made.teacher_key, **params})
        teacher.rerun()
        teacher.page, teacher.page_hash, teacher.query = "logit_lens", "", urlencode(params)
        teacher.rerun()
        assert not teacher.errors, teacher.errors
        ada.waited = []
        teacher.rerun([bench.WidgetState(id=teacher.widgets["room.push"], trigger_value=True)])
        follow(ada, lambda: params["prompt"] in ada.shown)
        assert ada.page == "logit_lens" and not ada.errors, ada.errors
        assert any(w.startswith("Running the model on") for w in ada.waited), ada.waited  # cold on b
    log_b = (SHOTS / "server-warm-off-b.log").read_text()
    assert "room warm-up is off (TFM_ROOMS_WARM=off)" in log_b
    assert "for the class" not in log_b  # b never opened a view itself


@pytest.mark.parametrize("switch", ["off", "on"])
def test_the_teachers_screen_says_when_the_warm_up_is_off(tmp_path, monkeypatch, switch):
    from tests.app.conftest import open_page

    monkeypatch.setenv("TFM_ROOMS_DB", str(tmp_path / "rooms.sqlite3"))
    monkeypatch.setenv(warm.SWITCH, switch)
    at = open_page("classroom")
    assert not any(c.value.startswith("Class warm-up is off") for c in at.sidebar.caption)  # in no room yet
    at.button(key="room.open").click().run()
    at.run()
    assert not at.exception, at.exception
    said = [c.value for c in at.sidebar.caption if c.value.startswith("Class warm-up is off")]
    assert len(said) == (switch == "off") and all("(TFM_ROOMS_WARM=off)" in t for t in said), said


def test_a_wrong_switch_is_a_wrong_server_setting(monkeypatch):
    from streamlit.testing.v1 import AppTest

    from tests.app.conftest import APP

    monkeypatch.setenv(warm.SWITCH, "maybe")
    at = AppTest.from_file(APP, default_timeout=120).run()
    assert not at.exception, at.exception
    assert [e.value.replace("\\", "") for e in at.error] == [  # (Markdown escapes removed)
        "The server's settings are wrong: TFM_ROOMS_WARM is 'maybe': set it to 'on' (the default) or 'off'."
    ]
