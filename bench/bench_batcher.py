"""The shared generation batch, without the app: N students' 32-token generations submitted
together to one Batcher against one generation alone. Prints figures and ratios; asserts nothing.

    .venv/bin/python bench/bench_batcher.py [--model smollm2] [--students 1 10 30] [--tokens 32]
        [--threads 2] [--repeats 3] [--compare-solo-prefill] [--trace] [--device cuda] [--write-docs[=NAME]]

Each student has a different prompt (bench/class_prompts.py, as bench_load's; lengths differ, so prefills are padded).
Per class size: wall time until the last student's last token (best of --repeats), its ratio to
one generation alone measured in the same run (target for 30 on SmolLM2-135M: <= 3x; one after
another would be ~30x), the p50 / p95 of each student's own time to finish, and how many prefill
forwards and decode steps the batcher ran. --compare-solo-prefill repeats each class with every
prompt prefilled alone (prefill_tokens=1), the batcher before shared prefills. --trace asks every
row for its trace, as the Generation page does (the timeline's attention rows and streams).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import tfm  # noqa: E402
import write_docs  # noqa: E402
from class_prompts import prompt_for  # noqa: E402
from tfm.generation.batcher import BatchConfig, Batcher  # noqa: E402


def one_class(lm, n: int, tokens: int, config: BatchConfig, trace: bool = False) -> tuple[float, list[float], Batcher]:
    """Wall time until every generation ended, each student's own time, and the batcher."""
    batcher, done = Batcher(lm, config), [0.0] * n
    t0 = time.perf_counter()

    def student(i: int) -> None:
        gen = batcher.submit(
            prompt_for(i), tokens, temperature=0.8, seed=i, stop_at_eot=False, owner=f"s{i}", trace=trace
        )
        for _ in gen:
            pass
        done[i] = time.perf_counter() - t0

    threads = [threading.Thread(target=student, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    batcher.shutdown()
    return time.perf_counter() - t0, done, batcher


def report(lm, sizes: list[int], tokens: int, repeats: int, solo_prefill: bool, trace: bool) -> tuple[float, list]:
    """One generation alone (s), and a table row per class size and prefill setting."""
    configs = {"shared prefill": BatchConfig(max_rows=32, per_owner=4)}
    if solo_prefill:
        configs["prefill alone"] = BatchConfig(max_rows=32, per_owner=4, prefill_tokens=1)
    alone = min(one_class(lm, 1, tokens, configs["shared prefill"], trace)[0] for _ in range(repeats))
    print(f"one generation alone: {alone * 1000:.0f} ms ({tokens} tokens{', traced' if trace else ''})")
    rows = []
    for n in sizes:
        for label, config in configs.items():
            runs = [one_class(lm, n, tokens, config, trace) for _ in range(repeats)]
            wall, each, b = min(runs, key=lambda r: r[0])
            q = statistics.quantiles(each, n=20) if n > 1 else [each[0]] * 19
            print(
                f"{n:3d} students, {label:14s}: all done {wall * 1000:6.0f} ms = {wall / alone:5.2f}x alone; "
                f"each p50 {q[9] * 1000:6.0f} ms p95 {q[18] * 1000:6.0f} ms; {b.prefills} prefill forwards, "
                f"{b.steps} decode steps, widest {b.widest}"
            )
            rows.append(
                [
                    n,
                    label,
                    f"{wall:.2f} s",
                    f"{wall / alone:.2f}x",
                    f"{q[9]:.2f} / {q[18]:.2f} s",
                    b.prefills,
                    b.steps,
                    b.widest,
                ]
            )
    return alone, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2", help="a tfm.load spec (default: smollm2)")
    ap.add_argument("--students", type=int, nargs="+", default=[1, 10, 30])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--compare-solo-prefill", action="store_true")
    ap.add_argument("--trace", action="store_true", help="every row traced, as on the Generation page")
    ap.add_argument("--device", default="cpu", help="where the model runs (cpu, cuda, mps)")
    write_docs.add_flag(ap, "bench_batcher")
    args = ap.parse_args()
    write_docs.check(args)
    torch.set_num_threads(args.threads)
    lm = tfm.load(args.model, device=args.device)
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"{args.threads} threads"
    print(f"model {args.model}: {lm.config.n_layer} layers, width {lm.config.d_model}; {args.device}, {where}")
    alone, rows = report(lm, args.students, args.tokens, args.repeats, args.compare_solo_prefill, args.trace)
    header = [
        "students",
        "prefill",
        "all done",
        "x one alone",
        "each p50 / p95",
        "prefill forwards",
        "decode steps",
        "widest step",
    ]
    write_docs.publish(
        args,
        [write_docs.markdown(header, rows)],
        f"model {args.model} on {args.device}, {where}; one generation alone {alone:.2f} s "
        f"({args.tokens} tokens{', traced' if args.trace else ''})",
    )


if __name__ == "__main__":
    main()
