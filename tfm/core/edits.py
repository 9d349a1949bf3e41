"""Interventions for one forward: ablate heads, MLPs or neurons, patch activations.

    from tfm import edits
    out = lm.model(ids, edits=[edits.AblateHead(3, 5), edits.AblateNeurons(2, (17, 40))])

Each edit is a frozen dataclass naming a point of a block: `attn.z` (per-head outputs before
the out-projection, (B, H, T, hd)), `mlp.post` (hidden activations, (B, T, F)), `attn_out`,
`mlp_out`, `resid_pre` and `resid_post` ((B, T, D)). `Steer` adds a direction to the residual
stream (activation steering); its positions are absolute, so it works across the per-step
forwards of a KV-cached generation (`Edits.of(..., start=cache length)` picks the window). The model calls `edits.apply(point, x)` at those points;
an edited point gets a copy of `x` with the edits written into it, so neither the model nor
any tensor of another call changes: the same cached model can run different edits in many
threads at once. `row` restricts an edit to one batch row (batched sweeps, `tfm.analysis.patching`);
None edits every row.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from .config import ModelConfig

Mode = Literal["zero", "mean"]
Point = Literal["attn.z", "mlp.post", "attn_out", "mlp_out", "resid_pre", "resid_post"]
StreamPoint = Literal["resid_pre", "resid_post"]
MAX_STEER_STRENGTH = 1000.0  # |strength| above this only produces overflow and noise


def _check_mode(mode: str) -> None:
    if mode not in get_args(Mode):
        raise ValueError(f"ablation mode {mode!r}: choose 'zero' or 'mean'")


class _Ablation:
    """What the ablations with a `mode` and an optional given `mean` share: checks."""

    def __post_init__(self) -> None:
        _check_mode(self.mode)

    def _check_mean(self, width: int, what: str) -> None:
        if self.mean is not None and tuple(self.mean.shape) != (width,):
            raise ValueError(f"{what} mean must have shape ({width},), got {tuple(self.mean.shape)}")


def _rows(x: torch.Tensor, row: int | None) -> torch.Tensor:
    """The edited rows as a view of x: (B, ...) or one row (...)."""
    return x if row is None else x[row]


def _fill(target: torch.Tensor, mean: torch.Tensor | None, mode: Mode, pos_axis: int) -> None:
    """Zero `target` in place, or set it to `mean` (given, or over its positions)."""
    if mode == "zero":
        target.zero_()
        return
    m = target.mean(pos_axis, keepdim=True) if mean is None else mean.to(target.device, target.dtype)
    target.copy_(m.expand_as(target).clone())


@dataclass(frozen=True, eq=False)
class AblateHead(_Ablation):
    """Zero one head's output z, or replace it by its mean: over this prompt's positions
    (`mean=None`) or a given (hd,) mean, e.g. over a reference batch (`head_means`)."""

    layer: int
    head: int
    mode: Mode = "zero"
    mean: torch.Tensor | None = None
    row: int | None = None
    point = "attn.z"

    def check(self, cfg: ModelConfig, shape: tuple[int, int]) -> None:
        if not 0 <= self.head < cfg.n_head:
            raise ValueError(f"head {self.head} does not exist: layer {self.layer} has heads 0..{cfg.n_head - 1}")
        self._check_mean(cfg.d_head, "a head's")

    def write(self, x: torch.Tensor) -> None:  # x (B, H, T, hd)
        _fill(_rows(x, self.row)[..., self.head, :, :], self.mean, self.mode, -2)


@dataclass(frozen=True, eq=False)
class AblateMLP(_Ablation):
    """Zero a whole MLP sublayer's output, or replace it by its mean (over this prompt's
    positions, or a given (D,) mean)."""

    layer: int
    mode: Mode = "zero"
    mean: torch.Tensor | None = None
    row: int | None = None
    point = "mlp_out"

    def check(self, cfg: ModelConfig, shape: tuple[int, int]) -> None:
        self._check_mean(cfg.d_model, "an MLP's")

    def write(self, x: torch.Tensor) -> None:  # x (B, T, D)
        _fill(_rows(x, self.row), self.mean, self.mode, -2)


@dataclass(frozen=True, eq=False)
class AblateNeurons:
    """Turn chosen MLP neurons off (zero their activation) or set them to their mean over
    this prompt's positions."""

    layer: int
    neurons: tuple[int, ...]
    mode: Mode = "zero"
    row: int | None = None
    point = "mlp.post"

    def __post_init__(self) -> None:
        _check_mode(self.mode)
        object.__setattr__(self, "neurons", tuple(int(n) for n in self.neurons))

    def check(self, cfg: ModelConfig, shape: tuple[int, int]) -> None:
        bad = [n for n in self.neurons if not 0 <= n < cfg.d_ff]
        if bad or not self.neurons:
            raise ValueError(f"neurons {bad or '()'} are not in layer {self.layer}'s 0..{cfg.d_ff - 1}")

    def write(self, x: torch.Tensor) -> None:  # x (B, T, F)
        target, idx = _rows(x, self.row), list(self.neurons)
        sel = target[..., idx]  # (..., T, n): a copy
        _fill(sel, None, self.mode, -2)
        target[..., idx] = sel


