"""Benchmark the sampling pages: `.venv/bin/python bench/bench_sampling_app.py` (prints, no asserts).

1. Next-token explorer: server time of one slider change (AppTest run of the page), and the
   number of model forward calls it makes (target: < 50 ms, 0 calls). Forward calls are
   counted by wrapping `GPT.forward` on the class, in this process only.
2. Generation: tokens/s of the generate page (AppTest, the page's own timer and the whole
   script run) against `tfm.generate` alone with the same arguments (target: >= 0.8x).
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tfm  # noqa: E402
from streamlit.runtime.scriptrunner import script_runner  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402
from tfm.core.model import GPT  # noqa: E402
from ui import models, sidebar  # noqa: E402

CALLS = {"forward": 0}
SCRIPT_S: list[float] = []  # time inside the page script itself, per run (without AppTest's own work)
_forward = GPT.forward
_exec = script_runner.exec_func_with_error_handling


def timed_exec(func, ctx):
    t0 = time.perf_counter()
    try:
        return _exec(func, ctx)
    finally:
        SCRIPT_S.append(time.perf_counter() - t0)


def counting_forward(self, *args, **kwargs):
    CALLS["forward"] += 1
    return _forward(self, *args, **kwargs)


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.run()
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, at.exception
    return at


def in_thread(fn):
    """Run `fn` in a fresh thread, as Streamlit runs page scripts: torch's intra-op threading
    behaves differently in the main thread, which would make the comparison unfair."""
    out = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def engine_tokens_per_s(lm, prompt, n_tokens, kw, traced):
    t0 = time.perf_counter()
    steps = list(tfm.generate(lm, prompt, n_tokens, **kw, trace=traced))
    return len(steps) / (time.perf_counter() - t0), [s.token_id for s in steps]


def bench_explorer(repeats: int = 20) -> None:
    at = open_page("next_token")
    temps = [0.5, 0.7, 1.0, 1.5, 0.2]
    at.select_slider(key="next.temperature").set_value(0.9).run()  # warm-up
    CALLS["forward"] = 0
    SCRIPT_S.clear()
    times = []
    for i in range(repeats):
        widget = at.select_slider(key="next.temperature").set_value(temps[i % len(temps)])
        t0 = time.perf_counter()
        widget.run()
        times.append(time.perf_counter() - t0)
    k_times = []
    for i in range(repeats):
        widget = at.slider(key="next.top_p").set_value([0.5, 0.9, 0.95, 1.0][i % 4])
        t0 = time.perf_counter()
        widget.run()
        k_times.append(time.perf_counter() - t0)
    ms = [1e3 * x for x in SCRIPT_S]
    print(
        f"explorer slider change, page script run (server time): median {statistics.median(ms):.1f} ms, "
        f"min {min(ms):.1f} ms, max {max(ms):.1f} ms over {len(ms)} changes (target < 50 ms)"
    )
    print(
        f"explorer temperature change, AppTest round trip: median {1e3 * statistics.median(times):.1f} ms, "
        f"min {1e3 * min(times):.1f} ms"
    )
    print(
        f"explorer top-p change, AppTest round trip:       median {1e3 * statistics.median(k_times):.1f} ms, "
        f"min {1e3 * min(k_times):.1f} ms"
    )
    print(f"model forward calls during {2 * repeats} slider changes: {CALLS['forward']} (target 0)")


def bench_generation(n_tokens: int = 64, repeats: int = 5) -> None:
    spec = models.default_model_spec()
    lm = models.load_lm(spec, "cpu")
    prompt, kw = sidebar.DEFAULT_PROMPT, dict(temperature=0.8, top_k=0, top_p=1.0, seed=0, use_cache=True)
    at = open_page("generate")
    at.number_input(key="gen.max_new").set_value(n_tokens).run()
    at.select_slider(key="gen.temperature").set_value(0.8).run()
    in_thread(lambda: engine_tokens_per_s(lm, prompt, 8, kw, True))  # warm-up
    app, app_wall, eng, eng_plain = [], [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        at.button(key="gen.run").click().run()
        wall = time.perf_counter() - t0
        assert not at.exception, at.exception
        last = at.session_state["gen.last"]
        n = len(last["samples"][0])
        app.append(n / last["seconds"])
        app_wall.append(n / wall)
        for traced, out in ((True, eng), (False, eng_plain)):
            tps, tokens = in_thread(lambda: engine_tokens_per_s(lm, prompt, n_tokens, kw, traced))
            out.append(tps)
        same = tokens == [r["token_id"] for r in last["samples"][0]]
    med = statistics.median
    print(
        f"generation, {n_tokens} tokens, KV cache, traced (as the app runs it), model {spec[:40]}; "
        f"{repeats} interleaved repeats, tokens/s as median / best / all (the machine may be shared)"
    )
    for name, xs in (
        ("app (page timer)", app),
        ("app (whole script run)", app_wall),
        ("engine alone, traced", eng),
        ("engine alone, untraced", eng_plain),
    ):
        print(f"  {name:24s} {med(xs):6.1f} / {max(xs):6.1f} / {' '.join(f'{x:.1f}' for x in xs)}")
    print(
        f"  app / engine (same args): median {med(app) / med(eng):.2f}x, best {max(app) / max(eng):.2f}x, "
        f"per pair {' '.join(f'{a / e:.2f}' for a, e in zip(app, eng))} (target >= 0.8x); same tokens: {same}"
    )


if __name__ == "__main__":
    GPT.forward = counting_forward
    script_runner.exec_func_with_error_handling = timed_exec
    torch.set_num_threads(max(1, torch.get_num_threads()))
    bench_explorer()
    bench_generation()
