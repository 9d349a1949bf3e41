"""One TopK dictionary training step, dense (tfm.train.topk: autograd through (B, F) activations)
against sparse (tfm.train.topk_sparse: one dense product, the rest over the k kept rows), same
batch, same loss, timed in the same run. Prints CPU milliseconds a step (this process's time, so a
shared machine's other load does not count; with more threads, summed over them) and the ratio; no asserts.

    .venv/bin/python bench/bench_topk_step.py [--rows 1016] [--features 1664] [--d-model 576] [--k 32]

The defaults are SmolLM2's transcoders: 576 wide, 1,664 features, k 32, the 254-row batches of 16 steps
a chunk and the 1,016-row ones of 4. A sixth of the features start dead, so the AuxK term runs in both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

import write_docs  # noqa: E402
from tfm.analysis.dictionaries.transcoder import Transcoder, TranscoderConfig  # noqa: E402
from tfm.train import topk as TK  # noqa: E402
from tfm.train import topk_sparse as S  # noqa: E402


def _timed(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.process_time()  # CPU time: on a shared machine the others' load is not counted
        fn()
        times.append(time.process_time() - t0)
    return 1e3 * statistics.median(times)


def measure(rows: int, f: int, d: int, k: int, repeats: int) -> tuple[float, float]:
    gen = torch.Generator().manual_seed(0)
    p = S.new_params(f, d, gen, torch.zeros(d))
    module = S.to_module(p, Transcoder(TranscoderConfig(d, 1, f, k), 0), (1.0, 1.0)).requires_grad_(True)
    dense_opt, sparse_opt = torch.optim.Adam(module.parameters(), lr=1e-3), S.adam(p, 1e-3)
    x, y = torch.randn(rows, d, generator=gen), torch.randn(rows, d, generator=gen)
    fired = torch.zeros(f, dtype=torch.long)
    fired[: f // 6] = 10 * TK.DEAD_AFTER

    def dense():
        TK._update(dense_opt, module, TK._batch_loss(module, x, y, fired)[1], 1e-3)

    def sparse():
        S.apply(sparse_opt, p, S.step_grads(p, x, y, k, fired)[1], 1e-3)

    return _timed(dense, repeats), _timed(sparse, repeats)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[254, 1016])
    ap.add_argument("--features", type=int, default=1664)
    ap.add_argument("--d-model", type=int, default=576)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    write_docs.add_flag(ap, "bench_topk_step")
    args = ap.parse_args()
    write_docs.check(args)
    torch.set_num_threads(args.threads)
    out = []
    for rows in args.rows:
        dense, sparse = measure(rows, args.features, args.d_model, args.k, args.repeats)
        out.append([rows, f"{dense:.1f}", f"{sparse:.1f}", f"{dense / sparse:.1f}x"])
        print(f"rows {rows}: dense {dense:.1f} ms, sparse {sparse:.1f} ms a step ({dense / sparse:.1f}x)", flush=True)
    table = write_docs.markdown(["rows a step", "dense ms", "sparse ms", "dense / sparse"], out)
    note = f"F {args.features}, D {args.d_model}, k {args.k}, {args.threads} thread(s), median of {args.repeats}"
    write_docs.publish(args, [table], note)


if __name__ == "__main__":
    main()
