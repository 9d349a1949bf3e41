"""Engine benchmark: the cost of the full trace, and tfm vs Hugging Face GPT-2 with attentions.

    .venv/bin/python bench/bench_engine.py [--runs N] [--warmup N] [--tokens T] [--threads N] [--profile]

GPT-2 small shape, random weights, batch 1, CPU, torch.no_grad. Contenders are timed in
alternation (A, B, A, B, ...) so drift from other load on the machine hits both alike, and the
median of the runs is reported. Figures only: nothing here asserts on time.
Targets: trace overhead <= 1.5x; tfm with all attention patterns >= 1.0x HF's speed; a lazy
trace plus one layer's pattern (what the Attention page reads first) <= 1.5x the plain forward.
On a machine whose load is far above its CPU count, the medians mostly measure waiting for a
CPU (each parallel op waits for both threads to be scheduled); the minimums are then the
better estimate of the cost itself, and `--threads 1` shows it without that effect.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tfm.core.config import ModelConfig  # noqa: E402
from tfm.core.model import GPT  # noqa: E402
from tfm.core.trace import Deferred, estimate_block_bytes  # noqa: E402
from tfm.loaders.weights import convert_gpt2_state, hf_gpt2_config, load_state_checked  # noqa: E402


def timed(fns: dict, runs: int, warmup: int) -> dict[str, list[float]]:
    """Run each fn `warmup` times, then `runs` rounds of every fn in turn; seconds per call."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def fmt(ts: list[float]) -> str:
    return f"median {statistics.median(ts) * 1e3:8.1f} ms  (min {min(ts) * 1e3:7.1f}, max {max(ts) * 1e3:7.1f}, n={len(ts)})"


