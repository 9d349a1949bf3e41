"""What each `python -m tfm.train.<trainer>` shares around its run: the arguments parsed, the
command line kept for the card, a ValueError as one line and exit status 2, the card's headline,
and the settings a rerun must share with the card to go on where it stopped."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

RUN_SETTINGS = ("tokens", "eval_tokens", "ctx", "epochs", "batch", "lr", "seed")


def run_command(prog: str, argv: list[str] | None, parse: Callable, run: Callable, shown: tuple[str, ...]) -> int:
    """`run(parse(argv), "python -m <prog> <argv>")` -> a card; prints the card's `shown` fields."""
    argv = sys.argv[1:] if argv is None else argv
    a = parse(argv)
    try:
        card = run(a, f"python -m {prog} " + " ".join(argv))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print({k: card.get(k) for k in shown})
    return 0


def run_settings(a: argparse.Namespace, **extra) -> dict:
    """What a rerun must share with the card to go on where it stopped (a trainer adds its own)."""
    return {**{k: getattr(a, k) for k in RUN_SETTINGS}, "skipped_first_positions": int(a.skip_first), **extra}
