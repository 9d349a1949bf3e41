"""Every use of Streamlit's internals in tfm, in one place: the app, its tests and its tools call
the small functions below and never name a Streamlit module other than `streamlit` itself and
`streamlit.testing.v1` (tests/test_streamlit_fence.py fails on any other use, anywhere but here).

Checked on Streamlit 1.67.0, the range pinned in requirements.txt and pyproject.toml
(`streamlit>=1.67,<1.68`; tests/test_streamlit_fence.py checks the installed version is inside it).
Before widening the pin, read each use below against the new release's source; each is also
exercised by a test named with it, so an upgrade that breaks one fails there, not in a class.

What each use relies on:

1. `run_context()`, `session_id()`, `run_requests()`: `streamlit.runtime.scriptrunner.
   get_script_run_ctx(suppress_warning=True)` returns the calling thread's `ScriptRunContext`
   (None outside a script run); its `session_id` (str) and `script_requests` (a `ScriptRequests`,
   None in AppTest's older runners). Used by ui.stopping, ui.heavy, ui.models.
   (tests/app/test_stopping.py, tests/app/test_concurrency.py)
2. `asked_to_stop(requests)`: `ScriptRequests._state` (a `ScriptRequestType`: CONTINUE, STOP,
   RERUN) and `._rerun_data` (`RerunData.fragment_id_queue`, `.is_fragment_scoped_rerun`), read
   as `ScriptRequests.on_scriptrunner_yield` reads them before taking its lock. Compared with
   that method itself in tests/app/test_stopping.py (`ScriptRequests`, `RerunData` below).
3. `serving()`, `Screen`, `open_screen`, `run_page`, `close_screen` (ui/rooms/warm.py: a browserless
   session of this process): `Runtime.exists()`, `Runtime.instance()` (a mock, not a `Runtime`, in
   AppTest), `Runtime._get_async_objs().eventloop` (the server's asyncio loop: session calls are
   not thread-safe), `Runtime.connect_session(client, user_info)` -> session id,
   `mark_session_nonresumable(sid)`, `handle_backmsg(sid, BackMsg)` with `BackMsg.rerun_script =
   ClientState(query_string, page_name)`, `close_session(sid)`; a `SessionClient` subclass gets
   every `ForwardMsg` (`script_finished`, `delta.new_element.exception`). (tests/test_rooms_warm.py,
   tests/test_rooms_processes.py)
4. `route_through_app(app)` (ui.sidebar): with a `pages/` folder next to app.py, Streamlit runs
   a fresh server's first requests in its legacy (v1) pages mode (`PagesManager.
   uses_pages_directory`, class-wide, None until the first session, cleared by st.navigation).
   (tests/e2e/test_routing_browser.py)
5. `navigation(pages, ...)` (app.py): that legacy mode's own navigation lists the `pages/` file
   stems in the sidebar until app.py's st.navigation replaces it, seconds later on a fresh server.
   `.streamlit/config.toml` sets `client.showSidebarNavigation = false`, which hides it (the
   legacy runner and st.navigation both read that option at call time); st.navigation's own
   sidebar is shown by setting the option back, public and scriptable, just before it.
   (tests/e2e/test_routing_browser.py)
6. `logger(name)`: `streamlit.logger.get_logger`, the server log at Streamlit's level.
   The one use left outside this module, by name only: services/server.py tells `streamlit run app.py`
   (sys.argv is then the app's flags) from AppTest or a shell by `"streamlit.web.bootstrap" in
   sys.modules`, the CLI's bootstrap module; it stays there so that services.server imports no Streamlit
   (a service: issue #52 item 4). tests/test_streamlit_fence.py allows that one string there.
7. Tests only: `cache_component_scan()` (`streamlit.components.v2.manifest_scanner.
   scan_component_manifests`, every AppTest's scan of installed packages, run once per process);
   `take_label_as_sent(el)` (`streamlit.runtime.state.common.TESTING_KEY`: AppTest's table of
   format functions, emptied for one widget); `number_is_int(el, kind)` (the `Slider` and
   `NumberInput` protos' `DataType`).
"""

from __future__ import annotations

import asyncio
import functools
import runpy
import threading
from pathlib import Path

import streamlit as st
from streamlit.components.v2 import manifest_scanner
from streamlit.logger import get_logger
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.NumberInput_pb2 import NumberInput
from streamlit.proto.Slider_pb2 import Slider
from streamlit.runtime import Runtime
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner import get_script_run_ctx
from streamlit.runtime.scriptrunner_utils.script_requests import RerunData, ScriptRequests, ScriptRequestType
from streamlit.runtime.session_manager import SessionClient
from streamlit.runtime.state.common import TESTING_KEY

