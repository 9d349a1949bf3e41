"""`python -m tfm.train.sae train ...`: train a TopK sparse autoencoder on one layer's residual
stream and write it with its measured card (tfm.analysis.dictionaries.sae describes the files).

    python -m tfm.train.sae train --model default --layer 3 --features 1536 --k 32 \\
        --data /work/shared/corpus/tinystories_train.txt --eval-file .../tinystories_valid.txt \\
        --out assets/sae/default

Steps: the text is read (never copied), cut into windows of --ctx tokens, run through the
blocks before --layer (activations kept in fp16), and the SAE is trained with Adam on
shuffled activations (inputs scaled to unit mean square, the scale folded into the weights at
the end), with the AuxK loss of Gao et al. (2024) on features that stopped firing. Then on
held-out text: L0, dead-feature share, FVU and next-token loss with the reconstruction spliced
in, against the clean model and against zeroing the stream (CE loss recovered, SAELens's
definition), and each feature's top-activating contexts and activation histogram.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch

from ..analysis.dictionaries.sae import SAE, SAEConfig, save_sae, stream_at
from ..loaders.loading import load
from .command import run_command
from .data import encode_text, id_windows, read_text
from .mix import describe, domain_ids
from .sae_eval import add_sums, card_markdown, feature_data, finish, metric_sums, metrics
from .topk import train_topk, unit_rows


def _args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tfm.train.sae", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train an SAE and write it with its card")
    t.add_argument("--model", default="default", help="a tfm model spec (default, smollm2, path:<folder>)")
    t.add_argument("--layer", type=int, required=True, help="the block whose input stream (resid_pre) is read")
    t.add_argument("--features", type=int, default=1536)
    t.add_argument("--k", type=int, default=32)
    t.add_argument("--data", nargs="+", help="training text files (.txt or .txt.gz); or --mix")
    t.add_argument("--eval-file", help="held-out text for the card's metrics and contexts; or --mix")
    t.add_argument("--mix", help="a corpus folder: train on tfm.train.mix's domains, measure each held-out domain")
    t.add_argument("--max-tokens", type=int, default=1_000_000, help="training tokens read (activations kept)")
    t.add_argument("--eval-tokens", type=int, default=65_536, help="held-out tokens (with --mix: shared equally)")
    t.add_argument("--ctx", type=int, default=128, help="window length the model reads")
    t.add_argument("--epochs", type=float, default=2.0, help="passes over the stored activations")
    t.add_argument("--batch", type=int, default=1024)
    t.add_argument("--lr", type=float, default=4e-4)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument(
        "--skip-first",
        action="store_true",
        help="leave out each window's first position (a huge-norm attention sink in many real models)",
    )
    t.add_argument("--name", default="", help="what the card calls the model (default: the spec)")
    t.add_argument("--out", required=True)
    a = p.parse_args(argv)
    if bool(a.mix) == bool(a.data or a.eval_file) or not (a.mix or (a.data and a.eval_file)):
        p.error("give either --mix CORPUS or both --data and --eval-file")
    return a


def token_ids(lm, files, limit: int) -> np.ndarray:
    """Up to `limit` token ids of the files, in order (each file's share equal)."""
    per = math.ceil(limit / len(files))
    parts = [encode_text(lm.tokenizer, read_text(Path(f))[: per * 8])[:per] for f in files]
    return np.concatenate(parts).astype(np.int64)[:limit]


@torch.no_grad()
def activations(lm, ids: np.ndarray, layer: int, ctx: int, skip: int = 0, rows: int = 16, log=print) -> torch.Tensor:
    """(N, D) fp16: the stream entering block `layer` at every position of windows of `ctx`
    (but the first `skip` of each)."""
    n, w = len(ids) // ctx, ctx - skip
    windows = id_windows(ids, ctx)
    out = torch.empty(n * w, lm.config.d_model, dtype=torch.float16)
    for i in range(0, n, rows):
        x = stream_at(lm.model, windows[i : i + rows].to(lm.device), layer)[:, skip:]  # (b, w, D)
        out[i * w : (i * w + x.shape[0] * w)] = x.flatten(0, 1).cpu().half()
        if (i // rows) % 50 == 0:
            log(f"activations: {min(i + rows, n) * ctx}/{n * ctx} tokens")
    return out


def init_sae(cfg: SAEConfig, x: torch.Tensor, gen: torch.Generator) -> SAE:
    """Decoder rows random unit vectors, encoder their transpose, b_dec the data mean."""
    sae = SAE(cfg)
    with torch.no_grad():
        sae.W_dec.copy_(unit_rows(cfg.n_features, cfg.d_model, gen))
        sae.W_enc.copy_(sae.W_dec.t())
        sae.b_dec.copy_(x[:65536].float().mean(0))
    return sae


def fold_scale(sae: SAE, scale: float) -> None:
    """Make the SAE read and write raw activations (module docstring of tfm.analysis.dictionaries.sae)."""
    with torch.no_grad():
        sae.W_enc /= scale
        sae.W_dec *= scale
        sae.b_dec *= scale


def _train_x(lm, a, skip: int) -> torch.Tensor:
    """The training activations: of the files, or of each mix domain in turn (no window crosses two)."""
    if not a.mix:
        return activations(lm, token_ids(lm, a.data, a.max_tokens), a.layer, a.ctx, skip)
    parts = domain_ids(lm.tokenizer, Path(a.mix), "train", math.ceil(a.max_tokens / 4))
    return torch.cat([activations(lm, ids, a.layer, a.ctx, skip) for ids in parts.values()])


def _evaluate(lm, sae: SAE, a, skip: int) -> tuple[dict, dict]:
    """(card fields about the held-out text, its metrics); with --mix, per domain and overall,
    and the feature data's contexts drawn from every domain."""
    if not a.mix:
        eval_ids = token_ids(lm, [a.eval_file], a.eval_tokens)
        measured = metrics(lm, sae, eval_ids, a.ctx, skip)
        feature_data(lm, sae, eval_ids, a.ctx, Path(a.out), skip)
        return {
            "data": [str(f) for f in a.data],
            "eval_file": str(a.eval_file),
            "eval_tokens": measured.pop("tokens"),
        }, measured
    parts = domain_ids(lm.tokenizer, Path(a.mix), "heldout", math.ceil(a.eval_tokens / 4))
    sums = {d: metric_sums(lm, sae, ids, a.ctx, skip) for d, ids in parts.items()}
    per = {d: finish(s) for d, s in sums.items()}
    measured = finish(add_sums(list(sums.values())))
    cut = {d: ids[: len(ids) // a.ctx * a.ctx] for d, ids in parts.items()}
    row_domain = torch.cat([torch.full((len(ids) // a.ctx,), i) for i, ids in enumerate(cut.values())])
    feature_data(lm, sae, np.concatenate(list(cut.values())), a.ctx, Path(a.out), skip, row_domain)
    fields = {
        "data": describe("train"),
        "eval_file": "held-out mix: " + ", ".join(parts),
        "eval": describe("heldout"),
        "domains": list(parts),
        "eval_tokens": measured.pop("tokens"),
        "domain_metrics": per,
    }
    return fields, measured


def run_train(a: argparse.Namespace, command: str) -> dict:
    torch.set_num_threads(a.threads)
    t_start, gen = time.perf_counter(), torch.Generator().manual_seed(a.seed)
    lm = load(a.model, device="cpu")
    cfg = SAEConfig(lm.config.d_model, a.features, a.k, a.layer, a.name or a.model)
    if not 0 <= a.layer < lm.config.n_layer:
        raise ValueError(f"--layer {a.layer}: the model has layers 0..{lm.config.n_layer - 1}")
    skip = int(a.skip_first)
    x = _train_x(lm, a, skip)
    n_train = int(x.shape[0])
    t_act = time.perf_counter() - t_start
    sample = x[:: max(1, n_train // 65536)]  # spread over the data: a mix is stored domain by domain
    scale = float(sample.float().pow(2).sum(-1).mean().div(cfg.d_model).sqrt())
    sae = init_sae(cfg, sample / scale, gen)
    stats = train_topk(sae, x, x, (scale, scale), a.epochs, a.batch, a.lr, gen)
    del x
    _as_shipped(sae, scale)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    fields, measured = _evaluate(lm, sae, a, skip)
    card = {
        "command": command,
        "model": a.name or a.model,
        "layer": a.layer,
        "point": "resid_pre",
        "skipped_first_positions": skip,
        **fields,
        "train_tokens": n_train,
        "epochs": a.epochs,
        "input_scale": scale,
        **stats,
        "activations_s": round(t_act, 1),
        "wall_time_s": round(time.perf_counter() - t_start, 1),
        "threads": a.threads,
        "metrics": measured,
    }
    save_sae(sae, a.out, card, card_markdown(card))
    return card


def _as_shipped(sae, scale: float) -> None:
    """The input scale folded into the weights, frozen, and rounded to fp16 as sae.safetensors
    stores it: measured as shipped."""
    fold_scale(sae, scale)
    sae.eval().requires_grad_(False)
    with torch.no_grad():
        for p in sae.parameters():
            p.copy_(p.half().float())


def main(argv=None) -> int:
    return run_command("tfm.train.sae", argv, _args, run_train, ("tokens_seen", "wall_time_s", "metrics"))


if __name__ == "__main__":
    raise SystemExit(main())
