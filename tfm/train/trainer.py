"""The Trainer behind `python -m tfm.train` (its command line is `tfm/train.py`).

`Trainer(args, ckpt, argv)` builds the model, data mix and optimizer from parsed arguments and
trains with checkpoints (plain tensors, `weights_only=True`), resume, evals and export to a tfm
model folder. Everything here takes an `argparse.Namespace`-like object, so it can be driven
from code as well as from the command line.
"""

from __future__ import annotations

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

import torch
import torch.nn.functional as F

from ..core.config import ModelConfig
from ..loaders.loading import pick_device
from ..core.model import GPT
from .data import EvalText, Mix, load_tokenizer
from ..loaders.weights import load_tfm_folder, save_model

MODEL_KEYS = [f.name for f in fields(ModelConfig) if f.name != "vocab_size"]
CKPT_FORMAT = "tfm-train-ckpt-1"


def model_config(args, vocab_size: int) -> ModelConfig:
    if args.vocab_size is not None and args.vocab_size != vocab_size:
        raise ValueError(
            f"--vocab-size {args.vocab_size} does not match the tokenizer in {args.tokenizer}, "
            f"which has {vocab_size} ids; vocab_size always comes from the tokenizer"
        )
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
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": args.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
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
        self.mix = Mix.load(
            args.data,
            self.tok,
            tok_hash,
            args.cache_dir or self.run / "cache",
            args.val_frac,
            ctx,
            args.repeat_frac,
            args.copy_frac,
        )
        self.eval_text = EvalText(args.eval_file, self.tok, args.eval_bytes, ctx) if args.eval_file else None
        torch.manual_seed(args.seed)  # dropout draws from the global generator
        self.model = GPT(self.cfg, torch.Generator().manual_seed(args.seed))
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
            raise ValueError(
                f"--init-from {folder}: its model differs from this run's in {diff}; "
                f"give the same --preset and overrides"
            )
        if [tok.decode_bytes([i]) for i in range(tok.vocab_size)] != [
            self.tok.decode_bytes([i]) for i in range(self.tok.vocab_size)
        ]:
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
                print(
                    f"{stop.reason} at step {self.step}; continue with the same command plus --resume", file=sys.stderr
                )
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
        print(
            f"{self.tokens_per_step} tokens/step; step {self.step} of {self.total_steps} "
            f"({self.total_steps * self.tokens_per_step / 1e6:.1f}M tokens) on {self.device}"
            f"{' bf16' if self.args.bf16 else ''}",
            file=sys.stderr,
        )
        for d in self.mix.describe(self.total_steps * self.tokens_per_step):
            print(
                f"  {d['file']}: {d['train_tokens']} train + {d['val_tokens']} held-out tokens, "
                f"share {d['share']:.3f} -> {d['epochs']:.2f} epochs by the end",
                file=sys.stderr,
            )

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
        print(
            f"step {self.step}/{self.total_steps} ({100 * self.step / self.total_steps:.0f}%) | "
            f"tokens {self.tokens / 1e6:.2f}M | loss {loss:.4f} | lr {lr:.2e} | "
            f"{rate:,.0f} tok/s | eta {fmt_time(eta)}",
            file=sys.stderr,
        )
        self.write_metrics(
            {
                "kind": "train",
                "step": self.step,
                "tokens": self.tokens,
                "loss": loss,
                "lr": lr,
                "tokens_per_s": round(rate, 1),
                "elapsed": round(self.elapsed, 2),
            }
        )

    def evaluate(self) -> None:
        a = self.args
        self.model.eval()  # always fp32: evals of bf16 and fp32 runs stay comparable
        per_file = self.mix.val_losses(self.model, self.device, nullcontext, a.val_windows, a.eval_batch)
        rec = {
            "kind": "eval",
            "step": self.step,
            "tokens": self.tokens,
            "elapsed": round(self.elapsed, 2),
            "val_loss": self.mix.mixed(per_file),
            "val": per_file,
        }
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
        atomic_save(
            {
                "format": CKPT_FORMAT,
                "model": self.model.state_dict(),
                "optimizer": self.opt.state_dict(),
                "step": self.step,
                "tokens": self.tokens,
                "elapsed": self.elapsed,
                "rng": rng,
                "config": self.cfg.to_dict(),
                "tokenizer_hash": self.tok_hash,
                "args": vars(self.args),
                "last_eval": self.last_eval,
                "commands": self.commands,
            },
            self.run / "ckpt.pt",
        )

    def export(self) -> None:
        """Write RUN/model (a tfm model folder) by building model.tmp and swapping it in."""
        meta = {
            "trained_with": "tfm.train",
            "tokens_seen": self.tokens,
            "steps": self.step,
            "wall_time_s": round(self.elapsed, 1),
            "device": str(self.device),
            "bf16": self.args.bf16,
            "final_eval": self.last_eval,
            "eval_file": self.args.eval_file,
            "eval_bytes": self.args.eval_bytes,
            "data": self.mix.describe(self.tokens),
            "command": shlex.join(self.commands[0]),
            "commands": [shlex.join(c) for c in self.commands],
            "args": vars(self.args),
        }
        final, tmp, old = self.run / "model", self.run / "model.tmp", self.run / "model.old"
        shutil.rmtree(tmp, ignore_errors=True)
        save_model(tmp, self.model, self.tok, meta)
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