__all__ = [
    "RerunData",
    "Screen",
    "ScriptRequests",
    "asked_to_stop",
    "cache_component_scan",
    "close_screen",
    "logger",
    "navigation",
    "number_is_int",
    "open_screen",
    "route_through_app",
    "run_context",
    "run_page",
    "run_requests",
    "serving",
    "session_id",
    "take_label_as_sent",
]
_ENDED = (ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_WITH_COMPILE_ERROR)


# 1. The current script run.
def run_context():
    """The calling thread's script run context, None outside a script run (a test's thread)."""
    return get_script_run_ctx(suppress_warning=True)


def session_id() -> str | None:
    """This browser session's id, None outside a script run."""
    ctx = run_context()
    return None if ctx is None else ctx.session_id


def run_requests() -> ScriptRequests | None:
    """What this run was asked (stop, rerun), None outside a script run."""
    ctx = run_context()
    return None if ctx is None else ctx.script_requests


# 2. Was this run asked to end?
def asked_to_stop(requests: ScriptRequests) -> bool:
    """True once this run was asked to stop, or to rerun the whole page (a fragment's rerun that
    does not interrupt the page does not count). Reads without consuming the request."""
    state = requests._state
    if state is ScriptRequestType.STOP:
        return True
    if state is not ScriptRequestType.RERUN:
        return False
    data = requests._rerun_data
    return not (data.fragment_id_queue and not data.is_fragment_scoped_rerun)


# 3. A browserless session of this server process.
def serving() -> bool:
    """Inside a Streamlit server: not AppTest (whose runtime is a mock) nor a library's caller."""
    return Runtime.exists() and type(Runtime.instance()) is Runtime


class Screen(SessionClient):
    """A session's client that keeps nothing: it only notes that a whole run finished, and errors."""

    def __init__(self) -> None:
        self.finished = threading.Event()
        self.errors: list[str] = []

    def write_forward_msg(self, msg: ForwardMsg) -> None:  # (on the event loop: must not raise)
        kind = msg.WhichOneof("type")
        if kind == "script_finished" and msg.script_finished in _ENDED:
            self.finished.set()
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            if msg.delta.new_element.WhichOneof("type") == "exception":
                self.errors.append(msg.delta.new_element.exception.message[:200])

    @property
    def client_context(self):
        return None


def _on_loop(fn, *args):
    """`fn(*args)` on the runtime's event loop (session calls are not thread-safe), its result."""

    async def call():
        return fn(*args)

    return asyncio.run_coroutine_threadsafe(call(), Runtime.instance()._get_async_objs().eventloop).result(30)


def open_screen(screen: Screen) -> str:
    """A new session of this server drawing into `screen`, which no websocket can take over: its id."""
    sid = _on_loop(Runtime.instance().connect_session, screen, {})
    Runtime.instance().mark_session_nonresumable(sid)
    return sid


def run_page(sid: str, page: str, query_string: str) -> None:
    """Run `page` in session `sid` as a browser opening its link would."""
    msg = BackMsg()
    msg.rerun_script.CopyFrom(ClientState(query_string=query_string, page_name=page))
    _on_loop(Runtime.instance().handle_backmsg, sid, msg)


def close_screen(sid: str) -> None:
    """End the session (a run still going is stopped)."""
    _on_loop(Runtime.instance().close_session, sid)


# 4 and 5. Navigation with a pages/ folder.
def route_through_app(app: Path) -> None:
    """In Streamlit's legacy pages mode (a fresh server's first requests), run app.py inside this
    run, whose st.navigation ends that mode and runs this same page (url paths equal file stems),
    then stop this outer run before it draws anything. Same run, so a click in it is not lost, as
    it would be with st.rerun(). Outside that mode: nothing."""
    if PagesManager.uses_pages_directory:
        runpy.run_path(str(app), run_name="__main__")
        st.stop()


def navigation(pages, **options):
    """st.navigation in the sidebar, shown although config.toml hides the legacy mode's list."""
    if st.get_option("client.showSidebarNavigation") is False:
        st.set_option("client.showSidebarNavigation", True)
    return st.navigation(pages, position="sidebar", **options)


# 6. The server log.
def logger(name: str):
    return get_logger(name)


# 7. Tests only.
def cache_component_scan() -> None:
    """Every new AppTest scans every installed package's metadata for components; scan once."""
    if not hasattr(manifest_scanner.scan_component_manifests, "cache_info"):
        manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)


def take_label_as_sent(el) -> None:
    """An AppTest select's next value is its displayed label, not passed through format_func again."""
    el.root.session_state[TESTING_KEY][el.id] = lambda v: v


def number_is_int(el, kind: str) -> bool:
    """Does this AppTest slider / number_input hold integers?"""
    types = Slider.DataType if kind == "slider" else NumberInput.DataType
    return el.proto.data_type == types.Value("INT")