@dataclass(frozen=True, eq=False)
class Patch:
    """Write another run's activation into this one: `name` is a trace name such as
    "blocks.3.attn.z" or "blocks.2.resid_pre", `value` that entry for one row without the batch
    axis ((H, T, hd) or (T, D), as `trace[name][0]`). `positions` and `head` (attn.z only) pick
    what is patched; None patches everything."""

    name: str
    value: torch.Tensor
    positions: tuple[int, ...] | None = None
    head: int | None = None
    row: int | None = None

    def __post_init__(self) -> None:
        parts = self.name.split(".", 2)
        if len(parts) != 3 or parts[0] != "blocks" or not parts[1].isdigit() or parts[2] not in get_args(Point):
            raise ValueError(
                f"cannot patch {self.name!r}: use blocks.<layer>.<point> with point one of {', '.join(get_args(Point))}"
            )
        if self.head is not None and parts[2] != "attn.z":
            raise ValueError("`head` only applies to attn.z patches")
        if self.positions is not None:
            object.__setattr__(self, "positions", tuple(int(p) for p in self.positions))

    @property
    def layer(self) -> int:
        return int(self.name.split(".")[1])

    @property
    def point(self) -> str:
        return self.name.split(".", 2)[2]

    def check(self, cfg: ModelConfig, shape: tuple[int, int]) -> None:
        t = shape[1]
        want = {"attn.z": (cfg.n_head, t, cfg.d_head), "mlp.post": (t, cfg.d_ff)}.get(self.point, (t, cfg.d_model))
        if tuple(self.value.shape) != want:
            raise ValueError(
                f"patch value for {self.name} must have shape {want} (one row of a run of the same "
                f"length), got {tuple(self.value.shape)}"
            )
        if self.head is not None and not 0 <= self.head < cfg.n_head:
            raise ValueError(f"head {self.head} does not exist (0..{cfg.n_head - 1})")
        if self.positions is not None and any(not 0 <= p < t for p in self.positions):
            raise ValueError(f"positions {list(self.positions)} are out of range 0..{t - 1}")

    def write(self, x: torch.Tensor) -> None:
        target, src = _rows(x, self.row), self.value.to(x.device, x.dtype)
        if self.head is not None:
            target, src = target[..., self.head, :, :], src[self.head]  # (..., T, hd), (T, hd)
        if self.positions is None:
            target.copy_(src.expand_as(target))
        else:
            pos = list(self.positions)
            target[..., pos, :] = src[..., pos, :]


