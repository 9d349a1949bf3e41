r"""`python -m tfm.train`: train a GPT on text files, with checkpoints, resume and export.

Configuration comes from flags or a JSON file (`--config run.json`, the flags' names as
keys), never from executed code. Precedence: defaults < checkpoint (with --resume) < JSON
< flags on the command line. Example:

    python -m tfm.train --run /work/runs/small --data stories.txt:50 books.txt.gz:40 plays.txt:10 \
        --eval-file valid.txt --preset tfm-small --dropout 0.1 --bf16 --threads 2 \
        --max-tokens 20e6 --time-budget 5700

The run folder gets cache/ (token arrays), metrics.jsonl (one JSON object per log / eval),
ckpt.pt (plain tensors and containers: loads with weights_only=True) and model/ (a tfm model
folder for `tfm.load`). Run the same command with --resume to continue exactly.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import sys
import threading
import time
from contextlib import nullcontext
from dataclasses import fields
from pathlib import Path
from typing import Literal, get_args, get_origin, get_type_hints

import torch
import torch.nn.functional as F

from .config import PRESETS, ModelConfig
from .loading import ASSETS, pick_device
from .model import GPT
from .train_data import EvalText, Mix, load_tokenizer
from .weights import load_tfm_folder, save_model

MODEL_KEYS = [f.name for f in fields(ModelConfig) if f.name != "vocab_size"]
NOT_INHERITED = {"resume", "config", "run", "stop_at_step"}  # per invocation, never taken from a checkpoint
CKPT_FORMAT = "tfm-train-ckpt-1"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tfm.train", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("run")
    g.add_argument("--run", help="run folder (cache, metrics, checkpoint, model/)")
    g.add_argument("--config", help="JSON object of flag values (keys as flag names)")
    g.add_argument("--resume", action="store_true", help="continue from RUN/ckpt.pt")
    g.add_argument("--init-from", metavar="FOLDER",
                   help="start from the weights of a tfm model folder (same model config; new optimizer and schedule)")
    g = p.add_argument_group("data")
    g.add_argument("--data", nargs="+", metavar="FILE[:WEIGHT]", help=".txt or .txt.gz files; batches pick a file with probability ∝ WEIGHT (default 1)")
    g.add_argument("--tokenizer", default=str(ASSETS / "tokenizer"), help="folder with tokenizer.tiktoken + special_tokens.json")
    g.add_argument("--cache-dir", help="token cache folder (default RUN/cache); runs may share one")
    g.add_argument("--val-frac", type=float, default=0.01, help="held-out tail of each file")
    g.add_argument("--val-windows", type=int, default=16, help="held-out windows per file per eval")
    g.add_argument("--eval-file", help="text scored in bits per byte at each eval")
    g.add_argument("--eval-bytes", type=int, default=200_000, help="prefix of --eval-file to score")
    g.add_argument("--copy-frac", type=float, default=0.0,
                   help="fraction of training rows made of random tokens repeating (only the repeats are learned)")
    g.add_argument("--repeat-frac", type=float, default=0.0,
                   help="fraction of training rows that repeat a random span of their text (teaches copying from context)")
    add_model_flags(p.add_argument_group("model (a preset, then overrides)"))
    g = p.add_argument_group("optimisation")
    g.add_argument("--max-steps", type=int, help="optimizer steps (or --max-tokens; the smaller wins)")
    g.add_argument("--max-tokens", type=float, help="training tokens, e.g. 20e6")
    g.add_argument("--batch-size", type=int, default=16)
    g.add_argument("--grad-accum", type=int, default=1)
    g.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    g.add_argument("--min-lr-frac", type=float, default=0.1, help="cosine decays to this fraction of --lr")
    g.add_argument("--warmup-steps", type=int, default=100)
    g.add_argument("--weight-decay", type=float, default=0.1, help="on 2-D weights only")
    g.add_argument("--grad-clip", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=1337)
    g = p.add_argument_group("machine and reporting")
    g.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    g.add_argument("--threads", type=int, help="torch CPU threads")
    g.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=False, help="bfloat16 autocast")
    g.add_argument("--log-every", type=int, default=10)
    g.add_argument("--eval-every", type=int, default=250)
    g.add_argument("--eval-batch", type=int, default=16)
    g.add_argument("--ckpt-every", type=int, default=250)
    g.add_argument("--export-every", type=int, default=0, help="0: export only at the end")
    g.add_argument("--time-budget", type=float, help="seconds; then checkpoint, export and stop")
    g.add_argument("--stop-at-step", type=int,
                   help="checkpoint, export and stop at this step, keeping the schedule of the full run "
                        "(reproduces a run that was cut short by its time budget)")
    return p


def add_model_flags(g) -> None:
    """One flag per ModelConfig field (None = the preset's value), typed from the dataclass."""
    g.add_argument("--preset", default="tfm-small", choices=sorted(PRESETS))
    g.add_argument("--vocab-size", type=int, help="optional check: must equal the tokenizer's")
    hints = get_type_hints(ModelConfig)
    for name in MODEL_KEYS:
        kind, flag = hints[name], "--" + name.replace("_", "-")
        if kind is bool:
            g.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        elif get_origin(kind) is Literal:
            g.add_argument(flag, choices=get_args(kind))
        else:
            g.add_argument(flag, type=kind)


def coerce(action: argparse.Action, key: str, value):
    """Check one JSON value against its flag: the same types and choices as on the command line."""
    if value is None:
        return None
    if action.nargs == 0:
        ok, want = isinstance(value, bool), "true or false"
    elif action.nargs == "+":
        ok, want = isinstance(value, list) and all(isinstance(v, str) for v in value), "a list of strings"
    elif action.type in (int, float):
        ok = isinstance(value, (int, float) if action.type is float else int) and not isinstance(value, bool)
        want = "an integer" if action.type is int else "a number"
    else:
        ok, want = isinstance(value, str), "a string"
    if ok and action.choices is not None and value not in action.choices:
        ok, want = False, f"one of {list(action.choices)}"
    if not ok:
        raise ValueError(f"{key}={value!r}: expected {want}")
    return float(value) if action.type is float else value


def json_defaults(parser: argparse.ArgumentParser, path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        parser.error(f"--config {path}: {e}")
    if not isinstance(data, dict):
        parser.error(f"--config {path}: expected a JSON object of flag values")
    actions = {a.dest: a for a in parser._actions if a.dest not in ("help", "config")}
    out = {}
    for key, value in data.items():
        dest = key.replace("-", "_")
        if dest not in actions:
            parser.error(f"--config {path}: unknown key {key!r}; allowed keys: {', '.join(sorted(actions))}")
        try:
            out[dest] = coerce(actions[dest], key, value)
        except ValueError as e:
            parser.error(f"--config {path}: {e}")
    return out


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, dict | None]:
    """Layer defaults < checkpoint args (--resume) < JSON config < command line."""
    parser = build_parser()
    first, ckpt = parser.parse_args(argv), None
    from_json = json_defaults(parser, first.config) if first.config else {}
    run = first.run or from_json.get("run")
    if not run:
        parser.error("--run is required (the run folder)")
    if first.resume:
        ckpt = load_ckpt(Path(run) / "ckpt.pt", parser)
        parser.set_defaults(**{k: v for k, v in ckpt["args"].items() if k not in NOT_INHERITED})
    parser.set_defaults(**from_json)
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("--data is required (one or more FILE[:WEIGHT])")
    if args.max_steps is None and args.max_tokens is None:
        parser.error("give --max-steps or --max-tokens")
    for name in ("batch_size", "grad_accum", "log_every", "max_steps", "max_tokens", "eval_bytes", "val_windows",
                 "eval_batch", "threads", "time_budget", "stop_at_step"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    for name in ("eval_every", "ckpt_every", "export_every", "warmup_steps", "weight_decay", "grad_clip", "lr"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must not be negative")
    if not 0 <= args.min_lr_frac <= 1 or not 0 < args.val_frac < 0.5:
        parser.error("--min-lr-frac must be in [0, 1] and --val-frac in (0, 0.5)")
    return args, ckpt


def load_ckpt(path: Path, parser) -> dict:
    if not path.is_file():
        parser.error(f"--resume: no checkpoint at {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, pickled objects, ...: say which file and why
        parser.error(f"--resume: cannot read {path} ({type(e).__name__}: {e})")
    if not isinstance(ckpt, dict) or ckpt.get("format") != CKPT_FORMAT:
        parser.error(f"--resume: {path} is not a tfm.train checkpoint")
    return ckpt


def model_config(args, vocab_size: int) -> ModelConfig:
    if args.vocab_size is not None and args.vocab_size != vocab_size:
        raise ValueError(f"--vocab-size {args.vocab_size} does not match the tokenizer in {args.tokenizer}, "
                         f"which has {vocab_size} ids; vocab_size always comes from the tokenizer")
    overrides = {k: getattr(args, k) for k in MODEL_KEYS if getattr(args, k) is not None}
    return ModelConfig.preset(args.preset, **{**overrides, "vocab_size": vocab_size})


def lr_at(step: int, peak: float, warmup: int, total: int, min_frac: float) -> float:
    """Linear warmup, then cosine decay to min_frac * peak at `total` steps."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: GPT, args) -> torch.optim.AdamW:
    """AdamW; decay only matrices (embeddings, linear weights), never gains or biases."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": args.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95))


def atomic_save(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)  # a crash mid-write leaves the previous checkpoint intact


def trim_metrics(path: Path, step: int) -> None:
    """Drop lines logged after the checkpoint we resume from: they will be logged again."""
    if path.is_file():
        keep = [ln for ln in path.read_text().splitlines() if ln and json.loads(ln)["step"] <= step]
        path.write_text("".join(ln + "\n" for ln in keep))


def fmt_time(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class StopOnInterrupt:
    """Ctrl-C asks for a clean stop after the current step; a second Ctrl-C aborts at once."""

    def __init__(self) -> None:
        self.reason, self.prev = None, None

    def __enter__(self) -> "StopOnInterrupt":
        if threading.current_thread() is threading.main_thread():  # signals need the main thread
            self.prev = signal.signal(signal.SIGINT, self.handle)
        return self

    def handle(self, signum, frame) -> None:
        if self.reason:
            raise KeyboardInterrupt
        self.reason = "interrupted"
        print("stopping after this step (checkpoint + export); Ctrl-C again to abort", file=sys.stderr)

    def __exit__(self, *exc) -> None:
        if self.prev is not None:
            signal.signal(signal.SIGINT, self.prev)


class Trainer:
    def __init__(self, args, ckpt: dict | None, argv: list[str]) -> None:
        self.args, self.run = args, Path(args.run)
        self.run.mkdir(parents=True, exist_ok=True)
        if args.threads:
            torch.set_num_threads(args.threads)
        self.device = pick_device(args.device)
        self.tok, tok_hash = load_tokenizer(args.tokenizer)
        if ckpt and ckpt.get("tokenizer_hash", tok_hash) != tok_hash:  # older ckpts lack it
            raise ValueError(f"--resume: {args.tokenizer} is not the tokenizer this run was trained with")
        self.cfg = model_config(args, self.tok.vocab_size)
        if ckpt and ckpt["config"] != self.cfg.to_dict():
            diff = {k: v for k, v in self.cfg.to_dict().items() if ckpt["config"].get(k) != v}
            raise ValueError(f"--resume: the checkpoint's model differs in {diff}; the shape cannot change mid-run")
        ctx, self.tok_hash = self.cfg.context_length, tok_hash
        self.mix = Mix.load(args.data, self.tok, tok_hash, args.cache_dir or self.run / "cache", args.val_frac, ctx,
                            args.repeat_frac, args.copy_frac)
        self.eval_text = EvalText(args.eval_file, self.tok, args.eval_bytes, ctx) if args.eval_file else None
        torch.manual_seed(args.seed)  # dropout draws from the global generator
        self.model = GPT(self.cfg)
        self.model.reset_parameters(torch.Generator().manual_seed(args.seed))
        if args.init_from and not ckpt:
            self.init_from(Path(args.init_from))
        self.model.to(self.device).train()
        self.opt = make_optimizer(self.model, args)
        self.gen = torch.Generator().manual_seed(args.seed)  # batches only: resumable
        self.step, self.tokens, self.elapsed, self.last_eval = 0, 0, 0.0, {}
        self.commands = [["python", "-m", "tfm.train", *argv]]
        if ckpt:
            self.restore(ckpt)
        self.tokens_per_step = args.batch_size * args.grad_accum * ctx
        by_tokens = math.ceil(args.max_tokens / self.tokens_per_step) if args.max_tokens else None
        self.total_steps = min(s for s in (args.max_steps, by_tokens) if s is not None)

    def init_from(self, folder: Path) -> None:
        """Copy weights from a tfm model folder; its config and tokenizer must match this run's."""
        model, tok, _ = load_tfm_folder(folder)
        if model.config != self.cfg:
            diff = {k: v for k, v in self.cfg.to_dict().items() if model.config.to_dict().get(k) != v}
            raise ValueError(f"--init-from {folder}: its model differs from this run's in {diff}; "
                             f"give the same --preset and overrides")
        if [tok.decode_bytes([i]) for i in range(tok.vocab_size)] != \
                [self.tok.decode_bytes([i]) for i in range(self.tok.vocab_size)]:
            raise ValueError(f"--init-from {folder}: its tokenizer differs from --tokenizer {self.args.tokenizer}")
        self.model.load_state_dict(model.state_dict())

    def autocast(self):
        if not self.args.bf16:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def restore(self, ckpt: dict) -> None:
        self.model.load_state_dict(ckpt["model"])
        self.opt.load_state_dict(ckpt["optimizer"])
        self.step, self.tokens, self.elapsed = ckpt["step"], ckpt["tokens"], ckpt["elapsed"]
        self.last_eval, self.commands = ckpt["last_eval"], ckpt["commands"] + self.commands
        self.gen.set_state(ckpt["rng"]["batch"])
        torch.set_rng_state(ckpt["rng"]["torch"])
        if "cuda" in ckpt["rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(ckpt["rng"]["cuda"])
        trim_metrics(self.run / "metrics.jsonl", self.step)

    def train_step(self) -> float:
        a = self.args
        lr = lr_at(self.step, a.lr, a.warmup_steps, self.total_steps, a.min_lr_frac)
        for group in self.opt.param_groups:
            group["lr"] = lr
        total = 0.0
        for _ in range(a.grad_accum):
            x, y = (t.to(self.device) for t in self.mix.batch(self.gen, a.batch_size))
            with self.autocast():
                logits = self.model(x).logits
            loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
            (loss / a.grad_accum).backward()
            total += loss.item() / a.grad_accum
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), a.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return total

    def train(self) -> int:
        """Train to the end, or until the time budget or Ctrl-C; then eval, checkpoint, export."""
        t0, base, losses = time.time(), self.elapsed, []
        self.print_start()
        self.meter = (t0, self.tokens)
        with StopOnInterrupt() as stop:
            while self.step < self.total_steps and not stop.reason:
                losses.append(self.train_step())
                self.step, self.tokens = self.step + 1, self.tokens + self.tokens_per_step
                self.elapsed = base + time.time() - t0
                losses = self.periodic(losses)
                if self.args.time_budget and time.time() - t0 >= self.args.time_budget:
                    stop.reason = f"time budget of {self.args.time_budget:g}s reached"
                if self.args.stop_at_step and self.step >= self.args.stop_at_step:
                    stop.reason = f"--stop-at-step {self.args.stop_at_step} reached"
            if stop.reason:
                print(f"{stop.reason} at step {self.step}; continue with the same command plus --resume",
                      file=sys.stderr)
            if self.last_eval.get("step") != self.step:
                self.evaluate()
            self.save_ckpt()
            self.export()
        return 0

    def periodic(self, losses: list[float]) -> list[float]:
        """Logging, evals, checkpoints and exports due after this step; returns pending losses."""
        a = self.args
        if self.step % a.log_every == 0 or self.step == self.total_steps:
            self.log_train(losses)
            losses = []
        if a.eval_every and self.step % a.eval_every == 0:
            self.evaluate()
        if a.ckpt_every and self.step % a.ckpt_every == 0:
            self.save_ckpt()
        if a.export_every and self.step % a.export_every == 0:
            self.export()
        return losses

    def print_start(self) -> None:
        n = self.model.num_params()
        print(f"model {n / 1e6:.2f}M params, {self.cfg.to_dict()}", file=sys.stderr)
        print(f"{self.tokens_per_step} tokens/step; step {self.step} of {self.total_steps} "
              f"({self.total_steps * self.tokens_per_step / 1e6:.1f}M tokens) on {self.device}"
              f"{' bf16' if self.args.bf16 else ''}", file=sys.stderr)
        for d in self.mix.describe(self.total_steps * self.tokens_per_step):
            print(f"  {d['file']}: {d['train_tokens']} train + {d['val_tokens']} held-out tokens, "
                  f"share {d['share']:.3f} -> {d['epochs']:.2f} epochs by the end", file=sys.stderr)

    def write_metrics(self, rec: dict) -> None:
        with open(self.run / "metrics.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")

    def log_train(self, losses: list[float]) -> None:
        now = time.time()
        rate = (self.tokens - self.meter[1]) / max(now - self.meter[0], 1e-9)
        self.meter = (now, self.tokens)
        loss = sum(losses) / len(losses)
        eta = (self.total_steps - self.step) * self.tokens_per_step / max(rate, 1e-9)
        lr = self.opt.param_groups[0]["lr"]
        print(f"step {self.step}/{self.total_steps} ({100 * self.step / self.total_steps:.0f}%) | "
              f"tokens {self.tokens / 1e6:.2f}M | loss {loss:.4f} | lr {lr:.2e} | "
              f"{rate:,.0f} tok/s | eta {fmt_time(eta)}", file=sys.stderr)
        self.write_metrics({"kind": "train", "step": self.step, "tokens": self.tokens, "loss": loss,
                            "lr": lr, "tokens_per_s": round(rate, 1), "elapsed": round(self.elapsed, 2)})

    def evaluate(self) -> None:
        a = self.args
        self.model.eval()  # always fp32: evals of bf16 and fp32 runs stay comparable
        per_file = self.mix.val_losses(self.model, self.device, nullcontext, a.val_windows, a.eval_batch)
        rec = {"kind": "eval", "step": self.step, "tokens": self.tokens, "elapsed": round(self.elapsed, 2),
               "val_loss": self.mix.mixed(per_file), "val": per_file}
        if self.eval_text:
            rec["eval_bpb"] = self.eval_text.bits_per_byte(self.model, self.device, nullcontext, a.eval_batch)
        self.model.train()
        shown = f" | {Path(a.eval_file).name} {rec['eval_bpb']:.4f} bits/byte" if self.eval_text else ""
        print(f"eval step {self.step} | held-out loss {rec['val_loss']:.4f}{shown}", file=sys.stderr)
        self.write_metrics(rec)
        self.last_eval = rec

    def save_ckpt(self) -> None:
        rng = {"batch": self.gen.get_state(), "torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        atomic_save({"format": CKPT_FORMAT, "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                     "step": self.step, "tokens": self.tokens, "elapsed": self.elapsed, "rng": rng,
                     "config": self.cfg.to_dict(), "tokenizer_hash": self.tok_hash, "args": vars(self.args),
                     "last_eval": self.last_eval, "commands": self.commands}, self.run / "ckpt.pt")

    def export(self) -> None:
        """Write RUN/model (a tfm model folder) by building model.tmp and swapping it in."""
        meta = {"trained_with": "tfm.train", "tokens_seen": self.tokens, "steps": self.step,
                "wall_time_s": round(self.elapsed, 1), "device": str(self.device), "bf16": self.args.bf16,
                "final_eval": self.last_eval, "eval_file": self.args.eval_file, "eval_bytes": self.args.eval_bytes,
                "data": self.mix.describe(self.tokens), "command": shlex.join(self.commands[0]),
                "commands": [shlex.join(c) for c in self.commands], "args": vars(self.args)}
        final, tmp, old = self.run / "model", self.run / "model.tmp", self.run / "model.old"
        shutil.rmtree(tmp, ignore_errors=True)
        save_model(tmp, self.model, self.tok, meta)
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args, ckpt = parse_args(argv)
    try:
        trainer = Trainer(args, ckpt, argv)
    except (ValueError, FileNotFoundError) as e:
        print(f"python -m tfm.train: error: {e}", file=sys.stderr)
        return 2
    return trainer.train()


if __name__ == "__main__":
    sys.exit(main())
