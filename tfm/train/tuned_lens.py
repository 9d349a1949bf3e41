"""`python -m tfm.train.tuned_lens`: train one affine translator per residual stream (the tuned lens
of Belrose et al. 2023) on the general text mix and write the set with its measured card
(tfm.analysis.lens.tuned describes the files).

    python -m tfm.train.tuned_lens --model smollm2 --out assets/lens/smollm2

Steps: the mix's training part (`tfm.train.mix.mix_ids`) is cut into windows of --ctx tokens and
run through the model once; every stream (after the embedding and after each block) is kept in
fp16, without each window's first --skip-first positions (SmolLM2's attention sink has a stream
hundreds of times longer than the others). Every translator starts at the identity (zero weight
and bias) and all are trained together, one shuffled batch at a time, with Adam on
KL(final ‖ lens): the final distribution (the last stream decoded) is computed once per batch and
serves every layer. The last stream's translator stays the identity: that stream already is what
the final norm reads, so its KL is 0 and its gradient only rounding noise, which Adam's
normalised steps would turn into a drift (on SmolLM2 its KL rose to 0.7 nats in 16 steps). Every --checkpoint steps the weights, Adam's moments and the step go to
train_state.safetensors and the card: a rerun with the same settings goes on from there (other
settings stop it). At the end each translator is written in fp16 and the held-out text of each
domain is measured as the files load: per-layer KL and top-1 agreement for the tuned and the
logit lens (tfm.analysis.lens.compare), and the KL before fp16 rounding; the state file is removed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..analysis.lens.tuned import CARD_FILE, TunedLensConfig, finished_lens, read_card, save_translator, write_card
from ..loaders.loading import load
from ..loaders.weights import read_safetensors
from . import mix
from . import tuned_lens_eval as TLE
from .command import run_settings
from .transcoders import CORPUS
from .tuned_lens_card import card_markdown

STATE_FILE = "train_state.safetensors"
BETAS, EPS = (0.9, 0.999), 1e-8


def _args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tfm.train.tuned_lens", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="default", help="a tfm model spec (default, smollm2, path:<folder>)")
    p.add_argument("--tokens", type=int, default=16_384, help="training tokens of the mix (streams kept)")
    p.add_argument("--eval-tokens", type=int, default=2048, help="held-out tokens, an equal share per domain")
    p.add_argument("--ctx", type=int, default=128, help="window length the model reads")
    p.add_argument("--epochs", type=float, default=2.0, help="passes over the stored streams")
    p.add_argument("--batch", type=int, default=64, help="positions per step (each gives a full distribution)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--skip-first", type=int, default=1, help="leave out each window's first positions (the sink)")
    p.add_argument("--checkpoint", type=int, default=10, help="steps between saved training states")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--corpus", default=str(CORPUS), help="the folder holding the mix's text files")
    p.add_argument("--name", default="", help="what the card calls the model (default: the spec)")
    p.add_argument(
        "--init",
        default="",
        help="a finished set to start from instead of the identity (a second "
        "stage; its card's command and steps go into this card)",
    )
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def _settings(a: argparse.Namespace) -> dict:
    """What a rerun must share with the card to go on where it stopped."""
    return run_settings(a, **({"init": a.init} if a.init else {}))


def _start_card(out: Path, cfg: TunedLensConfig, a: argparse.Namespace, command: str) -> dict:
    """The folder's card when it matches this run (a resumed run), else a new one."""
    if not (out / CARD_FILE).is_file():
        return {
            "command": command,
            "model": cfg.model,
            "settings": _settings(a),
            "step": 0,
            "data": {"train": mix.describe("train"), "heldout": mix.describe("heldout")},
        }
    card = read_card(out)
    if card["config"] != cfg or card.get("settings") != _settings(a):
        raise ValueError(
            f"{out.name} holds a lens trained with {card['config'].to_dict()} and "
            f"{card.get('settings')}: pass the same settings to go on, or choose another --out"
        )
    card.pop("config")
    return card


