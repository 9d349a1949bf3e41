"""The one integer and number check of the engine: every bound on a count, size, id or setting
goes through `check_int` / `check_number`, so every refusal reads the same way and names
the allowed range.

    check_int("top_k", 5, 0, hint=" (0 turns top-k off)")      -> 5
    check_int("n_head", True, 1)                                -> ValueError (bools are not ints)
    check_number("temperature", -1, low=0)                      -> ValueError
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any, TypeVar

__all__ = ["check_int", "check_number", "from_json_object"]

D = TypeVar("D")


def _range(low: float | None, high: float | None) -> str:
    """'between 1 and 65,536', '>= 0' or '<= 1' (thousands separated: limits are often large)."""
    if low is not None and high is not None:
        return f"between {low:,} and {high:,}"
    return f">= {low:,}" if low is not None else f"<= {high:,}"


def _shown(value: Any, n: int | None = None) -> str:
    """A refused value for a message, at most ~60 characters (a 3000-digit number from a file
    is named by its length)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 160:
        return f"a {len(str(abs(value)))}-digit number"
    text = f"{n:,}" if n is not None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_int(name: str, value: Any, low: int, high: int | None = None, hint: str = "") -> int:
    """`value` as an int in [low, high] (no upper bound when high is None), or a ValueError naming
    the allowed range and `hint` (appended as is, e.g. " (0 turns top-k off)"). Bools are refused:
    True is an int to Python, never a count to a user. numpy/torch integer scalars are accepted."""
    try:
        if isinstance(value, bool):
            raise TypeError
        n = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer {_range(low, high)}, got {_shown(value)}{hint}") from None
    if n < low or (high is not None and n > high):
        raise ValueError(f"{name}={_shown(n, n)} is out of range; it must be {_range(low, high)}{hint}")
    return n


def check_number(name: str, value: Any, low: float | None = None, high: float | None = None, hint: str = "") -> float:
    """`value` as a finite float in [low, high] (each bound optional), or a ValueError naming the
    allowed range and `hint`. Bools and NaN/inf are refused."""
    try:
        if isinstance(value, (bool, str)):
            raise TypeError
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be a finite number, got {_shown(value)}{hint}") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {_shown(value)}{hint}")
    if (low is not None and x < low) or (high is not None and x > high):
        raise ValueError(f"{name}={_shown(value)} is out of range; it must be {_range(low, high)}{hint}")
    return x


def from_json_object(cls: type[D], data: Any, what: str) -> D:
    """`cls(**data)` for a frozen config dataclass from plain JSON data: not an object, unknown
    keys (never silently dropped) and missing required keys are refused by name; the dataclass
    validates the values. `what` names it in messages ("a model config")."""
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        shown = [k if len(k) <= 60 else k[:57] + "..." for k in unknown[:8]]  # a key may be megabytes long
        raise ValueError(f"unknown config keys {shown}; allowed keys are {sorted(fields)}")
    missing = sorted(
        n
        for n, f in fields.items()
        if n not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise ValueError(f"config is missing required keys {missing}")
    return cls(**data)
