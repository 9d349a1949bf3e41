"""`python -m tfm.train.transcoders_stream`: a transcoder set trained on a stream of the mix, for
runs too long to keep activations (a million tokens and more on a CPU). It writes the same files
and card as `python -m tfm.train.transcoders` (tfm.analysis.dictionaries.transcoder reads them).

    python -m tfm.train.transcoders_stream --model smollm2 --features 1664 --k 32 --tokens 1010000 \\
        --storage int8 --skip-first --checkpoint /work/tc1m/run --out /work/tc1m/set

The mix's training part (`tfm.train.mix.mix_ids`, an equal share per domain) is cut into windows
of --ctx tokens, shuffled once by --seed, and read --chunk windows at a time. Each chunk runs
through the blocks once, up to the last layer trained (no unembedding), keeping every trained
layer's MLP input and output as `tfm.train.transcoder_eval.advance` defines them (the first
position of each window left out with --skip-first); then each layer takes --steps-per-chunk Adam
steps on its rows, shuffled (`tfm.train.topk_sparse`: the loss of tfm.train.topk, gradients
computed sparsely). Inputs and outputs are scaled to unit mean square by the first chunk's
figures, folded into the weights when written. The learning rate warms up over --warmup of the
planned tokens and falls linearly to 0 over the last fifth.

Every --checkpoint-every seconds, on SIGTERM or Ctrl-C, and at the end, the whole state goes to
--checkpoint (`tfm.train.stream_state`, outside the repository): run the same command again and it
goes on from there, as if it had not stopped. Every --eval-every tokens the held-out FVU of every
layer (on an eighth of the held-out rows) is logged and kept in the card's history. At the end each
layer is measured on the held-out part as its file will load, written to --out with the card, and
once every layer exists the next-token loss with the MLPs replaced (tfm.train.transcoders.measure_set).
"""

from __future__ import annotations

import argparse
import math
import signal
import threading
import time
from pathlib import Path

import torch

from ..analysis.dictionaries.transcoder import Transcoder, TranscoderConfig, save_layer, stored_copy
from ..core.validate import check_int, check_number
from ..loaders.loading import load
from . import mix
from . import stream_state as SS
from . import topk_sparse as S
from . import transcoder_eval as TE
from .command import run_command
from .data import id_windows
from .topk import DEAD_AFTER
from .transcoders import CORPUS, heldout_windows, measure_set, parse_layers, write_set

EVAL_STRIDE = 8  # the periodic held-out FVU reads every 8th held-out row


def _args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tfm.train.transcoders_stream", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="default", help="a tfm model spec (default, smollm2, path:<folder>)")
    p.add_argument("--features", type=int, default=1536)
    p.add_argument("--k", type=int, default=24)
    p.add_argument("--tokens", type=int, default=1_000_000, help="training tokens of the mix read (sink included)")
    p.add_argument("--eval-tokens", type=int, default=8192, help="held-out tokens, an equal share per domain")
    p.add_argument("--layers", default="", help="which blocks, e.g. 0-5 or 2,8 (default: all)")
    p.add_argument("--ctx", type=int, default=128, help="window length the model reads")
    p.add_argument("--chunk", type=int, default=32, help="windows per forward")
    p.add_argument("--steps-per-chunk", type=int, default=4, help="Adam steps per layer on each chunk's rows")
    p.add_argument("--lr", type=float, default=4e-3)
    p.add_argument("--warmup", type=float, default=0.02, help="share of the planned tokens the lr warms up over")
    p.add_argument("--storage", choices=("fp16", "int8"), default="fp16", help="how the layer files hold the matrices")
    p.add_argument("--skip-first", action="store_true", help="leave out each window's first position (a sink)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--corpus", default=str(CORPUS), help="the folder holding the mix's text files")
    p.add_argument("--name", default="", help="what the card calls the model (default: the spec)")
    p.add_argument("--out", required=True, help="the folder the finished set is written to")
    p.add_argument("--checkpoint", required=True, help="the folder of the run's checkpoint (outside the repository)")
    p.add_argument("--checkpoint-every", type=float, default=300.0, help="seconds between checkpoints")
    p.add_argument("--eval-every", type=int, default=131072, help="tokens between held-out FVU checks (0: never)")
    p.add_argument("--log-every", type=int, default=8, help="chunks between progress lines")
    p.add_argument(
        "--stop-after", type=int, default=0, help="stop (checkpointed) after this many chunks (0: at the end)"
    )
    return p.parse_args(argv)


