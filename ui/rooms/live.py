"""A class room inside the app: the banner every page draws (from `ui.sidebar.render`): the teacher's "Push this view to the class", and a
student's screen following the teacher's moments.

A moment is a link: the teacher's page and every link setting it shows, defaults included
(model, prompt, seed, Tour step, head, temperature: `links.shown_settings`), so a student's own
prompt or model never stays on screen under "following the teacher". A student follows it by
opening that link, so every setting goes through the pages' own checks for links
(`links.url_init`, clamps, caps) and is traced once per process for every student who looks at
it. Who a browser is (a student's id, a teacher's key) lives in its session cookies
(`identity.py`), never in the address: a reload, or another process after theirs died, takes the
room up again; a copied address signs nobody in.
Every process of the class opens the teacher's view as soon as the teacher's screen shows it
(`ui/rooms/warm.py`), so a push finds it computed wherever its students are.
"""

from __future__ import annotations

import time

import streamlit as st

from ui import links
from services.rooms import Moment, rules
from ui.rooms import follow, identity, warm
from ui.rooms.session import NOT_PUSHED, PAGES, POLL_SECONDS, leave, role, store  # noqa: F401 (the page's names)
from ui.text import message

PUSH_SHOWN_SECONDS = 120  # how long the teacher's screen counts the students who show a push

_warmer = warm.Warmer(store, PAGES)  # this process's one watcher of its rooms' views


def current_moment() -> Moment:
    """What this screen shows, as a moment: its page and every link setting it shows, defaults
    included (not its own: NOT_PUSHED)."""
    page = st.session_state.get("app.page", "home")
    params = {**{k: st.query_params[k] for k in st.query_params}, **links.shown_settings(page)}
    return Moment(page, tuple(sorted((k, v) for k, v in params.items() if k not in NOT_PUSHED)))


def push(moment: Moment | None = None) -> Moment | None:
    """Send this screen's view (or `moment`) to every student: the pushed moment, or None."""
    ss = st.session_state
    try:
        moment = moment or current_moment()
        mid = store().push(ss["room.code"], ss["room.key"], moment)
    except (ValueError, PermissionError) as e:
        st.error(f"Not pushed: {message(e)}")
        return None
    ss["room.pushed"] = (mid, time.time())
    return moment


@st.fragment(run_every=POLL_SECONDS)
def push_status() -> None:
    """The last push's steps on the teacher's screen: sent, then how many students show it."""
    ss = st.session_state
    pushed = ss.get("room.pushed")
    if role() != "teacher" or not pushed or time.time() - pushed[1] > PUSH_SHOWN_SECONDS:
        return
    room = store().room(ss["room.code"])
    if room is None or room.moment_id != pushed[0]:
        return
    n = store().shown(room.code, pushed[0])
    st.caption(
        f"📣 Sent (view {pushed[0]}) · {n} of {room.students} students show it"
        + (" ✅" if room.students and n >= room.students else "…")
    )


def _taken_up() -> None:
    """This browser's own room, from its cookies, in a session that is not in it yet: after a
    reload, or on another process after theirs stopped. The teacher's first."""
    ss = st.session_state
    if role() or ss.get("room.left"):
        return
    teacher, student = identity.saved(identity.TEACHER), identity.saved(identity.STUDENT)
    try:
        if teacher is not None:
            ss["room.code"], ss["room.key"] = store().take_up(teacher[0], teacher[1], identity.screen()), teacher[1]
            return
        if student is not None:
            code = store().rejoin(*student)
            room = store().room(code)
            ss["room.code"], ss["room.sid"] = code, student[1]
            ss["room.seen"], ss["room.version"] = room.moment_id, room.version
    except (ValueError, PermissionError) as e:
        st.warning(f"This browser's class room was not opened again: {message(e)}")
        ss["room.left"] = True
        identity.forget()


def presenting() -> bool:
    """The Tour is projected in presentation mode, which hides the sidebar (tfm.viz.tour.PRESENT_CSS).
    (The banner runs before the page reads its toggle: a fresh link's `present=1` counts too.)"""
    ss = st.session_state
    if ss.get("app.page") != "tour":
        return False
    if "tour.present" in ss:
        return bool(ss["tour.present"])
    return st.query_params.get("present") in ("1", "true", "True")


def _reveal_here(code: str, qid: int) -> None:
    try:
        store().reveal(code, st.session_state["room.key"], qid)
    except (ValueError, PermissionError) as e:
        st.error(f"Not revealed: {message(e)}")
        return
    st.switch_page("pages/classroom.py")  # the projected answers, with the model's now


def _preview() -> None:
    """The view this screen shows, written to the room: every process of the class opens it too
    (warm.py), this one first (this run computes it here, before the others learn of it)."""
    ss = st.session_state
    try:
        moment = current_moment()
        if ss.get("room.previewed") != moment:
            _warmer.shown_here(moment.to_json())
            store().preview(ss["room.code"], ss["room.key"], moment)
            ss["room.previewed"] = moment
    except (ValueError, PermissionError):
        pass  # (a view too big to push: the push button says why; the room ended: the banner's check says so)


def _teacher_banner() -> None:
    """The teacher's push button in the sidebar; on a projected screen without one, a row above
    the page with the push, the open question's reveal and the way to the Class page."""
    ss = st.session_state
    _preview()
    caption = f"🏫 Your class {rules.shown_code(ss['room.code'])}"
    label, helped = (
        "Push this view to the class",
        "Every student's screen opens this page with this prompt, model and view.",
    )
    if not presenting():
        with st.sidebar:
            st.caption(caption)
            if st.button(label, key="room.push", icon="📣", help=helped):
                push()
            push_status()
        return
    room = store().room(ss["room.code"])
    q = room.question if room else None
    with st.container(horizontal=True, vertical_alignment="center", gap="medium"):  # (wraps on a narrow screen)
        st.caption(caption, width="content")
        if st.button(label, key="room.push", icon="📣", help=helped):
            push()
        push_status()
        if (
            q is not None
            and q.state == "open"
            and st.button("Reveal the model's answer", key="room.reveal_here", icon="🎯")
        ):
            _reveal_here(room.code, q.qid)
        st.page_link("pages/classroom.py", label="Class: ask, answers", icon="❓", width="content")


def banner() -> None:
    """The room's line on every page (ui.sidebar.render calls it last)."""
    ss = st.session_state
    _taken_up()
    note = ss.pop("room.note", None)
    if note:
        st.info(note)
    if role() in ("teacher", "student") and warm.serving():
        _warmer.watch(ss["room.code"])
    if role() == "teacher":
        if not store().is_teacher(ss["room.code"], ss["room.key"]):
            leave("This screen's teacher key is not the room's (or the room ended): open the teacher link again.")
            st.info(ss.pop("room.note"))
        else:
            identity.remember_teacher(ss["room.code"], ss["room.key"])
            _teacher_banner()
    elif role() == "student":
        identity.remember_student(ss["room.code"], ss["room.sid"])
        links.url_set(room=ss["room.code"])
        ss["room.full_run"] = True
        follow.student_banner()
        ss["room.full_run"] = False
    identity.draw()
