"""Server-side timings of the Attention page, headless through AppTest. Prints numbers; no asserts.

    .venv/bin/python bench/bench_app.py [--repeats 5] [--profile] [--validate-figures]

- new prompt: a prompt never seen before (its trace is not cached) to the rendered page;
- layer/head change: the same prompt (cached trace), a different layer or head;
- the other views (model view, head view, head table) once their caches are warm.
Each number is the median of `--repeats` runs of `AppTest.run()`: wall time (script plus AppTest's
element tree), and the CPU time of the thread that ran the page script, which is what a run costs
when it has a core to itself (on the shared 2-core test machine wall time is mostly waiting).
Targets: layer/head change < 100 ms, new prompt < 300 ms at 256 tokens.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402
from streamlit.testing.v1.local_script_runner import LocalScriptRunner  # noqa: E402

import torch  # noqa: E402

from ui import models  # noqa: E402

WORDS = (
    "the cat sat on a mat while one small dog ran to find its ball near an old red house and "
    "every child in town came out to see what was going on that sunny day"
).split()


def prompt_of(n_tokens: int, tag: int, lm) -> tuple[str, int]:
    """A text of about n_tokens tokens whose ending (so its kept tokens) differs per `tag`."""
    words, text = [], ""
    while len(lm.tokenizer.encode(text)) < n_tokens - 4:
        words.append(WORDS[(len(words) * 7) % len(WORDS)])
        text = " ".join(words)
    text = f"{text} number {tag}"
    n = min(len(lm.tokenizer.encode(text)), lm.config.context_length)
    return text, n


SCRIPT_CPU: list[float] = []  # CPU seconds of each script thread, appended by the patch below


def measure_script_threads() -> None:
    """AppTest runs the page in a fresh thread per run: record that thread's CPU time. On a
    busy machine wall time mostly measures waiting for a core; with torch on one thread, the
    script thread's CPU time is what the run costs on a core of its own."""
    original = LocalScriptRunner._run_script_thread

    def run_measured(self):
        c0 = time.thread_time()
        try:
            original(self)
        finally:
            SCRIPT_CPU.append(time.thread_time() - c0)

    LocalScriptRunner._run_script_thread = run_measured


def timed_run(at: AppTest) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the script thread) of one AppTest run."""
    t0, n0 = time.perf_counter(), len(SCRIPT_CPU)
    at.run()
    dt = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(at.exception[0].message)
    return dt, sum(SCRIPT_CPU[n0:])


def open_attention() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.run()
    at.switch_page("pages/attention.py")
    timed_run(at)
    return at


def bench(n_tokens: int, repeats: int, lm) -> dict[str, float]:
    at = open_attention()
    out: dict[str, list[tuple[float, float]]] = {"new prompt": [], "layer/head change": []}
    n_layer, n_head = lm.config.n_layer, lm.config.n_head
    for i in range(repeats + 1):  # the first round warms imports and code paths; not counted
        text, n = prompt_of(n_tokens, 1000 * n_tokens + i, lm)
        at.text_area(key="sidebar.prompt").set_value(text)
        dt_new = timed_run(at)
        at.select_slider(key="attn.layer").set_value((i + 1) % n_layer)
        dt_layer = timed_run(at)
        at.select_slider(key="attn.head").set_value((i + 1) % n_head)
        dt_head = timed_run(at)
        if i:
            out["new prompt"].append(dt_new)
            out["layer/head change"] += [dt_layer, dt_head]
    for view in ("All heads", "Head view", "Head table"):
        at.session_state["attn.view"] = view
        timed_run(at)  # computes what the view caches (head scores, probe)
        out[f"{view} (warm)"] = []
        for i in range(repeats):
            at.select_slider(key="attn.layer").set_value(i % n_layer)
            out[f"{view} (warm)"].append(timed_run(at))
    res = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in out.items()}
    res["tokens"] = n
    return res


def profile_script_threads(prof: cProfile.Profile) -> None:
    """AppTest runs the page in a fresh thread per run: profile inside those threads."""
    original = LocalScriptRunner._run_script_thread

    def run_profiled(self):
        prof.enable()
        try:
            original(self)
        finally:
            prof.disable()

    LocalScriptRunner._run_script_thread = run_profiled


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="cProfile the 256-token run, print the top 40")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: the script thread does all the work)")
    ap.add_argument(
        "--validate-figures",
        action="store_true",
        help="build figures with plotly's validation, as before the speed-up (for comparison)",
    )
    return ap.parse_args()


def main() -> None:
    args = arguments()
    torch.set_num_threads(args.threads)
    measure_script_threads()
    if args.validate_figures:
        import plotly.graph_objects as go

        from tfm.viz import attention as fig_attention

        fig_attention._figure = lambda data, layout: go.Figure({"data": data, "layout": layout})
    spec = models.default_model_spec()
    lm = models.load_lm(spec, "cpu")
    print(f"model: {models.describe_spec(spec)}; torch threads: {torch.get_num_threads()}")
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(
        f"{'tokens':>6}  {'what':<24} {'wall ms':>8} {'cpu ms':>8}  target   (median of {args.repeats}; cpu = script thread)"
    )
    prof = cProfile.Profile() if args.profile else None
    for n_tokens in (64, 256):
        if prof and n_tokens == 256:
            profile_script_threads(prof)
        res = bench(n_tokens, args.repeats, lm)
        targets = {"new prompt": "< 300 ms at 256", "layer/head change": "< 100 ms"}
        for what, val in res.items():
            if what != "tokens":
                print(
                    f"{res['tokens']:>6}  {what:<24} {1000 * val[0]:>8.1f} {1000 * val[1]:>8.1f}  {targets.get(what, '')}"
                )
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
