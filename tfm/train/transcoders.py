"""`python -m tfm.train.transcoders`: train one TopK transcoder per block (MLP input -> MLP output)
on the general text mix and write the set with its measured card (tfm.analysis.dictionaries.transcoder
describes the files).

    python -m tfm.train.transcoders --model default --features 1536 --k 24 --tokens 200000 \\
        --eval-tokens 8192 --out assets/transcoders/default

Steps: the mix's training part (`tfm.train.mix.mix_ids`) is cut into windows of --ctx tokens and
run through the blocks a group of layers at a time (the stream between groups kept, so the model
runs once; MLP inputs and outputs kept in fp16 for the group's layers, the group sized by
--group-mb). Each layer's transcoder is trained with Adam (inputs and outputs scaled to unit mean
square, the scales folded into the weights at the end; AuxK on dead features: tfm.train.topk),
measured on the held-out part (FVU of the MLP output, L0, dead share) as the file will load it,
written, and the card updated at once: a rerun skips every layer whose file and card entry exist
(the card's config and settings must match, else it stops). Once all layers exist, the next-token
loss per held-out domain is measured with every MLP replaced (with and without error terms) and
with one layer replaced at a time (tfm.train.transcoder_eval).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from ..analysis.dictionaries.transcoder import (
    CARD_FILE,
    Transcoder,
    TranscoderConfig,
    layer_file,
    load_transcoders,
    read_card,
    save_layer,
    stored_copy,
    write_card,
)
from ..loaders.loading import load
from . import mix
from . import transcoder_eval as TE
from .command import run_command, run_settings
from .data import id_windows
from .topk import mean_square_scale, train_topk, unit_rows
from .transcoder_card import card_markdown

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # beside the repository


def parse_layers(text: str, n_layer: int) -> list[int]:
    out: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise ValueError(f"--layers {text[:40]!r}: write a range or list such as 0-5 or 2,8") from None
    if not out or min(out) < 0 or max(out) >= n_layer:
        raise ValueError(f"--layers {text[:40]!r}: the model has layers 0..{n_layer - 1}")
    return sorted(out)


def _args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tfm.train.transcoders", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="default", help="a tfm model spec (default, smollm2, path:<folder>)")
    p.add_argument("--features", type=int, default=1536)
    p.add_argument("--k", type=int, default=24)
    p.add_argument("--tokens", type=int, default=200_000, help="training tokens of the mix (activations kept)")
    p.add_argument("--eval-tokens", type=int, default=8192, help="held-out tokens, an equal share per domain")
    p.add_argument("--layers", default="", help="which blocks, e.g. 0-5 or 2,8 (default: all)")
    p.add_argument("--ctx", type=int, default=128, help="window length the model reads")
    p.add_argument("--epochs", type=float, default=4.0, help="passes over the stored activations")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--lr", type=float, default=4e-4)
    p.add_argument("--storage", choices=("fp16", "int8"), default="fp16", help="how the layer files hold the matrices")
    p.add_argument(
        "--skip-first",
        action="store_true",
        help="leave out each window's first position (a huge-norm attention sink in many real models)",
    )
    p.add_argument("--group-mb", type=int, default=1024, help="memory for one group of layers' activations")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--corpus", default=str(CORPUS), help="the folder holding the mix's text files")
    p.add_argument("--name", default="", help="what the card calls the model (default: the spec)")
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def _settings(a: argparse.Namespace) -> dict:
    """What a rerun must share with the card to go on where it stopped."""
    return run_settings(a)


def _start_card(out: Path, cfg: TranscoderConfig, a: argparse.Namespace, command: str) -> dict:
    """The folder's card when it matches this run (a resumed run), else a new one."""
    if not (out / CARD_FILE).is_file():
        return {
            "command": command,
            "model": cfg.model,
            "settings": _settings(a),
            "layers": {},
            "data": {"train": mix.describe("train"), "heldout": mix.describe("heldout")},
        }
    card = read_card(out)
    if card["config"] != cfg or card.get("settings") != _settings(a):
        raise ValueError(
            f"{out.name} holds a set trained with {card['config'].to_dict()} and "
            f"{card.get('settings')}: pass the same settings to go on, or choose another --out"
        )
    card.pop("config")
    return card


def _train_layer(cfg: TranscoderConfig, layer: int, x, y, a: argparse.Namespace, log=print):
    """A trained transcoder reading raw MLP inputs and writing raw outputs, and its training stats."""
    gen = torch.Generator().manual_seed(a.seed * 1009 + layer)
    sx, sy = mean_square_scale(x), mean_square_scale(y)
    tc = Transcoder(cfg, layer)
    with torch.no_grad():
        tc.W_dec.copy_(unit_rows(cfg.n_features, cfg.d_model, gen))
        tc.W_enc.copy_(unit_rows(cfg.n_features, cfg.d_model, gen).t())
        tc.b_dec.copy_(y[:65536].float().mean(0) / sy)
    stats = train_topk(tc, x, y, (sx, sy), a.epochs, a.batch, a.lr, gen, log=lambda s: log(f"layer {layer}: {s}"))
    with torch.no_grad():  # fold the scales: (x / sx) W_enc = x (W_enc / sx); outputs times sy
        tc.W_enc /= sx
        tc.W_dec *= sy
        tc.b_dec *= sy
    return tc.eval().requires_grad_(False), {**stats, "input_scale": sx, "output_scale": sy}


