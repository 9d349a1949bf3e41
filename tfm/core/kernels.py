"""The engine's linear maps, y = x W^T + b, with the product chosen per call.

On a CPU, torch runs float32 products through its BLAS (MKL in the official wheels) or, for the
same op, through oneDNN (also inside torch). Which is faster depends on the CPU and the shape:
on one 2-core AMD EPYC server oneDNN ran SmolLM2's unembedding at 128 tokens faster; on
another (same name, another day) slower, while GPT-2's stayed faster with oneDNN
(bench/bench_kernels.py prints both on the machine at hand; docs/benchmarks.md). So by default
("auto") a float32 CPU product without autograd, large enough for oneDNN to possibly gain, is
timed both ways (a vocabulary-sized matrix also as BLAS over column slices) the first time its
weight shape meets a row-count bucket, and that bucket keeps the fastest product for the life of
the process. GPUs, other dtypes, training, attribution's
gradients and small products always use F.linear. Both compute the same sums in a different
order (|diff| ~1e-6).
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from typing import Literal, get_args

import torch
import torch.nn as nn
import torch.nn.functional as F

CpuProduct = Literal["auto", "onednn", "blas"]

# oneDNN keeps a compiled kernel per product shape in two caches, of 1024 entries by default: a
# server that sees every prompt length up to 1024 grew by hundreds of MB (docs/benchmarks.md). Each
# forward needs ~5 shapes, so 32 entries hold several prompt lengths. Read when
# oneDNN first runs, so set on import, before any product; a value set by the operator is kept.
ONEDNN_CACHE_ENTRIES = 32
for _var in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
    if not os.environ.get(_var, "").isdigit():  # unset, or unreadable (an empty value crashes torch)
        os.environ[_var] = str(ONEDNN_CACHE_ENTRIES)

ONEDNN_AVAILABLE = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
# (x, weight (out, in), bias, post-op, its scalars, its algorithm): torch's own oneDNN linear op.
_onednn_linear = torch.ops.mkldnn._linear_pointwise if ONEDNN_AVAILABLE else None


def _checked(choice: str) -> CpuProduct:
    if choice not in get_args(CpuProduct):
        raise ValueError(f"CPU product {choice!r} is not one of {get_args(CpuProduct)}")
    if choice != "blas" and not ONEDNN_AVAILABLE:
        raise ValueError("this torch build has no oneDNN linear product: use 'blas'")
    return choice


# TFM_CPU_PRODUCT=blas (or onednn) fixes the product server-wide instead of measuring.
_cpu_product: CpuProduct = _checked(
    os.environ.get("TFM_CPU_PRODUCT", "").strip() or ("auto" if ONEDNN_AVAILABLE else "blas")
)


def cpu_product() -> CpuProduct:
    """The product float32 CPU linear maps use now."""
    return _cpu_product


@contextmanager
def using_cpu_product(choice: CpuProduct):
    """Within the block, float32 CPU products use `choice` (benchmarks compare the two in one run)."""
    global _cpu_product
    before, _cpu_product = _cpu_product, _checked(choice)
    try:
        yield
    finally:
        _cpu_product = before


# oneDNN costs more per call than BLAS: worth it for a large matrix, even on one row (a decode
# step of GPT-2's 768x2304 or SmolLM2's 576x1536), or for much work (192x576 at 128 rows); not for
# small matrices on few rows (the bundled model's decode steps). bench/bench_kernels.py; the
# figures are in docs/benchmarks.md.
ONEDNN_MIN_WEIGHT = 1 << 19  # in x out
ONEDNN_MIN_MACS = 1 << 23  # rows x in x out


Product = Literal["blas", "onednn", "sliced"]  # what one call runs; "sliced": BLAS over column slices


def _product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> Product:
    if _cpu_product == "blas" or x.device.type != "cpu" or not x.dtype == weight.dtype == torch.float32:
        return "blas"
    if x.dim() < 2 or x.numel() == 0 or weight.dim() != 2:  # rows of vectors only
        return "blas"
    if bias is not None and bias.dtype != torch.float32:
        return "blas"
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return "blas"
    # A weight that is neither (out, in) nor (in, out) contiguous, e.g. a slice of rows of an
    # input-major matrix, sends oneDNN to a far slower reference kernel: BLAS copes with it.
    if not (weight.is_contiguous() or weight.t().is_contiguous()):
        return "blas"
    if not (weight.numel() >= ONEDNN_MIN_WEIGHT or x.numel() * weight.shape[0] >= ONEDNN_MIN_MACS):
        return "blas"
    return "onednn" if _cpu_product == "onednn" else _measured(x.numel() // x.shape[-1], weight, bias)


# "auto": per (weight shape and layout, bias, rows bucket), the product that measured fastest.
# Rows above the last bucket are probed with PROBE_ROWS (the winner did not change from 128 to
# 1024 rows on any matrix bench_kernels times). At most MAX_MEASURED entries (random models of
# any shape cannot grow it without bound); past that, unmeasured products keep torch's BLAS.
ROW_BUCKETS = (1, 8, 32)
PROBE_ROWS = 128
MAX_MEASURED = 512
_chosen: dict[tuple, Product] = {}
_measuring = threading.Lock()

# A vocabulary-sized matrix (SmolLM2's 49152 x 576, 113 MB) streams through BLAS's blocking in
# one product at about half the speed of its other matrices; products over slices of 1024 output
# columns (4.5 MB of weights each) ran faster on 32 to 1024 rows (docs/benchmarks.md). So such a matrix, on 8 rows or more, gets that product as a third candidate.
SLICE = 1024
SLICED_MIN_OUT = 8 * SLICE


def _measured(rows: int, weight: torch.Tensor, bias: torch.Tensor | None) -> Product:
    bucket = next((b for b in ROW_BUCKETS if rows <= b), PROBE_ROWS)
    key = (tuple(weight.shape), weight.stride(), bias is not None, bucket)
    product = _chosen.get(key)
    if product is None:
        with _measuring:  # one measurement at a time, each once
            product = _chosen.get(key)
            if product is None:
                if len(_chosen) >= MAX_MEASURED:
                    return "blas"
                product = _chosen[key] = _fastest(bucket, weight, bias)
    return product


def _candidates(rows: int, weight: torch.Tensor) -> tuple[Product, ...]:
    sliced = ("sliced",) if weight.shape[0] >= SLICED_MIN_OUT and rows >= ROW_BUCKETS[1] else ()
    return ("blas", "onednn", *sliced)


# Another product must beat torch's BLAS by this factor: a first decision made while caches or
# the machine were cold must not lock a process into a product that is slower for good.
MARGIN = 0.95
ROUNDS = 5
# ...but rounds stop once timing took MEASURE_S: a long product (Gemma 3's 262,144 x 640 unembedding on
# 128 rows takes about a second a call) is timed reliably in one round, and five cost a page a minute
MEASURE_S = 1.0


@torch.no_grad()
def _fastest(rows: int, weight: torch.Tensor, bias: torch.Tensor | None) -> Product:
    """Time each candidate on `rows` rows: a first call each (oneDNN compiles its kernel), then
    ROUNDS rounds of every candidate in turn (drift hits all alike; fewer past MEASURE_S), best time of each. Constant
    input: the global RNG is never touched, and the time does not depend on values."""
    x = torch.full((rows, weight.shape[1]), 0.5, dtype=weight.dtype)
    candidates = _candidates(rows, weight)
    best = dict.fromkeys(candidates, float("inf"))
    for product in candidates:
        _run(product, x, weight, bias)
    start = time.perf_counter()
    for _ in range(ROUNDS):
        for product in candidates:
            t0 = time.perf_counter()
            _run(product, x, weight, bias)
            best[product] = min(best[product], time.perf_counter() - t0)
        if time.perf_counter() - start >= MEASURE_S:
            break
    winner = min(candidates, key=best.get)
    return winner if best[winner] < MARGIN * best["blas"] else "blas"


def sliced_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear over slices of SLICE output columns, each written into its place in the result."""
    out = x.new_empty(*x.shape[:-1], weight.shape[0])
    rows, cols = x.reshape(-1, x.shape[-1]), out.view(-1, weight.shape[0])  # (N, in), (N, out)
    for j in range(0, weight.shape[0], SLICE):
        w = weight[j : j + SLICE].t()  # (in, <=SLICE)
        if bias is None:
            torch.mm(rows, w, out=cols[:, j : j + SLICE])
        else:
            torch.addmm(bias[j : j + SLICE], rows, w, out=cols[:, j : j + SLICE])
    return out


def _run(product: Product, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if product == "onednn":
        return _onednn_linear(x, weight, bias, "none", [], "")
    if product == "sliced":
        return sliced_linear(x, weight, bias)
    return F.linear(x, weight, bias)


def measured() -> dict[tuple, Product]:
    """A copy of "auto"'s decisions so far: (weight shape, strides, has bias, rows bucket) -> product."""
    return dict(_chosen)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias): (..., in) -> (..., out), through the product chosen above."""
    return _run(_product(x, weight, bias), x, weight, bias)


class Linear(nn.Linear):
    """nn.Linear (same parameters, names and files) whose product is `linear` above."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
