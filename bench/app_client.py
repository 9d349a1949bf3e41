"""The benches' Streamlit client and meters: a `Student` speaks the server's own websocket protocol
(the protobufs streamlit ships: BackMsg out, ForwardMsg in), so a student costs a thread and a
socket, not a browser; `Peak` samples a server's process tree (RSS, CPU); `start_server` and
`stop_server` run `streamlit run app.py` on a port. bench_load.py re-exports them."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import psutil
import websocket
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

ROOT = Path(__file__).resolve().parents[1]

STEPS = (
    "attention",
    "logit_lens",
    "next_token",
    "next_token: top-p slider",
    "why",
    "tour",
    "generate (open)",
    "generate: 32 tokens",
)
SETTLE = 0.3  # s: a metered run's CPU is read this long after its script finished
CHARTED = 5  # the first steps must draw a chart (a page that drew nothing would look fast)
WIDGETS = {"number_input", "slider", "button", "text_area", "selectbox", "radio", "checkbox", "text_input"}


@dataclass
class Run:
    seconds: float
    errors: list[str]
    busy: bool
    widgets: dict[str, tuple[str, object]]  # user key -> (widget id, element proto)
    charts: int
    texts: list[str]  # markdown bodies
    warnings: list[str]  # warning boxes (a link the page could not follow, ...)


class Student:
    """One browser tab, as the server sees it: a websocket session with its own widget state."""

    def __init__(self, port: int, prompt: str, timeout: float, model: str | None = "default", meter=None) -> None:
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{port}/_stcore/stream", timeout=timeout, origin=f"http://127.0.0.1:{port}"
        )
        # model None: no model in the link, so the page opens the server's own default model
        self.query = urlencode({"prompt": prompt} | ({} if model is None else {"model": model}))
        self.prompt, self.pages, self.widgets, self.generated = prompt, {}, {}, 0
        # meter (the server's CPU-seconds so far): each run's server CPU into self.cpu, settled
        # SETTLE s after the script finished (the server still sends and tidies up)
        self.meter, self.cpu = meter, []

    def send(self, page: str, states: list[WidgetState] = ()) -> None:
        """Ask for a run of `page` with these widget states, as a browser does, without waiting
        (a click while the page still runs: `run` waits for its end)."""
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = self.query
        cs.page_name = page
        if page in self.pages:
            cs.page_script_hash = self.pages[page]
        cs.widget_states.widgets.extend(states)
        self.ws.send_binary(msg.SerializeToString())

    def run(self, page: str, states: list[WidgetState] = ()) -> Run:
        cpu0 = self.meter() if self.meter else 0.0
        start = time.perf_counter()
        self.send(page, states)
        errors, busy, widgets, self.charts, self.texts, self.warnings = [], False, {}, 0, [], []
        while True:
            fm = ForwardMsg()
            fm.ParseFromString(self.ws.recv())
            kind = fm.WhichOneof("type")
            if kind == "navigation":
                self.pages.update({p.url_pathname: p.page_script_hash for p in fm.navigation.app_pages})
            elif kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
                busy |= self._read_element(fm.delta.new_element, errors, widgets)
            elif kind == "script_finished":
                if fm.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    continue
                break
        self.widgets = widgets
        took = time.perf_counter() - start
        if self.meter:
            time.sleep(SETTLE)
            self.cpu.append(self.meter() - cpu0)
        return Run(took, errors, busy, widgets, self.charts, self.texts, self.warnings)

    def _read_element(self, el, errors: list[str], widgets: dict) -> bool:
        kind = el.WhichOneof("type")
        if kind == "plotly_chart":
            self.charts += 1
        elif kind == "markdown":
            self.texts.append(el.markdown.body)
        elif kind == "exception":
            errors.append(f"exception: {el.exception.message[:200]}")
        elif kind == "alert" and el.alert.format == el.alert.ERROR:
            errors.append(f"error box: {el.alert.body[:200]}")
        elif kind == "alert" and el.alert.format == el.alert.WARNING:
            self.warnings.append(el.alert.body[:200])
        elif kind in WIDGETS:
            w = getattr(el, kind)
            key = w.id.rsplit("-", 1)[-1] if w.id.startswith("$$ID") else w.id
            widgets[key] = (w.id, w)
            if key == "sidebar.prompt" and w.HasField("value") and w.value != self.prompt:
                errors.append("the sidebar shows another student's prompt")
        return kind == "alert" and "server is busy" in el.alert.body

    def widget(self, key: str) -> str:
        if key not in self.widgets:
            raise RuntimeError(f"no widget {key!r} on the page; found {sorted(self.widgets)[:20]}")
        return self.widgets[key][0]

    def visit(self, new_tokens: int) -> list[Run]:
        runs = [self.run("attention"), self.run("logit_lens"), self.run("next_token")]
        top_p = WidgetState(id=self.widget("next.top_p"))
        top_p.double_array_value.data.append(0.9)
        runs.append(self.run("next_token", [top_p]))
        runs += [self.run("why"), self.run("tour"), self.run("generate")]
        n = WidgetState(id=self.widget("gen.max_new"), int_value=new_tokens)
        go = WidgetState(id=self.widget("gen.run"), trigger_value=True)
        # a chat model's page opens in chat mode (its own question): continue the student's prompt instead
        plain = (
            [WidgetState(id=self.widget("gen.mode"), string_value="Plain text")] if "gen.mode" in self.widgets else []
        )
        runs.append(self.run("generate", plain + [n, go]))
        self.ws.close()
        for name, r in zip(STEPS[:CHARTED], runs):  # a page that drew nothing would look fast
            if not r.charts:
                r.errors.append(f"{name} drew no chart")
        made = [t for t in runs[-1].texts if " tokens in " in t and "tokens/s" in t]
        if not made:
            runs[-1].errors.append("no generation summary: the text was not generated")
        else:
            self.generated = int(made[0].strip("*").split()[0])
        return runs


@dataclass
class Peak:
    """The server process tree's peak RSS, sampled every 50 ms while students run."""

    proc: psutil.Process
    peak: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def tree(self) -> list[psutil.Process]:
        return [self.proc, *self.proc.children(recursive=True)]

    def rss(self) -> int:
        return sum(p.memory_info().rss for p in self.tree())

    def cpu(self) -> float:
        return sum(t.user + t.system for t in (p.cpu_times() for p in self.tree()))

    def sample(self) -> None:
        while not self.stop.wait(0.05):
            self.peak = max(self.peak, self.rss())


class MachineCPU(Peak):
    """With --port (servers this script did not start, e.g. deploy/run_class.sh's): the CPU the
    whole machine spent, less this script's own, as the servers' CPU. Honest only on a machine
    doing nothing else (the load average is printed before and after); RSS is not measured."""

    def cpu(self) -> float:
        t = psutil.cpu_times()
        return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) - super().cpu()

    def rss(self) -> int:
        return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, app_flags: list[str]) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app.py",
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--browser.gatherUsageStats",
        "false",
        "--",
        *app_flags,
    ]
    log = Path(tempfile.gettempdir()) / f"bench_load-server-{port}.log"  # a pipe nobody reads would fill and block it
    print(f"server log: {log}")
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    for _ in range(300):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).read() == b"ok":
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the server did not start: {log.read_text(errors='replace')[-2000:]}")


def stop_server(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
