"""A class room's state in this browser session and this process's store, which every other
module of the Class page builds on (live.py draws the banner, follow.py a student's following)."""

from __future__ import annotations

import threading
from pathlib import Path

import streamlit as st

from services import server
from ui.nav import SECTIONS
from services.rooms import RoomStore, open_store
from ui.rooms import identity

POLL_SECONDS = 1.0  # how often a student's screen asks the store what the teacher shows
NOT_PUSHED = ("present", "device", "room", "me", "teacher")  # a screen's own, or a person's
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


def role() -> str | None:
    """ "teacher", "student" or None: what this session is in its room."""
    ss = st.session_state
    if not ss.get("room.code"):
        return None
    return "teacher" if ss.get("room.key") else "student" if ss.get("room.sid") else None


def leave(note: str | None = None) -> None:
    for key in (
        "room.code",
        "room.key",
        "room.sid",
        "room.seen",
        "room.version",
        "room.away",
        "room.followed",
        "room.previewed",
        "room.pushed",
        "room.reported",
        "room.csv",
    ):
        st.session_state.pop(key, None)
    identity.forget()
    if note:
        st.session_state["room.note"] = note