@dataclass(frozen=True, eq=False)
class Steer:
    """Add `strength` x `vector` ((D,)) to the residual stream at `layer`'s `point`, at the
    absolute positions start..stop-1 (stop None: to the end) but those in `skip` (a prompt's
    special tokens, `tfm.analysis.steering.vectors.steer_span`). Strength 0 is no edit at all
    (dropped, so the forward is bit-identical to an unedited one)."""

    layer: int
    vector: torch.Tensor
    strength: float = 1.0
    start: int = 0
    stop: int | None = None
    point: StreamPoint = "resid_pre"
    row: int | None = None
    skip: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        s = self.strength
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            raise ValueError(f"steering strength must be a finite number, got {s!r}")
        if abs(s) > MAX_STEER_STRENGTH:
            raise ValueError(
                f"steering strength {s:g} is too large: use -{MAX_STEER_STRENGTH:g}..{MAX_STEER_STRENGTH:g}"
            )
        if self.point not in get_args(StreamPoint):
            raise ValueError(f"steering point {self.point!r}: choose 'resid_pre' or 'resid_post'")
        if not isinstance(self.vector, torch.Tensor) or self.vector.dim() != 1:
            raise ValueError("a steering vector must be a 1-D tensor of the model's width")
        if not bool(torch.isfinite(self.vector).all()):
            raise ValueError("the steering vector has NaN or infinite entries")
        if self.start < 0 or (self.stop is not None and self.stop <= self.start):
            raise ValueError(f"steering positions {self.start}..{self.stop}: need 0 <= start < stop")
        skip = tuple(self.skip)
        if any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in skip):
            raise ValueError(f"positions to skip must be integers >= 0, got {list(skip)[:8]}")
        object.__setattr__(self, "skip", tuple(sorted(set(skip))))

    def check(self, cfg: ModelConfig, shape: tuple[int, int]) -> None:
        if tuple(self.vector.shape) != (cfg.d_model,):
            raise ValueError(
                f"the steering vector has {self.vector.shape[0]} entries; this model's residual "
                f"stream has {cfg.d_model}"
            )

    def window(self, offset: int, t: int) -> "Steer | None":
        """This edit for a forward of positions offset..offset+t-1, in its local positions;
        None when it touches none of them or has strength 0."""
        lo = max(self.start - offset, 0)
        hi = t if self.stop is None else min(self.stop - offset, t)
        if self.strength == 0 or lo >= hi:
            return None
        skip = tuple(p - offset for p in self.skip if lo <= p - offset < hi)
        if len(skip) == hi - lo:
            return None
        local = copy.copy(self)  # not dataclasses.replace: no second validation per decode step
        object.__setattr__(local, "start", lo)
        object.__setattr__(local, "stop", hi)
        object.__setattr__(local, "skip", skip)
        return local

    def write(self, x: torch.Tensor) -> None:  # x (B, T, D)
        add = (float(self.strength) * self.vector.to(x.device, torch.float32)).to(x.dtype)
        target = _rows(x, self.row)
        if not self.skip:
            target[..., self.start : self.stop, :] += add
            return
        stop = target.shape[-2] if self.stop is None else self.stop
        steered = [p for p in range(self.start, stop) if p not in self.skip]
        target[..., steered, :] += add


Edit = AblateHead | AblateMLP | AblateNeurons | Patch | Steer


class Edits:
    """Validated edits grouped by (layer, point); the model asks `scoped(layer).apply(point, x)`."""

    def __init__(self, by_layer: dict[int, dict[str, list[Edit]]]) -> None:
        self.by_layer = by_layer

    @classmethod
    def of(cls, edits: Iterable[Edit] | "Edits", cfg: ModelConfig, idx_shape: Sequence[int], start: int = 0) -> "Edits":
        """`start`: the absolute position of the forward's first token (a KV cache's length),
        for edits with absolute positions (Steer)."""
        if isinstance(edits, Edits):
            return edits
        b, t = int(idx_shape[0]), int(idx_shape[1])
        by_layer: dict[int, dict[str, list[Edit]]] = {}
        for e in edits:
            if not isinstance(e, (AblateHead, AblateMLP, AblateNeurons, Patch, Steer)):
                raise ValueError(f"{e!r} is not an edit; build edits with tfm.core.edits (AblateHead, Patch, ...)")
            if not 0 <= e.layer < cfg.n_layer:
                raise ValueError(f"layer {e.layer} does not exist: the model has layers 0..{cfg.n_layer - 1}")
            if e.row is not None and not 0 <= e.row < b:
                raise ValueError(f"row {e.row} is outside the batch of {b}")
            e.check(cfg, (b, t))
            if isinstance(e, Steer) and (e := e.window(start, t)) is None:
                continue
            by_layer.setdefault(e.layer, {}).setdefault(e.point, []).append(e)
        return cls(by_layer)

    def scoped(self, layer: int) -> "LayerEdits":
        return LayerEdits(self.by_layer.get(layer, {}))


class LayerEdits:
    """One block's edits. `apply` returns x itself when nothing edits `point`, else an edited copy."""

    def __init__(self, points: dict[str, list[Edit]]) -> None:
        self.points = points

    def apply(self, point: str, x: torch.Tensor) -> torch.Tensor:
        todo = self.points.get(point)
        if not todo:
            return x
        x = x.clone()
        for e in todo:
            e.write(x)
        return x


def with_row(edit: Edit, row: int) -> Edit:
    """The same edit restricted to one batch row."""
    return dataclasses.replace(edit, row=row)


@torch.no_grad()
def head_means(model, ref_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Means over a reference batch (B, T) of every head's z, (L, H, hd), and every MLP's
    output, (L, D): the values mean-ablation writes in (`AblateHead(..., mean=z[l, h])`)."""
    tr = model(ref_ids.to(next(model.parameters()).device), trace=True).trace
    z = torch.stack([tr[f"blocks.{i}.attn.z"].mean((0, 2)) for i in range(model.config.n_layer)])
    mlp = torch.stack([tr[f"blocks.{i}.mlp_out"].mean((0, 1)) for i in range(model.config.n_layer)])
    return z, mlp
