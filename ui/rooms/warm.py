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
wait on that same computation (one per key: ui.memory.ByteLRU), never a second one.

One view at a time per process, the newest: one no longer previewed nor pushed is stopped. The
process the teacher's screen is on does not open it again (one process: no cost at all).
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from typing import Callable
from urllib.parse import urlencode

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.logger import get_logger
from streamlit.runtime import Runtime
from streamlit.runtime.session_manager import SessionClient

from ui.rooms import Moment, RoomStore

WATCH_SECONDS = 0.25     # how often a process looks at the rooms its sessions are in
FORGET_SECONDS = 600     # a room no session of this process drew for this long is not watched
OPEN_SECONDS = 300       # the longest one view may take to open
REMEMBERED = 64          # views this process opened, not opened again
_LOG = get_logger(__name__)   # (the server log, at its level: info by default)
_ENDED = (ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_WITH_COMPILE_ERROR)


class _Screen(SessionClient):
    """A session's client that keeps nothing: it only notes that a whole run finished, and errors."""

    def __init__(self) -> None:
        self.finished = threading.Event()
        self.errors: list[str] = []

    def write_forward_msg(self, msg: ForwardMsg) -> None:   # (on the event loop: must not raise)
        kind = msg.WhichOneof("type")
        if kind == "script_finished" and msg.script_finished in _ENDED:
            self.finished.set()
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            if msg.delta.new_element.WhichOneof("type") == "exception":
                self.errors.append(msg.delta.new_element.exception.message[:200])

    @property
    def client_context(self):
        return None


def serving() -> bool:
    """Inside a Streamlit server: not AppTest (whose runtime is a mock) nor a library's caller."""
    return Runtime.exists() and type(Runtime.instance()) is Runtime


def _on_loop(fn, *args):
    """`fn(*args)` on the runtime's event loop (session calls are not thread-safe), its result."""
    async def call():
        return fn(*args)
    return asyncio.run_coroutine_threadsafe(call(), Runtime.instance()._get_async_objs().eventloop).result(30)


def open_view(moment: Moment, wanted: Callable[[], bool] = lambda: True, timeout: float = OPEN_SECONDS) -> bool:
    """Run `moment`'s page with its link in a browserless session of this process, until the
    run ends (True), or until `wanted()` is False or `timeout` passed (False: stopped). False at
    once outside a Streamlit server (AppTest, a library user)."""
    if not serving():
        return False
    rt, screen = Runtime.instance(), _Screen()
    sid = _on_loop(rt.connect_session, screen, {})
    try:
        rt.mark_session_nonresumable(sid)   # no websocket can take this session over
        msg = BackMsg()
        msg.rerun_script.CopyFrom(ClientState(query_string=urlencode(moment.params), page_name=moment.page))
        _on_loop(rt.handle_backmsg, sid, msg)
        deadline = time.monotonic() + timeout
        while not screen.finished.wait(WATCH_SECONDS):
            if time.monotonic() > deadline or not wanted():
                return False
        if screen.errors:
            _LOG.warning("opening %s for the class showed: %s", moment.page, screen.errors[0])
        return True
    finally:
        _on_loop(rt.close_session, sid)   # stops a run still going; its unwanted computations stop


class Warmer:
    """The one watcher of this process: a thread that runs while any room is watched."""

    def __init__(self, store: Callable[[], RoomStore], pages: set[str], opener=open_view) -> None:
        self.store, self.pages, self.opener = store, pages, opener
        self.lock = threading.Lock()
        self.codes: dict[str, float] = {}                      # room code -> when last drawn here
        self.opened: OrderedDict[str, float] = OrderedDict()   # moment JSON -> seconds it took
        self.thread: threading.Thread | None = None

    def watch(self, code: str) -> None:
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
