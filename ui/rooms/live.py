"""A class room inside the app: this process's store, who the browser is, and the banner every
page draws (from `ui.sidebar.render`): the teacher's "Push this view to the class", and a
student's screen following the teacher's moments.

A moment is a link: the teacher's page and its link settings (model, prompt, Tour step, head,
temperature). A student follows it by opening that link, so every setting goes through the
pages' own checks for links (`links.url_init`, clamps, caps) and is traced once per process for
every student who looks at it. The student's own link keeps `room=` and `me=` (their id), so a
student whose app process died is taken up again by whichever process serves them next.
Every process of the class opens the teacher's view as soon as the teacher's screen shows it
(`ui/rooms/warm.py`), so a push finds it computed wherever its students are.
"""
from __future__ import annotations

import threading
from pathlib import Path

import streamlit as st

from ui import links, models, server
from ui.nav import SECTIONS
from ui.rooms import Moment, RoomStore, open_store, rules, warm
from ui.text import message, plain

POLL_SECONDS = 1.0   # how often a student's screen asks the store what the teacher shows
NOT_PUSHED = ("present", "device", "room", "me", "teacher")   # a screen's own, or a person's
PAGES = {Path(f).stem for entries in SECTIONS.values() for f, _, _ in entries}

_stores: dict[tuple[str, str], RoomStore] = {}
_lock = threading.Lock()


def store() -> RoomStore:
    """This process's store (SQLite file or Redis, from the server's settings), opened once."""
    s = server.settings()
    where = (str(s.rooms_db or ""), s.rooms_redis)
    with _lock:
        if where not in _stores:
            _stores[where] = open_store(s.rooms_db, s.rooms_redis)
        return _stores[where]


_warmer = warm.Warmer(store, PAGES)   # this process's one watcher of its rooms' views


def client() -> str:
    """Who is asking, for rate limits: the address nginx saw (deploy/nginx.conf appends it to
    X-Forwarded-For; only nginx reaches a class's processes), else the connection's address,
    else (a local browser) this session."""
    ip = st.context.ip_address
    ip = ip if isinstance(ip, str) else None   # (AppTest gives a mock)
    forwarded = st.context.headers.get("X-Forwarded-For") or ""
    if ip in (None, "127.0.0.1", "::1") and forwarded:
        return "ip:" + forwarded.split(",")[-1].strip()[:64]
    return f"ip:{ip}" if ip else "session:" + models.session_id()


def role() -> str | None:
    """"teacher", "student" or None: what this session is in its room."""
    ss = st.session_state
    if not ss.get("room.code"):
        return None
    return "teacher" if ss.get("room.key") else "student" if ss.get("room.sid") else None


def leave(note: str | None = None) -> None:
    for key in ("room.code", "room.key", "room.sid", "room.seen", "room.version", "room.away", "room.followed",
                "room.previewed"):
        st.session_state.pop(key, None)
    if note:
        st.session_state["room.note"] = note


def current_moment() -> Moment:
    """What this screen shows, as a moment: its page and link settings (not its own)."""
    params = {k: st.query_params[k] for k in st.query_params if k not in NOT_PUSHED}
    return Moment(st.session_state.get("app.page", "home"), tuple(sorted(params.items())))


def push(moment: Moment | None = None) -> None:
    ss = st.session_state
    try:
        store().push(ss["room.code"], ss["room.key"], moment or current_moment())
        st.toast("Pushed to the class")
    except (ValueError, PermissionError) as e:
        st.error(f"Not pushed: {message(e)}")


def _taken_up() -> None:
    """A student's own link (`room=`, `me=`) opened in a session that is not in its room yet:
    after a reload, or on another process after theirs stopped."""
    ss, qp = st.session_state, st.query_params
    if role() or "me" not in qp or "room" not in qp or ss.get("room.left"):
        return
    sid, code = qp["me"], qp["room"]
    try:
        code = store().rejoin(code, sid, client())
    except ValueError as e:
        st.warning(f"This link's class room was not opened: {message(e)}")
        ss["room.left"] = True
        return
    room = store().room(code)
    ss["room.code"], ss["room.sid"] = code, sid
    ss["room.seen"], ss["room.version"] = room.moment_id, room.version


