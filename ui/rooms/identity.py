"""Who a browser is in a class room, kept out of every address anyone could share.

A student's id and a teacher's key live in this browser's session cookies (`STUDENT`, `TEACHER`:
"CODE.secret", no expiry: gone when the browser closes), written by a tiny script on the page and
read back with `st.context.cookies`, which Streamlit takes from the request that opened the
session. So a reload, or another app process after this one stopped, takes the room up again,
while a copied address (`?room=CODE`, a join link) signs nobody in, and the projected screen and
its address bar never show the teacher key.

Rate limits count per screen (`screen()`: this browser session) for wrong codes and keys, and per
address (`client()`) only for opening rooms: see services/rooms/rules.py.
"""

from __future__ import annotations

import json

import streamlit as st

from ui import models

STUDENT, TEACHER = "tfm_student", "tfm_teacher"


def client() -> str:
    """The asking browser's address, for limits on opening rooms: the address nginx saw (its
    X-Forwarded-For, which deploy/nginx.conf appends; only nginx reaches a class's processes),
    else the connection's address, else (a local browser) this session."""
    ip = st.context.ip_address
    ip = ip if isinstance(ip, str) else None  # (AppTest gives a mock)
    forwarded = st.context.headers.get("X-Forwarded-For") or ""
    if ip in (None, "127.0.0.1", "::1") and forwarded:
        return "ip:" + forwarded.split(",")[-1].strip()[:64]
    return f"ip:{ip}" if ip else "session:" + models.session_id()


def screen() -> str:
    """This browser session, for limits on wrong codes and keys (its own tries only)."""
    return "screen:" + models.session_id()


def saved(name: str) -> tuple[str, str] | None:
    """(code, secret) from this browser's cookie `name`, as the session was opened with it."""
    try:
        value = st.context.cookies.get(name)
    except (AttributeError, RuntimeError):  # (no browser: AppTest, a warming screen)
        return None
    if not isinstance(value, str) or value.count(".") != 1 or len(value) > 120:
        return None
    code, secret = value.split(".")
    return (code, secret) if code and secret else None


def write(name: str, code: str | None = None, secret: str | None = None) -> None:
    """Set (or, without a code, delete) this browser's cookie `name`, from this session's next
    draw on (`draw`)."""
    st.session_state.setdefault("room.cookies", {})[name] = f"{code}.{secret}" if code and secret else ""


def draw() -> None:
    """The script that writes the cookies this session set (`write`) and the browser lacks, drawn
    on every run (the same element each time: it runs once, and a run cut short by a rerun or a
    page switch does not lose it)."""
    lines, touched = [], st.session_state.setdefault("room.cookies_drawn", set())
    for name, value in st.session_state.get("room.cookies", {}).items():
        now = saved(name)  # (as the session opened: one this session wrote since is in `touched`)
        if (f"{now[0]}.{now[1]}" if now else "") != value or name in touched:
            touched.add(name)
            age = "" if value else "; max-age=0"
            # (json.dumps: a quoted JS string; codes, keys and ids are URL-safe letters, digits, - and _)
            lines.append(f"document.cookie = {json.dumps(f'{name}={value}; path=/; SameSite=Strict{age}')};")
    if lines:
        st.sidebar.html(f"<script>{' '.join(lines)}</script>", unsafe_allow_javascript=True)


def remember_student(code: str, sid: str) -> None:
    write(TEACHER)
    write(STUDENT, code, sid)


def remember_teacher(code: str, key: str) -> None:
    write(STUDENT)
    write(TEACHER, code, key)


def forget() -> None:
    write(STUDENT)
    write(TEACHER)
