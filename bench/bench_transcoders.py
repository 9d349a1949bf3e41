"""Transcoder sets of one model side by side on the same held-out text (the trainers' own measures,
tfm.train.transcoder_eval): per layer the FVU of the MLP output, L0 and the held-out dead share as
the files load, and per held-out domain the next-token loss clean, with every MLP replaced, and
with one layer replaced at a time. Prints the tables; no asserts.

    .venv/bin/python bench/bench_transcoders.py --model smollm2 \\
        --sets /tmp/oldtc/assets/transcoders/smollm2 assets/transcoders/smollm2 --eval-tokens 8192 [--no-ce] [--write-docs]

(/tmp/oldtc: the 24k-token set shipped before, `git archive a12323a assets/transcoders/smollm2 | tar -x -C /tmp/oldtc`.)

The held-out text is `tfm.train.mix`'s held-out part, an equal share per domain, in windows of 128
tokens, the first position of each left out when the first set's card says its training skipped it
(SmolLM2's sets): the same windows for every set, so the columns compare the sets, not the text.
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

import tfm  # noqa: E402
import write_docs  # noqa: E402
from tfm.analysis.dictionaries.transcoder import layer_file, load_transcoders  # noqa: E402
from tfm.train import mix  # noqa: E402
from tfm.train import transcoder_eval as TE  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
CTX = 128


def _heldout(lm, eval_tokens: int, corpus: Path) -> dict[str, torch.Tensor]:
    ids = mix.domain_ids(lm.tokenizer, corpus, "heldout", -(-eval_tokens // len(mix.DOMAINS)))
    return {d: TE.windows(v, CTX + 1) for d, v in ids.items()}


def _describe(folder: Path, ts) -> str:
    card, cfg = ts.card, ts.cfg
    size = sum((folder / layer_file(i)).stat().st_size for i in range(cfg.n_layer))
    return (
        f"`{folder.name}` ({ts.identity}): {cfg.n_features} features, k {cfg.k}, {cfg.storage}, "
        f"{size:,} bytes of layer files; trained on {card.get('train_tokens', 0):,} tokens"
    )


def layer_rows(lm, sets: list, held: dict, skip: int) -> list[list[dict]]:
    """Per set, per layer: layer_metrics on the held-out windows (all domains together)."""
    rows = torch.cat(list(held.values()))[:, :-1]
    stream, angles = TE.embed(lm.model, rows)
    acts = TE.advance(lm.model, stream, angles, range(lm.config.n_layer), set(range(lm.config.n_layer)), skip)
    return [[TE.layer_metrics(ts.layers[i], *acts[i]) for i in range(ts.cfg.n_layer)] for ts in sets]


def _layer_table(names: list[str], metrics: list[list[dict]], ce: list[dict] | None) -> str:
    header = ["layer"] + [f"FVU {n}" for n in names] + [f"L0 {n}" for n in names]
    if ce:
        header += [f"CE +, one layer {n}" for n in names]
    out = []
    for i in range(len(metrics[0])):
        row = [i] + [f"{m[i]['fvu']:.3f}" for m in metrics] + [f"{m[i]['l0']:.1f}" for m in metrics]
        if ce:
            row += [f"{statistics.mean(d['one_layer'][i] - d['clean'] for d in c.values()):+.3f}" for c in ce]
        out.append(row)
    medians = ["median"] + [f"{statistics.median(x['fvu'] for x in m):.3f}" for m in metrics]
    out.append(medians + [""] * (len(header) - len(medians)))
    return write_docs.markdown(header, out)


def _ce_table(names: list[str], ce: list[dict]) -> str:
    header = ["domain", "tokens", "clean"] + [f"every MLP replaced {n}" for n in names]
    header += [f"one layer, mean {n}" for n in names]
    out = []
    for d in ce[0]:
        row = [d, f"{ce[0][d]['tokens']:,}", f"{ce[0][d]['clean']:.3f}"] + [f"{c[d]['replaced']:.3f}" for c in ce]
        out.append(row + [f"{statistics.mean(c[d]['one_layer']):.3f}" for c in ce])
    return write_docs.markdown(header, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--sets", nargs="+", required=True, help="transcoder folders of this model")
    ap.add_argument("--eval-tokens", type=int, default=8192)
    ap.add_argument("--no-ce", action="store_true", help="per-layer figures only (the CE runs the model ~20 times)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--corpus", default=str(CORPUS))
    write_docs.add_flag(ap, "bench_transcoders")
    args = ap.parse_args()
    write_docs.check(args)
    torch.set_num_threads(args.threads)
    lm = tfm.load(args.model, device="cpu")
    folders = [Path(s) for s in args.sets]
    sets = [load_transcoders(f, lm) for f in folders]
    names = [chr(ord("A") + i) for i in range(len(sets))]
    skip = int(sets[0].card.get("settings", {}).get("skipped_first_positions", 0))
    held, t0 = _heldout(lm, args.eval_tokens, Path(args.corpus)), time.perf_counter()
    metrics = layer_rows(lm, sets, held, skip)
    ce = (
        None
        if args.no_ce
        else [{d: TE.domain_ce(lm.model, ts.layers, w, skip) for d, w in held.items()} for ts in sets]
    )
    tables = [
        "\n".join(f"- {n}: {_describe(f, ts)}" for n, f, ts in zip(names, folders, sets)),
        _layer_table(names, metrics, ce),
    ]
    if ce:
        tables.append(_ce_table(names, ce))
    print("\n\n".join(tables))
    note = f"{args.model}, {sum(len(w) for w in held.values())} held-out windows, {time.perf_counter() - t0:.0f} s"
    write_docs.publish(args, tables, note)


if __name__ == "__main__":
    main()
