"""Clark et al. (2019)'s "What does BERT look at?" averages on MiniLM (the `minilm` package),
over held-out text: consecutive paragraph pairs of ../shared/corpus/tinystories_valid.txt as
[CLS] <paragraph 1> [SEP] <paragraph 2> [SEP], at most 128 tokens (Clark et al.: 1000 Wikipedia
segments in the same format, BERT-base). Prints per-layer means of each kind of attention and
the heads over 0.5, to set beside the paper's Figure 2 (docs/benchmarks.md).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python -m bench.bench_bert_heads [--texts 1000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

import tfm
from tfm.analysis.encoders.bert_heads import KINDS, look_at

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "tinystories_valid.txt"


def paragraph_pairs(n: int) -> list[str]:
    paras = [p.strip() for p in CORPUS.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    return [f"{a} [SEP] {b}" for a, b in zip(paras[0 : 2 * n : 2], paras[1 : 2 * n : 2])]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=1000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    lm = tfm.load("minilm", device="cpu")
    texts = paragraph_pairs(args.texts)
    t0 = time.perf_counter()
    look = look_at(lm.model, lm.tokenizer, texts, max_tokens=128)
    print(f"{look.n_texts} texts, {look.n_tokens} tokens, {time.perf_counter() - t0:.1f} s")
    print("layer  " + "  ".join(f"{k:>11}" for k in KINDS) + "   (mean over heads; max head in brackets)")
    for layer in range(lm.config.n_layer):
        cells = [f"{float(look.scores[k][layer].mean()):.2f} ({float(look.scores[k][layer].max()):.2f})" for k in KINDS]
        print(f"{layer:>5}  " + "  ".join(f"{c:>11}" for c in cells))
    for kind in KINDS:
        over = [(l, h, s) for l, h, s in look.standouts(kind, 72) if s > 0.5]
        print(
            f"{kind}: heads over 0.5: "
            + (", ".join(f"L{l}H{h} {s:.2f}" for l, h, s in over) or "none")
            + f"; strongest {look.standouts(kind, 1)[0]}"
        )


if __name__ == "__main__":
    main()