def _settings(a: argparse.Namespace, layers: list[int], n_windows: int) -> dict:
    """What a resumed run must share with its checkpoint (and what the card's README reads)."""
    skip = int(a.skip_first)
    return {
        "model": a.model,
        "features": a.features,
        "k": a.k,
        "layers": layers,
        "tokens": a.tokens,
        "eval_tokens": a.eval_tokens,
        "ctx": a.ctx,
        "chunk": a.chunk,
        "steps_per_chunk": a.steps_per_chunk,
        "epochs": 1.0,
        "batch": a.chunk * (a.ctx - skip) // a.steps_per_chunk,
        "lr": a.lr,
        "warmup": a.warmup,
        "seed": a.seed,
        "skipped_first_positions": skip,
        "planned_tokens": n_windows * (a.ctx - skip),
    }


def check_args(a: argparse.Namespace) -> None:
    """The counts and rates a run needs, each in range (one ValueError naming the option)."""
    check_int("--ctx", a.ctx, 2 + int(a.skip_first), 1 << 16)
    check_int("--chunk", a.chunk, 1, 4096)
    check_int(
        "--steps-per-chunk", a.steps_per_chunk, 1, a.chunk * (a.ctx - int(a.skip_first)), " (a row per step at least)"
    )
    check_int("--tokens", a.tokens, a.ctx, 1 << 34, " (at least one window)")
    check_int("--eval-tokens", a.eval_tokens, 4 * (a.ctx + 1), 1 << 24, " (a window per domain at least)")
    check_number("--lr", a.lr, 1e-8, 1.0)
    check_number("--warmup", a.warmup, 0.0, 0.79, " (a share of the run, before the last fifth's decay)")
    check_number("--checkpoint-every", a.checkpoint_every, 1.0)
    check_int("--eval-every", a.eval_every, 0)
    check_int("--log-every", a.log_every, 1)
    check_int("--stop-after", a.stop_after, 0)


def train_windows(lm, a: argparse.Namespace) -> torch.Tensor:
    """The training part's windows (n, ctx), in the run's one shuffled order."""
    wins = id_windows(mix.mix_ids(lm.tokenizer, a.corpus, "train", a.tokens), a.ctx)
    if len(wins) == 0:
        raise ValueError(f"--tokens {a.tokens} gives no window of --ctx {a.ctx} tokens")
    return wins[torch.randperm(len(wins), generator=torch.Generator().manual_seed(a.seed))]


def activations(model, wins: torch.Tensor, layers: list[int], skip: int) -> dict:
    """{layer: (MLP inputs, MLP outputs)} fp16 of the windows, the blocks run up to the last layer."""
    stream, angles = TE.embed(model, wins)
    return TE.advance(model, stream, angles, range(max(layers) + 1), set(layers), skip)


def _lr(a: argparse.Namespace, progress: float) -> float:
    """Warm up over --warmup of the run, hold, fall linearly to 0 over the last fifth."""
    warm = min(1.0, (progress + 1e-9) / a.warmup) if a.warmup > 0 else 1.0
    return a.lr * warm * min(1.0, (1.0 - progress) / 0.2)


def train_chunk(state: SS.RunState, acts: dict, a: argparse.Namespace) -> None:
    """--steps-per-chunk Adam steps per layer on the chunk's rows (shuffled; the same split for every layer)."""
    rows = len(next(iter(acts.values()))[0])
    parts = torch.randperm(rows, generator=state.gen).tensor_split(a.steps_per_chunk)
    planned = state.settings["planned_tokens"]
    for layer, s in state.layers.items():
        t0 = time.perf_counter()
        x16, y16 = acts[layer]
        x, y = x16.float() / s.scales[0], y16.float() / s.scales[1]
        done = state.tokens
        for part in parts:
            fvu, grads, s.last_fired = S.step_grads(s.params, x[part], y[part], a.k, s.last_fired)
            S.apply(s.opt, s.params, grads, _lr(a, done / planned))
            done += len(part)
            s.steps += 1
            s.record(fvu)
        s.train_s += time.perf_counter() - t0
    state.tokens += rows


def _module(cfg: TranscoderConfig, layer: int, s: SS.LayerState) -> Transcoder:
    return S.to_module(s.params, Transcoder(cfg, layer), s.scales)


