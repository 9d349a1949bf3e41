"""The class-room benches' phone: `RoomStudent` speaks Streamlit's websocket protocol (as
app_client's students do) and, as a browser does, reruns the room banner's fragment when the server
asks it to, keeps the cookies the room's scripts set, and follows the page and query string the
server sends; `Class` is N of them, each following the room on its own thread. bench_rooms.py
re-exports them."""

from __future__ import annotations

import re
import threading
import time

import websocket
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

COOKIE = re.compile(r'document\.cookie = "(\w+)=([^;"]*);[^"]*?(max-age=0)?"')
DONE = (ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY)


class RoomStudent:
    """One phone in the room: a websocket session that follows what the server tells it."""

    def __init__(self, port: int, code: str, timeout: float, cookies: dict[str, str] | None = None) -> None:
        self.cookies = dict(cookies or {})  # as a browser keeps them: the room's scripts set them
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{port}/_stcore/stream",
            timeout=timeout,
            origin=f"http://127.0.0.1:{port}",
            cookie="; ".join(f"{k}={v}" for k, v in self.cookies.items()) or None,
        )
        self.query, self.page, self.page_hash, self.pages = f"room={code}", "classroom", "", {}
        self.fragment, self.interval = "", 1.0
        self.widgets: dict[str, str] = {}  # user key -> widget id, from the last full run
        self.options: list[str] = []
        self.shown: dict[str, float] = {}  # prompt -> when a run that drew it finished
        self.errors: list[str] = []
        self.notes: list[str] = []  # success boxes of the last run
        self.waited: list[str] = []  # status lines drawn (work not cached yet: computed or waited for)
        self.runs = 0

    def rerun(self, states: list[WidgetState] = (), fragment: str = "") -> None:
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string, cs.page_name = self.query, self.page
        if self.page_hash:
            cs.page_script_hash = self.page_hash
        if fragment:
            cs.fragment_id, cs.is_auto_rerun = fragment, True
        cs.widget_states.widgets.extend(states)
        self.ws.send_binary(msg.SerializeToString())
        self._read()

    def _read(self) -> None:
        prompt, self.notes = None, []
        while True:
            fm = ForwardMsg()
            fm.ParseFromString(self.ws.recv())
            kind = fm.WhichOneof("type")
            if kind == "navigation":
                self.pages.update({p.page_script_hash: p.url_pathname for p in fm.navigation.app_pages})
                self.page_hash = fm.navigation.page_script_hash
                self.page = self.pages.get(self.page_hash, self.page)
            elif kind == "page_info_changed":
                self.query = fm.page_info_changed.query_string
            elif kind == "auto_rerun":
                self.fragment, self.interval = fm.auto_rerun.fragment_id, fm.auto_rerun.interval
            elif kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
                prompt = self._element(fm.delta.new_element) or prompt
            elif kind == "delta" and fm.delta.WhichOneof("type") == "add_block":
                block = fm.delta.add_block
                if block.WhichOneof("type") == "expandable" and block.expandable.state:  # st.status, not an expander
                    self.waited.append(block.expandable.label)
            elif kind == "script_finished" and fm.script_finished in DONE:
                break
        self.runs += 1
        if prompt is not None:
            self.shown.setdefault(prompt, time.perf_counter())

    def _element(self, el) -> str | None:
        kind = el.WhichOneof("type")
        if kind == "exception":
            self.errors.append(f"exception: {el.exception.message[:200]}")
        elif kind == "alert" and el.alert.format == el.alert.ERROR:
            self.errors.append(f"error box: {el.alert.body[:200]}")
        elif kind == "alert" and el.alert.format == el.alert.SUCCESS:
            self.notes.append(el.alert.body)
        if kind == "html":  # ui/rooms/identity.py's script: who this browser is, in its cookies
            for name, value, gone in COOKIE.findall(el.html.body):
                self.cookies.pop(name, None) if gone else self.cookies.__setitem__(name, value)
        if kind not in ("text_area", "text_input", "radio", "button"):
            return None
        w = getattr(el, kind)
        key = w.id.rsplit("-", 1)[-1] if w.id.startswith("$$ID") else w.id
        self.widgets[key] = w.id
        if kind == "radio" and key.startswith("room.answer."):
            self.options = list(w.options)
        return w.value if kind == "text_area" and key == "sidebar.prompt" else None

    def join(self, code: str, nick: str) -> None:
        self.rerun()  # the join link: the Class page with the code filled in
        states = [
            WidgetState(id=self.widgets["room.join_code"], string_value=code),
            WidgetState(id=self.widgets["room.nick"], string_value=nick),
            WidgetState(id=self.widgets["room.join_go"], trigger_value=True),
        ]
        self.rerun(states)

    def answer(self, qid: int, pick: int) -> None:
        self.rerun(
            [
                WidgetState(id=self.widgets[f"room.answer.{qid}"], string_value=self.options[pick]),  # as shown
                WidgetState(id=self.widgets[f"room.send.{qid}"], trigger_value=True),
            ]
        )


class Class:
    """N students, each on a thread that follows the room until told to stop."""

    def __init__(self, port: int, code: str, n: int, timeout: float) -> None:
        self.students = [RoomStudent(port, code, timeout) for _ in range(n)]
        self.stop, self.go = threading.Event(), threading.Event()
        self.qid, self.sent, self.failures = 0, {}, []
        joined = [threading.Thread(target=s.join, args=(code, f"phone {i}")) for i, s in enumerate(self.students)]
        for t in joined:
            t.start()
        for t in joined:
            t.join()
        self.threads = [threading.Thread(target=self._follow, args=(i,), daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()

    def _follow(self, i: int) -> None:
        s = self.students[i]
        try:
            while not self.stop.is_set():
                if self.go.wait(s.interval) and i not in self.sent and s.options:
                    s.answer(self.qid, i % len(s.options))
                    self.sent[i] = time.perf_counter()
                elif s.fragment:
                    s.rerun(fragment=s.fragment)
        except Exception as e:  # noqa: BLE001 (a dropped socket is a failure to report, with its reason)
            self.failures.append(f"student {i}: {type(e).__name__}: {e}")

    def close(self) -> None:
        self.stop.set()
        self.go.set()
        for t in self.threads:
            t.join(timeout=30)
        for s in self.students:
            s.ws.close()