def follow(room) -> None:
    """Open the room's moment, with this student's room and id kept in the link."""
    ss, m = st.session_state, room.moment
    ss["room.seen"], ss["room.version"], ss["room.away"] = room.moment_id, room.version, False
    if m.page not in PAGES:
        st.warning(f"The teacher's page {plain(m.page)} is not one of this app's pages.")
        return
    params = dict(m.params)
    ss["room.followed"] = (m.page, tuple((k, v) for k, v in m.params if k not in NOT_PUSHED))
    ss["app.url_loaded"] = set()   # read every link setting again, as a freshly opened link
    if "model" in params:
        ss.pop("app.model_spec", None)
    st.switch_page(f"pages/{m.page}.py", query_params={**params, "room": ss["room.code"], "me": ss["room.sid"]})


def _away() -> bool:
    """The student changed page or a setting since following the teacher's last moment."""
    followed = st.session_state.get("room.followed")
    if followed is None:   # not following anything yet
        return False
    page, params = followed
    return st.session_state.get("app.page") != page or any(st.query_params.get(k) != v for k, v in params)


@st.fragment(run_every=POLL_SECONDS)
def _student_banner() -> None:
    ss = st.session_state
    room = store().room(ss["room.code"]) if role() == "student" else None
    if room is None:
        leave("The class room has ended.")
        st.rerun(scope="app")
    away = ss.get("room.away") or _away()
    ss["room.away"] = away
    if room.moment_id != ss.get("room.seen") and room.moment is not None and not away:
        follow(room)
    if room.version != ss.get("room.version"):
        ss["room.version"] = room.version
        if ss.get("app.page") == "classroom":   # a new question or a reveal: draw the page again
            st.rerun(scope="app")
    code = rules.shown_code(room.code)
    if not away:
        st.caption(f"🏫 Class {code}: following the teacher.")
    elif st.button(f"🏫 Back to the class {code}" + (" (the teacher moved on)" if room.moment_id != ss.get("room.seen")
                                                    else ""), key="room.back", type="primary"):
        follow(room)


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
    st.switch_page("pages/classroom.py")   # the projected answers, with the model's now


def _teacher_banner() -> None:
    """The teacher's push button in the sidebar; on a projected screen without one, a row above
    the page with the push, the open question's reveal and the way to the Class page."""
    ss = st.session_state
    moment = current_moment()
    if ss.get("room.previewed") != moment:   # every process of the class opens it too (warm.py)
        try:
            _warmer.shown_here(moment.to_json())   # this run computes it here (before the others learn of it)
            store().preview(ss["room.code"], ss["room.key"], moment)
            ss["room.previewed"] = moment
        except (ValueError, PermissionError):
            pass   # (the room ended: the banner's own check says so on the next run)
    caption = f"🏫 Your class {rules.shown_code(ss['room.code'])}"
    label, helped = "Push this view to the class", "Every student's screen opens this page with this prompt, model and view."
    if not presenting():
        with st.sidebar:
            st.caption(caption)
            if st.button(label, key="room.push", icon="📣", help=helped):
                push()
        return
    room = store().room(ss["room.code"])
    q = room.question if room else None
    with st.container(horizontal=True, vertical_alignment="center", gap="medium"):   # (wraps on a narrow screen)
        st.caption(caption, width="content")
        if st.button(label, key="room.push", icon="📣", help=helped):
            push()
        if q is not None and q.state == "open" and st.button("Reveal the model's answer", key="room.reveal_here",
                                                             icon="🎯"):
            _reveal_here(room.code, q.qid)
        st.page_link("pages/classroom.py", label="Class: ask, answers", icon="❓", width="content")


def banner() -> None:
    """The room's line on every page (ui.sidebar.render calls it last)."""
    _taken_up()
    note = st.session_state.pop("room.note", None)
    if note:
        st.info(note)
    if role() in ("teacher", "student") and warm.serving():
        _warmer.watch(st.session_state["room.code"])
    if role() == "teacher":
        if not store().is_teacher(st.session_state["room.code"], st.session_state["room.key"]):
            leave("This screen's teacher key is not the room's (or the room ended): open the teacher link again.")
            st.info(st.session_state.pop("room.note"))
            return
        _teacher_banner()
    elif role() == "student":
        if st.session_state.get("room.sid") and not st.session_state.get("room.left"):
            links.url_set(room=st.session_state["room.code"], me=st.session_state["room.sid"])
        _student_banner()

