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

This module is the command line (flags, JSON config, checkpoint defaults); the training loop
itself is `tfm.train.trainer.Trainer`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Literal, get_args, get_origin, get_type_hints

import torch

from ..core.config import PRESETS, ModelConfig
from ..loaders.loading import ASSETS
from .trainer import CKPT_FORMAT, MODEL_KEYS, Trainer

NOT_INHERITED = {"resume", "config", "run", "stop_at_step"}  # per invocation, never taken from a checkpoint


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tfm.train",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    _add_run_and_data_flags(p)
    add_model_flags(p.add_argument_group("model (a preset, then overrides)"))
    _add_optimisation_and_machine_flags(p)
    return p


def _add_run_and_data_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("run")
    g.add_argument("--run", help="run folder (cache, metrics, checkpoint, model/)")
    g.add_argument("--config", help="JSON object of flag values (keys as flag names)")
    g.add_argument("--resume", action="store_true", help="continue from RUN/ckpt.pt")
    g.add_argument(
        "--init-from",
        metavar="FOLDER",
        help="start from the weights of a tfm model folder (same model config; new optimizer and schedule)",
    )
    g = p.add_argument_group("data")
    g.add_argument(
        "--data",
        nargs="+",
        metavar="FILE[:WEIGHT]",
        help=".txt or .txt.gz files; batches pick a file with probability ∝ WEIGHT (default 1)",
    )
    g.add_argument(
        "--tokenizer", default=str(ASSETS / "tokenizer"), help="folder with tokenizer.tiktoken + special_tokens.json"
    )
    g.add_argument("--cache-dir", help="token cache folder (default RUN/cache); runs may share one")
    g.add_argument("--val-frac", type=float, default=0.01, help="held-out tail of each file")
    g.add_argument("--val-windows", type=int, default=16, help="held-out windows per file per eval")
    g.add_argument("--eval-file", help="text scored in bits per byte at each eval")
    g.add_argument("--eval-bytes", type=int, default=200_000, help="prefix of --eval-file to score")
    g.add_argument(
        "--copy-frac",
        type=float,
        default=0.0,
        help="fraction of training rows made of random tokens repeating (only the repeats are learned)",
    )
    g.add_argument(
        "--repeat-frac",
        type=float,
        default=0.0,
        help="fraction of training rows that repeat a random span of their text (teaches copying from context)",
    )


def _add_optimisation_and_machine_flags(p: argparse.ArgumentParser) -> None:
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
    g.add_argument(
        "--stop-at-step",
        type=int,
        help="checkpoint, export and stop at this step, keeping the schedule of the full run "
        "(reproduces a run that was cut short by its time budget)",
    )


def add_model_flags(g) -> None:
    """One flag per ModelConfig field (None = the preset's value), typed from the dataclass."""
    g.add_argument("--preset", default="tfm-small", choices=sorted(PRESETS))
    g.add_argument("--vocab-size", type=int, help="optional check: must equal the tokenizer's")
    hints = get_type_hints(ModelConfig)
    for name in MODEL_KEYS:
        kind, flag = hints[name], "--" + name.replace("_", "-")
        if type(None) in get_args(kind):  # `int | None` (n_kv_head): the flag takes the int
            kind = next(a for a in get_args(kind) if a is not type(None))
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
    for name in (
        "batch_size",
        "grad_accum",
        "log_every",
        "max_steps",
        "max_tokens",
        "eval_bytes",
        "val_windows",
        "eval_batch",
        "threads",
        "time_budget",
        "stop_at_step",
    ):
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