def profile_trace(model: GPT, idx: torch.Tensor) -> None:
    from torch.profiler import ProfilerActivity, profile

    for trace in (False, True):
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
            model(idx, trace=trace, lazy=False if trace else None)
        print(f"\n-- profile, trace={trace} (top ops by self CPU time) --")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def lazy_report(model: GPT, idx: torch.Tensor, times: dict, plain_name: str) -> None:
    """Lazy trace rows: time against the plain forward, and bytes held before and after one read."""
    print("\n== lazy trace (the default without a KV cache) ==")
    plain = statistics.median(times[plain_name])
    for name in [n for n in times if n.startswith("lazy")]:
        print(
            f"{name} {fmt(times[name])}  ratio to no trace: {statistics.median(times[name]) / plain:.2f}x "
            f"of medians, {min(times[name]) / min(times[plain_name]):.2f}x of minimums"
        )
    tr = model(idx, trace=True, last_only=True).trace
    after_forward = tr.nbytes
    tr.pattern(model.config.n_layer // 2)
    print(
        f"held: {after_forward / 1e6:.0f} MB after the forward, {tr.nbytes / 1e6:.0f} MB after reading one "
        f"pattern (estimate_block_bytes: {estimate_block_bytes(model.config, idx.shape[1]) / 1e6:.0f} MB a block)"
    )


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in (("--runs", 10), ("--warmup", 2), ("--tokens", 128)):
        ap.add_argument(flag, type=int, default=default)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--profile", action="store_true", help="print a torch.profiler table of both tfm paths")
    return ap.parse_args()


def print_machine(args: argparse.Namespace) -> None:
    print(
        f"torch {torch.__version__}  threads {torch.get_num_threads()} (of {os.cpu_count()} CPUs)  "
        f"{platform.machine()} {platform.processor() or ''}  python {platform.python_version()}".rstrip()
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"load average (1 min) at start: {load:.2f}  |  runs {args.runs}, warmup {args.warmup}, "
        f"batch 1, {args.tokens} tokens, float32, CPU, no_grad"
    )


def build_models():
    """GPT-2 small with random weights: (HF's eager GPT2LMHeadModel or None without
    transformers, tfm's GPT with the same weights), both in eval mode."""
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        print("transformers is not installed: the HF comparison is skipped")
        return None, GPT(ModelConfig.preset("gpt2")).eval()
    hf_cfg = GPT2Config(attn_implementation="eager")  # GPT-2 small; eager returns attention weights
    hf = GPT2LMHeadModel(hf_cfg).eval()
    model = GPT(hf_gpt2_config(hf_cfg.to_dict(), "HF GPT2Config"))
    load_state_checked(model, convert_gpt2_state(hf.state_dict(), conv1d=True), "HF GPT2LMHeadModel")
    return hf, model.eval()


def contenders(model: GPT, hf, idx: torch.Tensor) -> dict:
    """What is timed, by row name; the first is the plain forward, the second the full trace."""
    fns = {
        "tfm forward, no trace      ": lambda: model(idx),
        "tfm forward, full trace    ": lambda: model(idx, trace=True, lazy=False),
    }
    if hf is not None:
        fns["HF forward, attentions    "] = lambda: hf(idx, output_attentions=True)
    # A trace computes its largest entries (per-head results, normalised inputs) when first
    # read; this row pays for all of them, as a reader that looks at everything would.
    fns["tfm full trace, all read   "] = lambda: list(model(idx, trace=True, lazy=False).trace.values())
    # The default trace (tfm.core.lazy): blocks computed when read. last_only: the full logits
    # are not needed to open a page (the trace computes them if read).
    fns["lazy trace (last_only)     "] = lambda: model(idx, trace=True, last_only=True)
    fns["lazy trace + one pattern   "] = lambda: model(idx, trace=True, last_only=True).trace.pattern(
        model.config.n_layer // 2
    )
    return fns


def overhead_report(model: GPT, idx: torch.Tensor, times: dict):
    """The full trace against the plain forward, and what the trace holds; returns the trace's
    output for the HF comparison."""
    print("\n== trace overhead ==")
    names = list(times)
    for name in names[:2]:
        print(f"{name} {fmt(times[name])}")
    plain, full = (statistics.median(times[n]) for n in names[:2])
    print(
        f"overhead ratio (trace / no trace): {full / plain:.2f}x of medians, "
        f"{min(times[names[1]]) / min(times[names[0]]):.2f}x of minimums   (target <= 1.5x)"
    )
    out = model(idx, trace=True, lazy=False)
    n_stored = len(out.trace)
    n_deferred = sum(isinstance(v, Deferred) for v in out.trace._tensors.values())
    mb = sum(t.numel() * t.element_size() for t in out.trace.values()) / 2**20
    print(
        f"trace: {n_stored} tensors ({n_deferred} computed when first read), {mb:.0f} MiB once all are read, "
        f"{len(out.trace.shapes)} shape entries"
    )
    return out


def hf_report(hf, idx: torch.Tensor, times: dict, out) -> None:
    """tfm's full trace against HF's forward with attentions, and that both compute the same."""
    names = list(times)
    full = statistics.median(times[names[1]])
    print("\n== tfm with all attention patterns vs Hugging Face (eager, output_attentions=True) ==")
    print(f"{names[1]} {fmt(times[names[1]])}")
    print(f"{names[2]} {fmt(times[names[2]])}")
    hf_t = statistics.median(times[names[2]])
    print(
        f"speed ratio (HF time / tfm time): {hf_t / full:.2f}x of medians, "
        f"{min(times[names[2]]) / min(times[names[1]]):.2f}x of minimums   (target >= 1.0x)"
    )
    ref = hf(idx, output_attentions=True)
    logit_diff = (out.logits - ref.logits).abs().max().item()
    pat_diff = max((out.trace[f"blocks.{i}.attn.pattern"] - a).abs().max().item() for i, a in enumerate(ref.attentions))
    every = statistics.median(times[names[3]])
    print(f"{names[3]} {fmt(times[names[3]])}")
    print(f"  with every trace entry read: {hf_t / every:.2f}x of medians (HF returns only the patterns)")
    print(f"same computation: logits max |diff| {logit_diff:.2e}, attention patterns max |diff| {pat_diff:.2e}")


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print_machine(args)
    hf, model = build_models()
    print(
        f"model: gpt2 shape, {model.num_params() / 1e6:.1f}M parameters, random weights"
        f"{' shared with the HF model' if hf is not None else ''}"
    )
    idx = torch.randint(0, model.config.vocab_size, (1, args.tokens), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        fns = contenders(model, hf, idx)
        times = timed(fns, args.runs, args.warmup)
        lazy_report(model, idx, times, list(fns)[0])
        out = overhead_report(model, idx, times)
        if hf is not None:
            hf_report(hf, idx, times, out)
    if hasattr(os, "getloadavg"):
        end = os.getloadavg()[0]
        busy = (
            " (above the CPU count: timings include waiting for a CPU; trust the minimums more)"
            if end > (os.cpu_count() or 1)
            else ""
        )
        print(f"\nload average (1 min) at end: {end:.2f} on {os.cpu_count()} CPUs{busy}")
    if args.profile:
        profile_trace(model, idx)


if __name__ == "__main__":
    main()
