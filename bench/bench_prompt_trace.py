"""A new prompt's trace in the app: eager for short prompts, lazy for long ones, against every
trace lazy (the app before `eager_trace_bytes`), in this one run.

    .venv/bin/python bench/bench_prompt_trace.py [--prompts 5] [--threads 1] [--no-gpt2]

Cases: the bundled model at 25 tokens and GPT-2 small's shape (random:gpt2) at 1024 tokens. For
each, with the server's `eager_trace_bytes` at 1 (every trace lazy: before) and at its default
(now), over `--prompts` different prompts (each new, so nothing is cached), medians of:
- engine: `ui.cache.run_traced` + reading one layer's pattern, and + reading every layer's;
- app (AppTest, server time): new prompt -> Attention page, and a visit's first three pages
  (Attention -> Logit lens -> Next-token sampling, as bench/bench_load.py's students), wall ms
  and the process's CPU ms (what bench_load's CPU-seconds per visit counts).
Figures only; nothing asserts on time. The 1024-token case traces lazily either way (2.75 GB
eager), so its two rows time the same path.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from streamlit.testing.v1 import AppTest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import app_on_gpt2, prompt_text, run_page  # noqa: E402

from tfm.core.lazy import prefer_lazy  # noqa: E402
from tfm.core.trace import estimate_trace_bytes  # noqa: E402
from ui import cache, models
from services import server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VISIT = ("attention", "logit_lens", "next_token")


def serve_eager_up_to(base: server.Settings, nbytes: int) -> None:
    server.configure(server.Settings(base.limits.replace(eager_trace_bytes=nbytes), base.model_roots))


def clocked(fn) -> tuple[float, float]:
    """(wall ms, process CPU ms: every thread) of one call."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return (time.perf_counter() - w) * 1e3, (time.process_time() - c) * 1e3


def engine(spec: str, lm, ids: tuple[int, ...], layers: int) -> tuple[float, float]:
    models.PROMPTS.clear()
    return clocked(lambda: [cache.run_traced(spec, "cpu", ids).pattern(i) for i in range(layers)])


def visit(at: AppTest, text: str) -> list[tuple[float, float]]:
    """Each page of VISIT for a new prompt: (wall ms, CPU ms)."""
    at.switch_page("pages/attention.py")
    at.text_area(key="sidebar.prompt").set_value(text)
    out = []
    for page in VISIT:
        at.switch_page(f"pages/{page}.py")
        out.append(clocked(lambda: run_page(at)))
    return out


def med(pairs: list[tuple[float, float]]) -> str:
    return (
        f"{statistics.median(p[0] for p in pairs):8.1f} ms wall, {statistics.median(p[1] for p in pairs):8.1f} ms CPU"
    )


def case(name: str, at: AppTest, spec: str, n: int, prompts: int, base: server.Settings) -> None:
    lm = models.load_lm(spec, "cpu")
    texts = [prompt_text(lm, n, tag=7 * n + k) for k in range(2 * prompts + 1)]
    size = estimate_trace_bytes(lm.config, len(texts[0][1]))
    default = base.limits.eager_trace_bytes
    print(
        f"\n## {name}, {len(texts[0][1])} tokens: eager trace {size / 1e6:.1f} MB, eager_trace_bytes "
        f"{default / 1e6:.0f} MB -> {'lazy' if prefer_lazy(lm.config, len(texts[0][1]), default) else 'eager'} now",
        flush=True,
    )
    visit(at, texts[-1][0])  # warm-up: the model and every page loaded once
    for k, (mode, nbytes) in enumerate((("before (every trace lazy)", 1), ("now", default))):
        serve_eager_up_to(base, nbytes)
        mine = texts[k * prompts : (k + 1) * prompts]  # prompts new to this mode
        one = [engine(spec, lm, ids, 1) for _, ids in mine]
        every = [engine(spec, lm, ids, lm.config.n_layer) for _, ids in mine]
        models.PROMPTS.clear()
        visits = [visit(at, text) for text, _ in mine]
        print(f"{mode:26s} run_traced + one pattern     {med(one)}", flush=True)
        print(f"{mode:26s} run_traced + every pattern   {med(every)}", flush=True)
        print(f"{mode:26s} new prompt -> Attention page {med([v[0] for v in visits])}", flush=True)
        totals = [(sum(p[0] for p in v), sum(p[1] for p in v)) for v in visits]
        print(f"{mode:26s} {' -> '.join(VISIT)} {med(totals)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=5, help="new prompts per mode (medians over them)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the app's server uses cores / 2)")
    ap.add_argument("--no-gpt2", action="store_true", help="only the bundled model at 25 tokens")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    server.configure(None)
    base = server.settings()
    print(f"# new prompt -> trace, {args.threads} torch thread(s), {args.prompts} prompts per row")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=900)
    at.run()
    case("bundled model", at, models.default_model_spec(), 25, args.prompts, base)
    if not args.no_gpt2:
        at, spec = app_on_gpt2()
        case("random:gpt2 (GPT-2 small shape)", at, spec, 1024, max(1, args.prompts // 3), base)
    server.configure(None)


if __name__ == "__main__":
    main()
