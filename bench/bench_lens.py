"""The tuned lens against the logit lens on held-out text (tfm.analysis.lens.compare), per layer and
per domain, for each model that ships a set in assets/lens. Prints the tables; with --write-docs
puts them into docs/benchmarks.md (block bench_lens).

    .venv/bin/python bench/bench_lens.py [--tokens 256] [--models default,smollm2] [--write-docs]

Held-out text: the first --tokens tokens of each domain's held-out part (tfm.train.mix: books,
Shakespeare, stories, Python), in windows of 128 with each window's first position left out (the
attention sink, left out of training too). Per stream: KL(final ‖ lens) in nats, mean over
positions, for the tuned lens as its files load and the logit lens, their ratio, and the share of
positions whose top-1 is the final top-1. Checks printed (no asserts): the tuned lens below the
logit lens at every stream but the last, where both stay near 0 (the last translator at the
identity's KL), and on SmolLM2 at most half the logit lens's KL after blocks 1-22.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

import tfm  # noqa: E402
import write_docs  # noqa: E402
from tfm.analysis.lens.compare import lens_fit  # noqa: E402
from tfm.analysis.lens.tuned import load_tuned_lens, shipped_folder  # noqa: E402
from tfm.train import mix  # noqa: E402
from tfm.train.transcoders import CORPUS  # noqa: E402
from tfm.train.tuned_lens_eval import collect_streams, words  # noqa: E402

HALF_BLOCKS = range(1, 23)  # SmolLM2: the tuned lens at most half the logit lens's KL after these blocks


def measure(spec: str, tokens: int, corpus: Path) -> tuple[list[str], dict]:
    """{domain: {"tuned": (kl, agree), "logit": (kl, agree)}} per stream, and the row labels."""
    lm = tfm.load(spec, device="cpu")
    lens = load_tuned_lens(shipped_folder(spec), lm)
    out, labels = {}, []
    for domain, ids in mix.domain_ids(lm.tokenizer, corpus, "heldout", tokens).items():
        streams = collect_streams(lm.model, ids, 128, 1).float().transpose(0, 1)  # (L+1, N, D)
        fits = {
            "tuned": lens_fit(lm.model, lens.translate(streams), words(lm)),
            "logit": lens_fit(lm.model, streams, words(lm)),
        }
        out[domain] = {k: (f.mean_kl(), f.agreement(), streams.shape[1]) for k, f in fits.items()}
        labels = fits["logit"].labels
    return labels, out


def table(spec: str, labels: list[str], res: dict) -> str:
    domains = list(res)
    header = ["stream"] + [f"{d}: tuned / logit KL (ratio)" for d in domains] + ["top-1 = final, tuned / logit"]
    rows = []
    for r, label in enumerate(labels):
        cells = []
        for d in domains:
            t, lo = res[d]["tuned"][0][r], res[d]["logit"][0][r]
            cells.append(f"{t:.3f} / {lo:.3f} ({t / lo:.2f})" if lo > 1e-3 else f"{t:.4f} / {lo:.4f}")
        agree = [sum(res[d][k][1][r] for d in domains) / len(domains) for k in ("tuned", "logit")]
        rows.append([label, *cells, f"{100 * agree[0]:.0f}% / {100 * agree[1]:.0f}%"])
    n = ", ".join(f"{d} {res[d]['tuned'][2]}" for d in domains)
    return f"**{spec}** (held-out positions: {n})\n\n" + write_docs.markdown(header, rows)


def checks(spec: str, labels: list[str], res: dict) -> list[str]:
    lines = []
    for d, v in res.items():
        tuned, logit = v["tuned"][0], v["logit"][0]
        below = all(t < lo for t, lo in zip(tuned[:-1], logit[:-1]))
        lines.append(
            f"{spec} {d}: tuned below logit at every stream but the last: {below}; last stream "
            f"tuned {tuned[-1]:.2e}, logit {logit[-1]:.2e} nats"
        )
        if len(labels) > max(HALF_BLOCKS) + 1:
            ratio = max(tuned[b + 1] / logit[b + 1] for b in HALF_BLOCKS)
            lines.append(
                f"{spec} {d}: largest tuned / logit ratio after blocks 1-22: {ratio:.3f} (≤ 0.5: {ratio <= 0.5})"
            )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=256, help="held-out tokens per domain")
    ap.add_argument("--models", default="default,smollm2")
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--threads", type=int, default=1)
    write_docs.add_flag(ap, "bench_lens")
    args = ap.parse_args()
    write_docs.check(args)
    torch.set_num_threads(args.threads)
    tables, notes = [], []
    for spec in args.models.split(","):
        t0 = time.perf_counter()
        labels, res = measure(spec, args.tokens, Path(args.corpus))
        tables.append(table(spec, labels, res))
        notes += checks(spec, labels, res)
        print(tables[-1], "\n", "\n".join(notes[-len(res) * 2 :]), f"\n({time.perf_counter() - t0:.0f} s)\n")
    write_docs.publish(args, [*tables, "Checks: " + "; ".join(notes) + "."])


if __name__ == "__main__":
    main()
