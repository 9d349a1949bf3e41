"""Attribution and ablation sweeps, and the "Why this token?" page. Prints numbers; no asserts.

    .venv/bin/python bench/bench_attribution.py [--tokens 64] [--repeats 3] [--no-gpt2] [--no-page]

For the bundled model and a random model of GPT-2 small's shape, at `--tokens` tokens:
- one plain forward (the unit), direct attribution (one traced forward + projections);
- the all-heads (+ all-MLPs) zero-ablation sweep batched (`tfm.analysis.patching.ablation_sweep`: the
  prompt repeated along the batch axis, one edit per row, chunked to a memory budget), as a
  multiple of one forward, against L x H + L (what sequential forwards would cost in forwards);
- the same sweep as sequential single-edit forwards: batched / sequential speed-up;
- residual-stream patching at every layer x position (`patching.patch_resid`: positions from the
  patched one on, on the unedited run's keys and values) against the same patches as whole-prompt
  rows (`patching.run_rows` with one `Patch` edit per row), the peer.
Then the page's first render at 256 tokens on the bundled model (AppTest, server side).
Targets: batched sweep < L x H forwards, faster than sequential; first render < 1 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

import tfm  # noqa: E402
from tfm.analysis import attribution, patching  # noqa: E402
from tfm.core import edits as E  # noqa: E402
from bench_scale import median_time  # noqa: E402


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    return median_time(fn, repeats)


@torch.inference_mode()
def sequential_sweep(lm, ids, metric) -> torch.Tensor:
    """The peer: one forward per edit, measuring the same position."""
    cfg, x, out = lm.config, torch.tensor([ids]), []
    rows = [[]] + [[E.AblateHead(l, h)] for l in range(cfg.n_layer) for h in range(cfg.n_head)]
    rows += [[E.AblateMLP(l)] for l in range(cfg.n_layer)]
    for edit in rows:
        h = lm.model.hidden(x, edits=edit)[:, metric.position]
        out.append(metric(lm.model.unembed(h)))
    return torch.cat(out)


@torch.inference_mode()
def resid_patching(lm, ids, metric, repeats: int) -> None:
    """patch_resid against its peer, whole-prompt rows with one Patch each: times and max |diff|."""
    cfg, g = lm.config, torch.Generator().manual_seed(1)
    corrupt = torch.randint(0, cfg.vocab_size, (len(ids),), generator=g).tolist()
    tr = lm.model(torch.tensor([ids]), trace=True).trace
    clean = [tr[f"blocks.{l}.resid_pre"][0] for l in range(cfg.n_layer)]
    rows = [
        [E.Patch(f"blocks.{l}.resid_pre", clean[l], positions=(p,))]
        for l in range(cfg.n_layer)
        for p in range(len(ids))
    ]
    fast = timed(lambda: patching.patch_resid(lm.model, clean, torch.tensor([corrupt]), metric), repeats)
    peer = timed(lambda: patching.run_rows(lm.model, corrupt, rows, metric.position), max(1, repeats // 2))
    diff = (
        (
            patching.patch_resid(lm.model, clean, torch.tensor([corrupt]), metric).ravel()
            - metric(patching.run_rows(lm.model, corrupt, rows, metric.position))
        )
        .abs()
        .max()
    )
    print(
        f"  residual patching, {len(rows)} rows {1000 * fast:9.1f} ms   (whole-prompt rows {1000 * peer:.1f} ms: "
        f"{peer / fast:.2f}x faster; max |diff| {float(diff):.2e})"
    )


def bench_model(name: str, lm, n_tokens: int, repeats: int) -> None:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, lm.config.vocab_size, (n_tokens,), generator=g).tolist()
    cfg = lm.config
    metric = patching.Metric(n_tokens - 1, int(lm.model(torch.tensor([ids])).logits[0, -1].argmax()))
    with torch.inference_mode():
        fwd = timed(lambda: lm.model(torch.tensor([ids])), repeats)
    direct = timed(lambda: attribution.direct(lm, ids), repeats)
    batched = timed(lambda: patching.ablation_sweep(lm, ids, metric), repeats)
    seq = timed(lambda: sequential_sweep(lm, ids, metric), max(1, repeats // 2))
    sweep = patching.ablation_sweep(lm, ids, metric)
    check = sequential_sweep(lm, ids, metric)
    diff = float((torch.cat([torch.tensor([sweep.base]), sweep.heads.flatten(), sweep.mlps]) - check).abs().max())
    rows = 1 + cfg.n_layer * cfg.n_head + cfg.n_layer
    chunk = max(1, patching.BUDGET_BYTES // patching.row_bytes(cfg, n_tokens))
    print(
        f"\n{name}: {cfg.n_layer} layers x {cfg.n_head} heads, {n_tokens} tokens; sweep = {rows} rows in "
        f"chunks of {chunk} ({patching.row_bytes(cfg, n_tokens) / 2**20:.1f} MiB/row, budget "
        f"{patching.BUDGET_BYTES / 2**20:.0f} MiB); batched vs sequential max |diff| {diff:.2e}"
    )
    print(f"  one plain forward          {1000 * fwd:9.1f} ms   (1 forward)")
    print(f"  direct attribution         {1000 * direct:9.1f} ms   ({direct / fwd:.1f} forwards)")
    print(
        f"  batched ablation sweep     {1000 * batched:9.1f} ms   ({batched / fwd:.1f} forwards vs "
        f"L x H = {cfg.n_layer * cfg.n_head}, {rows} rows)"
    )
    print(f"  sequential single edits    {1000 * seq:9.1f} ms   ({seq / fwd:.1f} forwards)")
    print(f"  batched / sequential       {seq / batched:9.2f}x faster")
    resid_patching(lm, ids, metric, repeats)


def bench_page(n_tokens: int, repeats: int) -> None:
    """The page's first render of a new 256-token prompt (nothing cached for it)."""
    from bench_app import measure_script_threads, prompt_of, timed_run
    from streamlit.testing.v1 import AppTest

    from ui import models

    measure_script_threads()
    lm = models.load_lm(models.default_model_spec(), "cpu")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.run()
    at.switch_page("pages/why.py")
    timed_run(at)
    walls, cpus = [], []
    for i in range(repeats + 1):
        text, n = prompt_of(n_tokens, 7000 + i, lm)
        at.text_area(key="sidebar.prompt").set_value(text)
        wall, cpu = timed_run(at)
        if i:  # the first round warms code paths
            walls.append(wall)
            cpus.append(cpu)
    print(
        f"\nWhy this token? page, first render of a new {n}-token prompt (bundled model): "
        f"{1000 * statistics.median(walls):.0f} ms wall, {1000 * statistics.median(cpus):.0f} ms script CPU "
        f"(median of {repeats}; target < 1000 ms)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-gpt2", action="store_true")
    ap.add_argument("--no-page", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    bench_model("bundled default model", tfm.load("default"), args.tokens, args.repeats)
    if not args.no_gpt2:
        bench_model("GPT-2 small shape (random weights)", tfm.random_model("gpt2"), args.tokens, args.repeats)
    if not args.no_page:
        bench_page(256, args.repeats)


if __name__ == "__main__":
    main()