def _groups(todo: list[int], per_group: int) -> list[range]:
    """Consecutive block ranges from 0, each ending at its last layer to train (at most per_group of them)."""
    out, start = [], 0
    for g in range(0, len(todo), per_group):
        end = todo[min(g + per_group, len(todo)) - 1] + 1
        out.append(range(start, end))
        start = end
    return out


def train_missing(lm, cfg: TranscoderConfig, card: dict, todo: list[int], a: argparse.Namespace, log=print) -> None:
    """Trains, measures and writes each layer of `todo`, updating the card after each."""
    out, skip, t0 = Path(a.out), int(a.skip_first), time.perf_counter()
    train = id_windows(mix.mix_ids(lm.tokenizer, a.corpus, "train", a.tokens), a.ctx)
    held = torch.cat(list(heldout_windows(lm, a).values()))[:, :-1]
    if len(train) == 0 or len(held) == 0:
        raise ValueError(f"--tokens and --eval-tokens must give at least one window of --ctx {a.ctx} tokens")
    s_train, angles = TE.embed(lm.model, train)
    s_held = TE.embed(lm.model, held)[0]
    per_layer = 4 * len(train) * (a.ctx - skip) * cfg.d_model  # fp16 inputs and outputs
    for group in _groups(todo, max(1, a.group_mb * 2**20 // per_layer)):
        t1 = time.perf_counter()
        acts = TE.advance(lm.model, s_train, angles, group, set(todo), skip, log=log)
        held_acts = TE.advance(lm.model, s_held, angles, group, set(todo), skip)
        act_s = (time.perf_counter() - t1) / len(acts)
        for layer in sorted(acts):
            tc, stats = _train_layer(cfg, layer, *acts.pop(layer), a, log)
            m_in, m_out = held_acts.pop(layer)
            measured = TE.layer_metrics(stored_copy(tc), m_in, m_out)  # as the file loads
            unrounded = TE.layer_metrics(tc, m_in, m_out)["fvu"]  # before fp16 / int8 storage
            save_layer(tc, out)
            card["layers"][str(layer)] = {
                **stats,
                "activations_s": round(act_s, 1),
                **measured,
                "fvu_before_storage": unrounded,
            }
            card["train_tokens"], card["heldout_tokens"] = len(train) * (a.ctx - skip), len(held) * (a.ctx - skip)
            write_set(out, cfg, card)
            log(
                f"layer {layer}: fvu {measured['fvu']:.4f} l0 {measured['l0']:.1f} dead {measured['dead_share']:.3f} "
                f"({time.perf_counter() - t0:.0f}s)"
            )


def heldout_windows(lm, a: argparse.Namespace) -> dict[str, torch.Tensor]:
    """Per domain, the held-out windows of ctx + 1 tokens (inputs and their next tokens)."""
    ids = mix.domain_ids(lm.tokenizer, a.corpus, "heldout", -(-a.eval_tokens // len(mix.DOMAINS)))
    return {d: id_windows(v, a.ctx + 1) for d, v in ids.items()}


def write_set(out: Path, cfg: TranscoderConfig, card: dict) -> None:
    write_card(out, cfg, card)
    size = sum(p.stat().st_size for p in out.glob("layer_*.safetensors"))
    (out / "README.md").write_text(card_markdown({"config": cfg.to_dict(), **card}, size))


def measure_set(lm, cfg: TranscoderConfig, card: dict, a: argparse.Namespace, log=print) -> None:
    """The per-domain CE of the finished set, as its files load."""
    t0 = time.perf_counter()
    ts = load_transcoders(a.out, lm)
    card["ce"] = {}
    for domain, wins in heldout_windows(lm, a).items():
        card["ce"][domain] = TE.domain_ce(lm.model, ts.layers, wins, int(a.skip_first))
        log(f"{domain}: {card['ce'][domain]['clean']:.3f} clean, {card['ce'][domain]['replaced']:.3f} replaced")
    card["ce_s"] = round(time.perf_counter() - t0, 1)
    write_set(Path(a.out), cfg, card)


def run(a: argparse.Namespace, command: str, log=print) -> dict:
    torch.set_num_threads(a.threads)
    t_start, out = time.perf_counter(), Path(a.out)
    lm = load(a.model, device="cpu")
    TE.check_blocks(lm.config)
    cfg = TranscoderConfig(lm.config.d_model, lm.config.n_layer, a.features, a.k, a.name or a.model, a.storage)
    wanted = parse_layers(a.layers, cfg.n_layer) if a.layers else list(range(cfg.n_layer))
    card = _start_card(out, cfg, a, command)
    done = {i for i in range(cfg.n_layer) if (out / layer_file(i)).is_file() and str(i) in card["layers"]}
    todo = [i for i in wanted if i not in done]
    log(f"layers done {sorted(done)}, to train {todo}")
    if todo:
        card.pop("ce", None)
        train_missing(lm, cfg, card, todo, a, log)
        card["wall_time_s"] = round(card.get("wall_time_s", 0) + time.perf_counter() - t_start, 1)
        card["threads"] = a.threads
        write_set(out, cfg, card)
    if len(card["layers"]) == cfg.n_layer and "ce" not in card:
        measure_set(lm, cfg, card, a, log)
    return card


def main(argv=None) -> int:
    return run_command("tfm.train.transcoders", argv, _args, run, ("wall_time_s", "ce"))


if __name__ == "__main__":
    raise SystemExit(main())