def heldout_fvu(cfg: TranscoderConfig, state: SS.RunState, held: dict, stride: int = EVAL_STRIDE) -> dict[int, float]:
    """Each layer's FVU on every `stride`-th held-out row, as trained so far (before storage)."""
    return {
        i: TE.layer_metrics(_module(cfg, i, s), held[i][0][::stride], held[i][1][::stride])["fvu"]
        for i, s in state.layers.items()
    }


def _start(lm, cfg: TranscoderConfig, wins: torch.Tensor, settings: dict, a, log) -> SS.RunState:
    """The checkpoint's state, or a new one built from the first chunk (its scales, b_dec)."""
    state = SS.load(Path(a.checkpoint), settings, a.lr)
    if state is not None:
        log(f"resuming at chunk {state.chunk}, {state.tokens:,} tokens seen")
        return state
    acts = activations(lm.model, wins[: a.chunk], settings["layers"], settings["skipped_first_positions"])
    layers = {}
    for i in settings["layers"]:
        gen = torch.Generator().manual_seed(a.seed * 1009 + i)
        layers[i] = SS.new_layer(cfg.n_features, acts[i][0].float(), acts[i][1].float(), a.lr, gen)
    return SS.RunState(settings, layers, torch.Generator().manual_seed(a.seed + 1))


class _Stop:
    """While the loop runs, SIGTERM and Ctrl-C only ask it to stop after the chunk in hand (saved
    whole, never half a chunk); the earlier handlers come back afterwards."""

    def __init__(self) -> None:
        self.asked, self._before = False, {}

    def __enter__(self) -> "_Stop":
        if threading.current_thread() is threading.main_thread():
            self._before = {sig: signal.signal(sig, self._ask) for sig in (signal.SIGTERM, signal.SIGINT)}
        return self

    def __exit__(self, *_) -> None:
        for sig, handler in self._before.items():
            signal.signal(sig, handler)

    def _ask(self, *_) -> None:
        self.asked = True


