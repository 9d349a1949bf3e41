"""What a tour step is and what it shows: a step's text and formula, and small slices of the real
tensors it prints (`Shown`), cut to what a slide can hold (`SHOW` entries, the keys around a query)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .checks import Check

SHOW = 8  # entries of a long vector a slide can hold


@dataclass(frozen=True, eq=False)
class Shown:
    """A small slice of a real tensor, as printed: values (n,) or (r, n), with the full shape."""

    values: torch.Tensor
    shape: tuple[int, ...]
    cols: tuple[str, ...]
    rows: tuple[str, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        if self.values.dim() not in (1, 2) or self.values.shape[-1] != len(self.cols):
            raise ValueError(f"shown values {tuple(self.values.shape)} need one label per column, got {len(self.cols)}")
        if self.values.dim() == 2 and self.values.shape[0] != len(self.rows):
            raise ValueError(f"shown values {tuple(self.values.shape)} need one label per row, got {len(self.rows)}")


@dataclass(frozen=True, eq=False)
class TourStep:
    key: str
    title: str
    formula_latex: str
    text: str
    tensors: dict[str, Shown]
    deeper_page: str  # pages/<file>.py that shows this in full
    check: Check | None = None
    chart: Shown | None = None  # a longer vector worth a bar chart (a whole attention row, ...)


@dataclass(frozen=True)
class Focus:
    """What the tour follows: one position, one block and one head of it."""

    pos: int
    layer: int = 0
    head: int = 0


def vec(x: torch.Tensor, cols: list[str] | None = None) -> Shown:
    """The first SHOW entries of a 1-D tensor, labelled by index (or by `cols`)."""
    n = x.shape[0]
    labels = cols[:SHOW] if cols is not None else [str(i) for i in range(min(n, SHOW))]
    return Shown(x[:SHOW].float().clone(), (n,), tuple(labels), note=f"first {SHOW} of {n}" if n > SHOW else "")


def key_window(pos: int) -> slice:
    """The keys a slide shows for a query at `pos`: the last SHOW it may attend to."""
    return slice(max(0, pos + 1 - SHOW), pos + 1)


def row(x: torch.Tensor, pos: int, labels: list[str], note_all: str) -> Shown:
    w = key_window(pos)
    note = f"keys {w.start}..{pos} of {note_all}" if w.start > 0 else ""
    return Shown(x[w].float().clone(), (x.shape[0],), tuple(labels[w]), note=note)


def mask_window(pos: int, t: int, size: int = 6) -> slice:
    """Positions a slide shows of the score matrix: up to `size` around the query, future included."""
    lo = max(0, min(pos - size + 1, t - size))
    return slice(lo, min(t, lo + size))


def mask_matrix(scores: torch.Tensor, pos: int, labels: list[str]) -> Shown:
    """Scores (queries × keys) around the query: the future keys above the diagonal are −∞."""
    t = scores.shape[-1]
    w = mask_window(pos, t)
    return Shown(
        scores[w, w].float().clone(),
        (t, t),
        tuple(labels[w]),
        rows=tuple(labels[w]),
        note=f"queries and keys {w.start}..{w.stop - 1} of {t}",
    )
