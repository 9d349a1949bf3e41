"""Every app process of a class opens the teacher's view itself, before its students ask for it.

A class is served by several app processes (deploy/run_class.sh N), each with its own cache of
traces and derived values (results are never pickled nor shared). Without this, a process that
did not draw the teacher's screen computed a pushed view cold while its students waited for it.
So each process watches the rooms its sessions are in (`watch(code)`, from the banner), and when
the teacher's screen shows a view (`Room.preview`, written on the teacher's runs before any push)
or pushes one, it opens that view once in a screen of its own: an in-process Streamlit session
with no browser (as Streamlit's own agent sessions are), given the moment's page and link, as a
student's screen is when it follows. The page's own code computes what a student's screen will
ask for (no second list of what each page needs), and the process's students find it cached, or
wait on that same computation (one per key: services.memory.ByteLRU), never a second one.

One view at a time per process, the newest: one no longer previewed nor pushed is stopped. The
process the teacher's screen is on does not open it again (one process: no cost at all).

A feature the app runs without: `TFM_ROOMS_WARM=off` (docs/class.md) turns it off, and a process
then draws a pushed view for its first student cold, as any page's first view (the page's status
line says it is computing; the teacher's sidebar, app.py, and the server log say the warm-up is
off). Streamlit's internals used to open a browserless session live in ui.st_private.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from typing import Callable
from urllib.parse import urlencode

from ui import st_private
from services.rooms import Moment, RoomStore

WATCH_SECONDS = 0.25  # how often a process looks at the rooms its sessions are in
FORGET_SECONDS = 600  # a room no session of this process drew for this long is not watched
OPEN_SECONDS = 300  # the longest one view may take to open
REMEMBERED = 64  # views this process opened, not opened again
SWITCH = "TFM_ROOMS_WARM"  # "off": no process opens the teacher's view ahead (docs/class.md)
_LOG = st_private.logger(__name__)  # (the server log, at its level: info by default)
serving = st_private.serving


def enabled(environ=os.environ) -> bool:
    """Is the warm-up on (the default)? `TFM_ROOMS_WARM=off` turns it off: each process then
    computes a pushed view when its first student asks for it (a cold first view), nothing more."""
    value = environ.get(SWITCH, "on").strip().lower()
    if value not in ("on", "off"):
        raise ValueError(f"{SWITCH} is {value[:20]!r}: set it to 'on' (the default) or 'off'.")
    return value == "on"


def open_view(moment: Moment, wanted: Callable[[], bool] = lambda: True, timeout: float = OPEN_SECONDS) -> bool:
    """Run `moment`'s page with its link in a browserless session of this process, until the
    run ends (True), or until `wanted()` is False or `timeout` passed (False: stopped). False at
    once outside a Streamlit server (AppTest, a library user)."""
    if not serving():
        return False
    screen = st_private.Screen()
    sid = st_private.open_screen(screen)  # no websocket can take this session over
    try:
        st_private.run_page(sid, moment.page, urlencode(moment.params))
        deadline = time.monotonic() + timeout
        while not screen.finished.wait(WATCH_SECONDS):
            if time.monotonic() > deadline or not wanted():
                return False
        if screen.errors:
            _LOG.warning("opening %s for the class showed: %s", moment.page, screen.errors[0])
        return True
    finally:
        st_private.close_screen(sid)  # stops a run still going; its unwanted computations stop


class Warmer:
    """The one watcher of this process: a thread that runs while any room is watched."""

    def __init__(
        self, store: Callable[[], RoomStore], pages: set[str], opener=open_view, on: Callable[[], bool] = enabled
    ) -> None:
        self.store, self.pages, self.opener, self.on = store, pages, opener, on
        self.lock = threading.Lock()
        self.codes: dict[str, float] = {}  # room code -> when last drawn here
        self.opened: OrderedDict[str, float] = OrderedDict()  # moment JSON -> seconds it took
        self.thread: threading.Thread | None = None
        self.said_off = False

    def watch(self, code: str) -> None:
        """Watch this room's views (a session of this process is in it); with the warm-up off,
        only say once in the server log that this process's first view of a push is cold."""
        if not self.on():
            if not self.said_off:
                self.said_off = True
                _LOG.info(
                    "room warm-up is off (%s=off): this process computes a pushed view when its "
                    "first student asks for it",
                    SWITCH,
                )
            return
        with self.lock:
            self.codes[code] = time.monotonic()
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="tfm-rooms-warm", daemon=True)
                self.thread.start()

    def shown_here(self, view: str) -> None:
        """The teacher's own screen in this process draws `view` (a moment's JSON): not opened again."""
        with self.lock:
            self._remember(view, 0.0)

    def _remember(self, view: str, seconds: float) -> None:
        self.opened[view] = seconds
        self.opened.move_to_end(view)
        while len(self.opened) > REMEMBERED:
            self.opened.popitem(last=False)

    def _run(self) -> None:
        while True:
            with self.lock:
                now = time.monotonic()
                self.codes = {c: t for c, t in self.codes.items() if now - t < FORGET_SECONDS}
                if not self.codes:
                    self.thread = None
                    return
                codes = list(self.codes)
            for code in codes:
                try:
                    self.warm(code)
                except Exception:  # noqa: BLE001 (a store hiccup: logged, the next look tries again)
                    _LOG.exception("warming room %s's view", code[:2])
            time.sleep(WATCH_SECONDS)

    def _views(self, code: str) -> tuple[str, ...]:
        room = self.store().room(code)
        if room is None:
            with self.lock:
                self.codes.pop(code, None)
            return ()
        # The pushed view first (students wait for it now), then the one the teacher looks at.
        return tuple(m.to_json() for m in (room.moment, room.preview) if m is not None)

    def warm(self, code: str) -> None:
        """Open each of the room's views this process has not opened yet."""
        for view in self._views(code):
            moment = Moment.from_json(view)
            with self.lock:
                if view in self.opened or moment.page not in self.pages:
                    continue
            start = time.perf_counter()
            if self.opener(moment, lambda: view in self._views(code)):
                with self.lock:
                    self._remember(view, time.perf_counter() - start)
                _LOG.info("opened %s for the class in %.2f s", moment.page, time.perf_counter() - start)
