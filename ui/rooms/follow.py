"""A student's screen following the teacher: it opens each pushed moment (unless the student
stepped away: then a button brings them back), redraws the Class page on a new question or a
reveal, and tells the teacher once it drew the moment (the push's "n of N show it")."""

from __future__ import annotations

import streamlit as st

from ui import links
from services.rooms import rules
from ui.rooms.session import NOT_PUSHED, PAGES, POLL_SECONDS, leave, role, store
from ui.text import plain


def follow(room) -> None:
    """Open the room's moment, with the room's code kept in the link (never who this is)."""
    ss, m = st.session_state, room.moment
    ss["room.seen"], ss["room.version"], ss["room.away"] = room.moment_id, room.version, False
    if m.page not in PAGES:
        st.warning(f"The teacher's page {plain(m.page)} is not one of this app's pages.")
        return
    params = dict(m.params)
    ss["room.followed"] = (m.page, tuple((k, v) for k, v in m.params if k not in NOT_PUSHED))
    ss["app.url_loaded"] = set()  # read every link setting again, as a freshly opened link
    ss.get("links.shown", {}).pop(m.page, None)  # (what the page showed before is not what it shows now)
    if "model" in params:
        ss.pop("app.model_spec", None)
    st.switch_page(f"pages/{m.page}.py", query_params={**params, "room": ss["room.code"]})


def _away() -> bool:
    """The student changed page or a setting since following the teacher's last moment."""
    followed = st.session_state.get("room.followed")
    if followed is None:  # not following anything yet
        return False
    page, params = followed
    shown = {**st.query_params.to_dict(), **links.shown_settings(page)}
    return st.session_state.get("app.page") != page or any(shown.get(k) != v for k, v in params)


def _report(room) -> None:
    """Tell the teacher this screen drew the moment it follows (on a fragment's own run, which
    comes only after the whole page's run drew it)."""
    ss = st.session_state
    if (
        not ss.get("room.full_run")
        and room.moment_id == ss.get("room.seen")
        and room.moment_id
        and ss.get("room.reported") != room.moment_id
    ):
        store().showing(room.code, ss["room.sid"], room.moment_id)
        ss["room.reported"] = room.moment_id


@st.fragment(run_every=POLL_SECONDS)
def student_banner() -> None:
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
        if ss.get("app.page") == "classroom":  # a new question or a reveal: draw the page again
            st.rerun(scope="app")
    if not away:
        _report(room)
    code = rules.shown_code(room.code)
    if not away:
        st.caption(f"🏫 Class {code}: following the teacher.")
    elif st.button(
        f"🏫 Back to the class {code}" + (" (the teacher moved on)" if room.moment_id != ss.get("room.seen") else ""),
        key="room.back",
        type="primary",
    ):
        follow(room)
