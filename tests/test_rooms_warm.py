"""ui/rooms/warm.py's watcher without a server: which of a room's views a process opens, in what
order, once each, and that a view the teacher left is stopped. (tests/test_rooms_processes.py
checks the real thing: two app processes, the second one's students computing nothing.)"""
from __future__ import annotations

from ui.rooms import Moment, open_store
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
    assert opened == []                                   # nothing shown yet
    store.push(code, key, Moment("tour", (("prompt", "a"),)))
    store.preview(code, key, Moment("logit_lens", (("prompt", "b"),)))
    warmer.warm(code)
    warmer.warm(code)
    assert opened == [Moment("tour", (("prompt", "a"),)), Moment("logit_lens", (("prompt", "b"),))]
    store.preview(code, key, Moment("secrets", (("prompt", "c"),)))   # not one of this app's pages
    warmer.shown_here(Moment("tour", (("prompt", "d"),)).to_json())     # the teacher's own screen is here
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
            store.preview(code, key, second)   # the teacher moves on while it opens
            asked.append((moment, wanted()))
            return False                       # (open_view stops when wanted() is False)
        return True
    warmer = Warmer(lambda: store, {"tour"}, opener)
    store.preview(code, key, first)
    warmer.warm(code)
    warmer.warm(code)
    assert asked == [(first, True), (first, False), (second, True)]
    store.preview(code, key, first)
    warmer.warm(code)
    assert asked[-1] == (first, True)   # stopped before, so opened when it is shown again


def test_an_ended_room_is_no_longer_watched(tmp_path):
    store, code, key = views(tmp_path)
    warmer = Warmer(lambda: store, {"tour"}, lambda m, wanted: True)
    warmer.codes[code] = 0.0
    store.close(code, key)
    warmer.warm(code)
    assert code not in warmer.codes
