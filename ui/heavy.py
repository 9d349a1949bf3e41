"""A server-wide gate for heavy work (model loads, traced forwards, generation, training).

At most `slots` heavy computations run at once in the whole process; others wait with a visible
"the server is busy" status, polling so that a click (Stop, a changed setting) still interrupts
the wait. Light page runs (figures from cached traces) never take a slot, so one session's long
generation cannot block everyone's pages. A session holds at most one slot: its runs are serial
anyway, and a second tab of the same session id is told to wait for the first.
Rule: never call a cached loader while holding a slot (load first, then take the slot): a
loader waits for a slot inside its cache lock, so holders waiting on that lock would deadlock.
Re-entrant per thread: nested `heavy` blocks in one thread share the outer slot.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

import streamlit as st

from tfm.core import cancel
from tfm.core.cancel import ShouldStop
from services import server
from ui import st_private

POLL_S = 0.5


class Gate:
    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._sem = threading.BoundedSemaphore(slots)
        self._lock = threading.Lock()
        self._local = threading.local()
        self.running: dict[int, str] = {}  # thread id -> what it runs (script threads share one name)
        self.sessions: set[str] = set()  # sessions holding or waiting for a slot
        self.waiting = 0

    def busy(self) -> bool:
        return len(self.running) >= self.slots

    @contextmanager
    def hold(self, what: str, quiet: bool = False, should_stop: ShouldStop = None) -> Iterator[None]:
        """Run the block in a slot; `quiet` waits without drawing (inside cached functions), and
        leaves with Cancelled once `should_stop` (tfm.core.cancel) says nobody waits any more."""
        if getattr(self._local, "depth", 0):
            self._local.depth += 1
            try:
                yield
            finally:
                self._local.depth -= 1
            return
        session = None if quiet else _session_id()  # quiet waits happen inside shared caches
        with self._lock:
            twice = session is not None and session in self.sessions
            if session is not None and not twice:
                self.sessions.add(session)
        if twice:
            st.warning(
                f"This browser session is already running a heavy computation: wait for it to finish "
                f"before starting {what}."
            )
            st.stop()
        try:
            self._acquire(what, quiet, should_stop)
            self.running[threading.get_ident()] = what
            self._local.depth = 1
            try:
                yield
            finally:
                self._local.depth = 0
                self.running.pop(threading.get_ident(), None)
                self._sem.release()
        finally:
            with self._lock:
                self.sessions.discard(session)

    def _acquire(self, what: str, quiet: bool, should_stop: ShouldStop = None) -> None:
        if self._sem.acquire(blocking=False):
            return
        with self._lock:
            self.waiting += 1
        try:
            if quiet:
                while not self._sem.acquire(timeout=POLL_S):
                    cancel.check(should_stop, f"waiting for a slot for {what}")
                return
            box, start = st.empty(), time.perf_counter()
            while not self._sem.acquire(timeout=POLL_S):  # each redraw is a point where a click interrupts
                box.info(
                    f"⏳ The server is busy ({len(self.running)} heavy computations running, "
                    f"{self.waiting} waiting): {what} starts when a slot frees up… "
                    f"{time.perf_counter() - start:.0f} s"
                )
            box.empty()
        finally:
            with self._lock:
                self.waiting -= 1


def _session_id() -> str | None:
    return st_private.session_id()


_gate_lock = threading.Lock()
_gate: tuple[object, Gate] | None = None  # (the settings it was made for, the gate)


def gate() -> Gate:
    """The server's gate: one per settings (`server.configure` starts a fresh one), with its slots."""
    global _gate
    s = server.settings()
    with _gate_lock:
        if _gate is None or _gate[0] is not s or _gate[1].slots != s.limits.heavy_slots:
            _gate = (s, Gate(s.limits.heavy_slots))
        return _gate[1]


def slot(what: str, quiet: bool = False, should_stop=None):
    """`with heavy.slot("generation"):` run in one of the server's heavy-work slots (a quiet
    wait leaves with Cancelled once `should_stop` says so)."""
    return gate().hold(what, quiet, should_stop)
