"""The linear maps' products on this machine: torch's BLAS (F.linear), oneDNN, and BLAS over
column slices (tfm.core.kernels.sliced_linear, tried for vocabulary-sized matrices).

    .venv/bin/python bench/bench_kernels.py [--threads 2] [--runs 9] [--write-docs[=NAME]]

For each matrix of the bundled model (tfm-small), GPT-2 small and SmolLM2-135M, stored as the
model stores it (block matrices input-major, the unembedding (out, in): see
GPT._input_major_weights), at 1 (a decode step), 128 and 1024 rows: the median time of each
product, BLAS's over the best other's, and which one tfm uses (tfm.core.kernels' size rule and
"auto"'s measured choice). Values are checked equal (|diff| < 1e-4). Figures from this run only; nothing asserts on time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import write_docs  # noqa: E402
from bench_generate import machine  # noqa: E402

from tfm.core import kernels  # noqa: E402

SHAPES = {  # (in, out) of each matrix
    "tfm-small": {
        "qkv": (192, 576),
        "attn proj": (192, 192),
        "mlp fc": (192, 768),
        "mlp proj": (768, 192),
        "unembed": (192, 4096),
    },
    "gpt2": {
        "qkv": (768, 2304),
        "attn proj": (768, 768),
        "mlp fc": (768, 3072),
        "mlp proj": (3072, 768),
        "unembed": (768, 50257),
    },
    "smollm2-135m": {
        "qkv": (576, 960),
        "attn proj": (576, 576),
        "mlp gate/up": (576, 1536),
        "mlp proj": (1536, 576),
        "unembed": (576, 49152),
    },
}


def median_ms(fn, runs: int) -> float:
    fn()  # warm-up: oneDNN builds a kernel per new shape
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def compare(d_in: int, d_out: int, rows: int, runs: int, input_major: bool) -> tuple[float, float, float | None, str]:
    """(BLAS ms, oneDNN ms, sliced BLAS ms or None where not tried, the product tfm picks)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, d_in, generator=g)
    w = torch.randn(d_out, d_in, generator=g) * 0.02  # (out, in)
    w = w.t().contiguous().t() if input_major else w  # as the model stores it
    onednn_fn = lambda: kernels._onednn_linear(x, w, None, "none", [], "")  # noqa: E731
    with torch.no_grad():
        assert float((onednn_fn() - F.linear(x, w)).abs().max()) < 1e-4
        assert float((kernels.sliced_linear(x, w) - F.linear(x, w)).abs().max()) < 1e-4
        blas = median_ms(lambda: F.linear(x, w), runs)
        onednn = median_ms(onednn_fn, runs)
        tried = "sliced" in kernels._candidates(rows, w)
        sliced = median_ms(lambda: kernels.sliced_linear(x, w), runs) if tried else None
        picked = kernels._product(x, w, None)
    return blas, onednn, sliced, picked


def table_row(model: str, name: str, d_in: int, d_out: int, rows: int, runs: int) -> list:
    """One matrix at one row count: each product's time, printed, and the table's row."""
    blas, onednn, sliced, picked = compare(d_in, d_out, rows, runs, input_major=name != "unembed")
    other = min(onednn, sliced or onednn)
    shown = f"{sliced:10.3f}" if sliced is not None else f"{'-':>10s}"
    print(
        f"{model:13s} {name:12s} {f'{d_in}x{d_out}':>12s} {rows:5d} {blas:9.3f} {onednn:10.3f} "
        f"{shown} {blas / other:9.2f}x  {picked}"
    )
    return [
        model,
        name,
        f"{d_in}x{d_out}",
        rows,
        f"{blas:.3f}",
        f"{onednn:.3f}",
        "-" if sliced is None else f"{sliced:.3f}",
        f"{blas / other:.2f}x",
        picked,
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=9)
    write_docs.add_flag(ap, "bench_kernels")
    args = ap.parse_args()
    write_docs.check(args)
    torch.set_num_threads(args.threads)
    if not kernels.ONEDNN_AVAILABLE:
        sys.exit("this torch build has no oneDNN linear product: tfm uses torch's BLAS everywhere")
    print(f"# Linear products, BLAS vs oneDNN\n{machine()}\n")
    print(
        f"{'model':13s} {'matrix':12s} {'in x out':>12s} {'rows':>5s} {'BLAS ms':>9s} {'oneDNN ms':>10s} "
        f"{'sliced ms':>10s} {'BLAS/best':>10s}  tfm uses"
    )
    table = []
    for model, mats in SHAPES.items():
        for name, (d_in, d_out) in mats.items():
            for rows in (1, 128, 1024):
                table.append(
                    table_row(model, name, d_in, d_out, rows, args.runs if rows < 1024 else max(3, args.runs // 3))
                )
    header = ["model", "matrix", "in x out", "rows", "BLAS ms", "oneDNN ms", "sliced ms", "BLAS/best", "tfm uses"]
    write_docs.publish(args, [write_docs.markdown(header, table)], f"torch {torch.__version__}, {args.threads} threads")


if __name__ == "__main__":
    main()