def _state(out: Path, cfg: TunedLensConfig, step: int, init=None) -> dict[str, torch.Tensor]:
    """Weights and Adam moments (float32), from the state file when the card says steps were taken;
    else the identity, or `init`'s translators (a TunedLens)."""
    n, d = cfg.n_streams, cfg.d_model
    zeros = {"weight": torch.zeros(n, d, d), "bias": torch.zeros(n, d)}
    start = zeros if init is None else {"weight": init.weight.clone(), "bias": init.bias.clone()}
    state = {
        **start,
        **{f"{k}.m": torch.zeros_like(v) for k, v in zeros.items()},
        **{f"{k}.v": torch.zeros_like(v) for k, v in zeros.items()},
    }
    if step == 0:
        return state
    path = out / STATE_FILE
    if not path.is_file() or path.stat().st_size > 8 * sum(t.numel() for t in state.values()) + 2**16:
        raise ValueError(
            f"the card says {step} steps were taken but {STATE_FILE} is missing or too large: "
            f"remove {CARD_FILE} to start again"
        )
    loaded = read_safetensors(path)
    if {k: tuple(v.shape) for k, v in loaded.items()} != {k: tuple(v.shape) for k, v in state.items()}:
        raise ValueError(f"{STATE_FILE} does not match the config: remove it and {CARD_FILE} to start again")
    return {k: v.float() for k, v in loaded.items()}


def _adam(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, lr: float, t: int) -> None:
    """One Adam step in place on p (bias-corrected, step t from 1)."""
    m.mul_(BETAS[0]).add_(g, alpha=1 - BETAS[0])
    v.mul_(BETAS[1]).addcmul_(g, g, value=1 - BETAS[1])
    denom = (v / (1 - BETAS[1] ** t)).sqrt_().add_(EPS)
    p.addcdiv_(m, denom, value=-lr / (1 - BETAS[0] ** t))