def _progress_line(state: SS.RunState, n_chunks: int, rate: float, fwd_share: float) -> str:
    planned = state.settings["planned_tokens"]
    left = (planned - state.tokens) / rate if rate > 0 else float("inf")
    fvus = {i: s.fvu_ema for i, s in state.layers.items()}
    med = sorted(fvus.values())[len(fvus) // 2]
    return (
        f"chunk {state.chunk}/{n_chunks} tokens {state.tokens:,}/{planned:,} {rate:.0f} tok/s "
        f"(forward {100 * fwd_share:.0f}%) ETA {left / 60:.0f} min; running FVU median {med:.3f} | "
        + " ".join(f"{i}:{f:.2f}" for i, f in fvus.items())
    )


def _maybe_eval(cfg, state: SS.RunState, held: dict, before: int, a, log) -> None:
    """Logs and keeps the held-out FVU each time the tokens cross a multiple of --eval-every."""
    if a.eval_every <= 0 or state.tokens // a.eval_every == before // a.eval_every:
        return
    fvu = heldout_fvu(cfg, state, held)
    state.history.append({"tokens": state.tokens, "heldout_fvu": {str(i): round(v, 4) for i, v in fvu.items()}})
    vals = sorted(fvu.values())
    log(f"held-out FVU at {state.tokens:,} tokens: median {vals[len(vals) // 2]:.4f}, " + str(state.history[-1]))


def _one_chunk(lm, cfg, state: SS.RunState, wins: torch.Tensor, held: dict, a, log) -> float:
    """Reads, runs and trains on the next chunk; returns the forward's seconds."""
    t0 = time.perf_counter()
    part = wins[state.chunk * a.chunk : (state.chunk + 1) * a.chunk]
    acts = activations(lm.model, part, state.settings["layers"], state.settings["skipped_first_positions"])
    fwd, before = time.perf_counter() - t0, state.tokens
    train_chunk(state, acts, a)
    state.chunk += 1
    _maybe_eval(cfg, state, held, before, a, log)
    return fwd


def train_stream(lm, cfg, state: SS.RunState, wins: torch.Tensor, held: dict, a, log=print) -> bool:
    """Chunk after chunk from state.chunk, checkpointed; True once the stream is done, False when
    stopped first (SIGTERM, Ctrl-C or --stop-after), its state saved either way."""
    with _Stop() as stop:
        return _chunks(lm, cfg, state, wins, held, a, stop, log)


def _chunks(lm, cfg, state: SS.RunState, wins: torch.Tensor, held: dict, a, stop: _Stop, log) -> bool:
    n_chunks, folder = math.ceil(len(wins) / a.chunk), Path(a.checkpoint)
    t_prev = t_save = t_log = time.perf_counter()
    tok_log, fwd, ran = state.tokens, 0.0, 0
    while state.chunk < n_chunks:
        fwd += _one_chunk(lm, cfg, state, wins, held, a, log)
        now, ran = time.perf_counter(), ran + 1
        state.elapsed_s, t_prev = state.elapsed_s + now - t_prev, now
        if state.chunk % a.log_every == 0 or state.chunk == n_chunks:
            log(_progress_line(state, n_chunks, (state.tokens - tok_log) / (now - t_log), fwd / (now - t_log)))
            t_log, tok_log, fwd = now, state.tokens, 0.0
        if stop.asked or (a.stop_after and ran >= a.stop_after):
            SS.save(folder, state)
            log(f"stopped after chunk {state.chunk}, {state.tokens:,} tokens: checkpoint in {folder}")
            return False
        if now - t_save >= a.checkpoint_every:
            SS.save(folder, state)
            t_save = time.perf_counter()
    SS.save(folder, state)
    return True


def _layer_entry(s: SS.LayerState, tokens: int, measured: dict, unrounded: float) -> dict:
    return {
        "steps": s.steps,
        "tokens_seen": tokens,
        "train_fvu_last": s.fvu_ema,  # running mean of the last ~20 batches
        "dead_share_train": float((s.last_fired >= min(tokens, DEAD_AFTER)).float().mean()),
        "train_s": round(s.train_s, 1),
        "input_scale": s.scales[0],
        "output_scale": s.scales[1],
        **measured,
        "fvu_before_storage": unrounded,
    }


def write_trained(lm, cfg, state: SS.RunState, held: dict, a, command: str, log=print) -> dict:
    """Measures each layer on the held-out rows as its file loads, writes the files and the card,
    and once every layer is there, the next-token loss with the MLPs replaced."""
    out = Path(a.out)
    card = {
        "command": command,
        "trainer": "tfm.train.transcoders_stream",
        "model": cfg.model,
        "settings": state.settings,
        "layers": {},
        "data": {"train": mix.describe("train"), "heldout": mix.describe("heldout")},
    }
    for i, s in state.layers.items():
        tc = _module(cfg, i, s)
        measured = TE.layer_metrics(stored_copy(tc), *held[i])
        card["layers"][str(i)] = _layer_entry(s, state.tokens, measured, TE.layer_metrics(tc, *held[i])["fvu"])
        save_layer(tc, out)
        log(f"layer {i}: held-out fvu {measured['fvu']:.4f} l0 {measured['l0']:.1f} dead {measured['dead_share']:.3f}")
    card["train_tokens"], card["heldout_tokens"] = state.tokens, len(held[next(iter(held))][0])
    card["wall_time_s"], card["threads"], card["history"] = round(state.elapsed_s, 1), a.threads, state.history
    write_set(out, cfg, card)
    if len(card["layers"]) == cfg.n_layer:
        measure_set(lm, cfg, card, a, log)
    return card


def run(a: argparse.Namespace, command: str, log=print) -> dict:
    check_args(a)
    torch.set_num_threads(check_int("--threads", a.threads, 1, 256))
    lm = load(a.model, device="cpu")
    TE.check_blocks(lm.config)
    cfg = TranscoderConfig(lm.config.d_model, lm.config.n_layer, a.features, a.k, a.name or a.model, a.storage)
    layers = parse_layers(a.layers, cfg.n_layer) if a.layers else list(range(cfg.n_layer))
    wins = train_windows(lm, a)
    settings = _settings(a, layers, len(wins))
    state = _start(lm, cfg, wins, settings, a, log)
    held_wins = torch.cat(list(heldout_windows(lm, a).values()))[:, :-1]
    held = activations(lm.model, held_wins, layers, settings["skipped_first_positions"])
    if not train_stream(lm, cfg, state, wins, held, a, log):
        return {"stopped_at_tokens": state.tokens}
    return write_trained(lm, cfg, state, held, a, command, log)


def main(argv=None) -> int:
    return run_command("tfm.train.transcoders_stream", argv, _args, run, ("train_tokens", "wall_time_s", "ce"))


if __name__ == "__main__":
    raise SystemExit(main())