def _lr(a: argparse.Namespace, step: int, total: int) -> float:
    """Linear warm-up over the first 5% of steps, then linear decay to zero."""
    warm = max(1, total // 20)
    return a.lr * min((step + 1) / warm, max(0.0, (total - step) / max(1, total - warm)))


def _layer_step(
    model, x: torch.Tensor, final: torch.Tensor, state: dict, r: int, lr: float, t: int, n_words: int | None
) -> float:
    """One Adam step on stream r's translator for a batch x (B, D) of that stream; its KL."""
    w = state["weight"][r].clone().requires_grad_(True)
    b = state["bias"][r].clone().requires_grad_(True)
    logq = TLE.decode_with_grad(model, x + x @ w + b, n_words)
    loss = (final.exp() * (final - logq)).sum(-1).mean()
    gw, gb = torch.autograd.grad(loss, (w, b))
    _adam(state["weight"][r], gw, state["weight.m"][r], state["weight.v"][r], lr, t)
    _adam(state["bias"][r], gb, state["bias.m"][r], state["bias.v"][r], lr, t)
    return float(loss.detach())


def train(lm, cfg: TunedLensConfig, card: dict, a: argparse.Namespace, log=print, init=None) -> dict:
    """Trains from the card's step to the end, saving the state every --checkpoint steps."""
    out, t0 = Path(a.out), time.perf_counter()
    ids = mix.mix_ids(lm.tokenizer, a.corpus, "train", a.tokens)
    streams = TLE.collect_streams(lm.model, ids, a.ctx, a.skip_first, log=log)  # (N, L+1, D) fp16
    n_words, n = TLE.words(lm), len(streams)
    per_epoch = max(1, n // a.batch)
    total = max(1, int(per_epoch * a.epochs))
    state = _state(out, cfg, card["step"], init)
    card.update(train_positions=n, steps=total)
    recent = [0.0] * cfg.n_streams
    for step in range(card["step"], total):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(a.seed * 7919 + step // per_epoch))
        rows = streams[order[(step % per_epoch) * a.batch : (step % per_epoch + 1) * a.batch]].float()  # (B, L+1, D)
        with torch.no_grad():
            final = TLE.decode_with_grad(lm.model, rows[:, -1], n_words)
        lr = _lr(a, step, total)
        kls = [_layer_step(lm.model, rows[:, r], final, state, r, lr, step + 1, n_words) for r in range(cfg.n_layer)]
        kls.append(0.0)  # the last stream: the identity, KL 0
        recent = [0.9 * old + 0.1 * new if step else new for old, new in zip(recent, kls)]
        if (step + 1) % a.checkpoint == 0 or step + 1 == total:
            _save_state(out, cfg, card, state, step + 1, recent, time.perf_counter() - t0)
            log(
                f"step {step + 1}/{total}: train KL by stream {[round(v, 2) for v in recent]} "
                f"({time.perf_counter() - t0:.0f}s)"
            )
    return state


def _save_state(out: Path, cfg: TunedLensConfig, card: dict, state: dict, step: int, recent, seconds: float) -> None:
    """The state first (written beside, then renamed: a kill leaves the old one whole), then the card."""
    tmp = out / (STATE_FILE + ".tmp")
    save_file({k: v.contiguous() for k, v in state.items()}, tmp)
    tmp.replace(out / STATE_FILE)
    card["step"], card["train_kl_recent"] = step, [round(v, 4) for v in recent]
    card["train_s"] = round(card.get("train_s_before", 0.0) + seconds, 1)
    _write(out, cfg, card)


def _write(out: Path, cfg: TunedLensConfig, card: dict) -> None:
    write_card(out, cfg, card)
    (out / "README.md").write_text(card_markdown({"config": cfg.to_dict(), **card}))


def finish(lm, cfg: TunedLensConfig, card: dict, state: dict, a: argparse.Namespace, log=print) -> None:
    """Writes every translator (fp16) and measures the held-out text per domain as the files load."""
    out = Path(a.out)
    for r in range(cfg.n_streams):
        save_translator(out, r, state["weight"][r], state["bias"][r])
    card["heldout"] = TLE.measure(lm, out, a.corpus, a.eval_tokens, a.ctx, a.skip_first, state, log=log)
    card["bytes"] = sum((out / f).stat().st_size for f in TLE.set_files(cfg))
    _write(out, cfg, card)
    (out / STATE_FILE).unlink(missing_ok=True)


def _init(folder: str, lm, card: dict):
    """The finished set a second stage starts from (None: the identity), noted in the card."""
    if not folder:
        return None
    init = finished_lens(Path(folder), lm)
    if init is None:
        raise ValueError(f"--init {Path(folder).name}: that set has not finished training")
    card["init"] = {k: init.card.get(k) for k in ("command", "steps", "train_positions", "settings")}
    return init


def run(a: argparse.Namespace, command: str, log=print) -> dict:
    torch.set_num_threads(a.threads)
    t_start, out = time.perf_counter(), Path(a.out)
    lm = load(a.model, device="cpu")
    cfg = TunedLensConfig(lm.config.d_model, lm.config.n_layer, a.name or a.model)
    out.mkdir(parents=True, exist_ok=True)
    card = _start_card(out, cfg, a, command)
    if "heldout" in card:
        log("this set is finished (its card has the held-out table)")
        return card
    card["train_s_before"] = card.get("train_s", 0.0)
    init = _init(a.init, lm, card)
    state = train(lm, cfg, card, a, log, init)
    card.pop("train_s_before", None)
    card["threads"] = a.threads
    finish(lm, cfg, card, state, a, log)
    card["wall_time_s"] = round(card.get("wall_time_s", 0) + time.perf_counter() - t_start, 1)
    _write(out, cfg, card)
    return card


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = _args(argv)
    try:
        card = run(a, "python -m tfm.train.tuned_lens " + " ".join(argv))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print({k: card.get(k) for k in ("wall_time_s", "bytes")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
