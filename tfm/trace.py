"""Named intermediates of one forward pass, recorded without hooks.

A `Recorder` is created per call and passed down through the modules' `forward`, so the
model itself is never mutated and many threads can trace the same cached model at once.
The result is a read-only `Trace`: a mapping from TransformerLens-style names to detached
tensors, plus the ordered shape trace of every tensor the run produced.

Names and axes (B batch, T query positions, S key positions, H query heads, Hkv key/value heads
(= H unless grouped-query), hd head dim, rd rotated dims (= hd unless partial rotary), D d_model,
F d_ff, V vocab; `{i}` is the block index, `{n}` is `ln1`, `ln2` or, at the end, `ln_final`):

    embed                    (B, T, D)    token embeddings
    pos_embed                (T, D)       learned or sinusoidal positional vectors added to embed
    rope.angles              (T, rd/2)    RoPE rotation angle per position and dimension pair
    blocks.{i}.resid_pre     (B, T, D)    residual stream entering block i
    blocks.{i}.{n}.input     (B, T, D)    what the norm receives
    blocks.{i}.{n}.mean      (B, T)       per-token mean of the input (LayerNorm only)
    blocks.{i}.{n}.std       (B, T)       per-token std sqrt(var + eps) (LayerNorm only)
    blocks.{i}.{n}.rms       (B, T)       per-token sqrt(mean(x^2) + eps) (RMSNorm only)
    blocks.{i}.{n}.normalized(B, T, D)    input standardised, before gain and bias
    blocks.{i}.{n}.output    (B, T, D)    after gain (and bias)
    blocks.{i}.attn.q        (B, H, T, hd) per-head queries (RoPE applied)
    blocks.{i}.attn.k|v      (B, Hkv, S, hd) keys (RoPE applied) and values, per key/value head
    blocks.{i}.attn.scores   (B, H, T, S) q.k / sqrt(hd), masked positions = -inf
    blocks.{i}.attn.pattern  (B, H, T, S) softmax of scores; rows sum to 1
    blocks.{i}.attn.z        (B, H, T, hd) pattern @ v, per head
    blocks.{i}.attn.result   (B, H, T, D) each head's output through its slice of W_O
    blocks.{i}.attn_out      (B, T, D)    attention sublayer output (sum of heads + bias)
    blocks.{i}.resid_mid     (B, T, D)    residual stream between attention and MLP (with a
                                          parallel block: resid_pre + attn_out, which the MLP does not read)
    blocks.{i}.mlp.pre       (B, T, F)    hidden pre-activation (the gate's, for SwiGLU)
    blocks.{i}.mlp.post      (B, T, F)    hidden after the activation (gate * up, for SwiGLU)
    blocks.{i}.mlp_out       (B, T, D)    MLP sublayer output
    blocks.{i}.resid_post    (B, T, D)    residual stream leaving block i
    ln_final.*               as above     the final norm
    logits                   (B, T, V)

`attn.result` and `{n}.normalized` are computed from recorded tensors when first read (once,
whichever thread asks), so a forward whose reader never looks at them does not pay for them.
With post-norm the norms sit after each residual sum, so `resid_mid` and `resid_post` are the
normalised streams. The shape trace also lists reshapes that are not stored (e.g. the fused
`qkv` projection before the heads are split).
"""
from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch

# Axis names by the last part(s) of a trace name; the longest matching suffix wins.
AXES: dict[str, tuple[str, ...]] = {
    "embed": ("batch", "pos", "d_model"),
    "pos_embed": ("pos", "d_model"),
    "rope.angles": ("pos", "rotary_dim/2"),
    "resid_pre": ("batch", "pos", "d_model"),
    "input": ("batch", "pos", "d_model"),
    "mean": ("batch", "pos"),
    "std": ("batch", "pos"),
    "rms": ("batch", "pos"),
    "normalized": ("batch", "pos", "d_model"),
    "output": ("batch", "pos", "d_model"),
    "attn.qkv": ("batch", "pos", "(head+2*kv_head)*d_head"),
    "attn.q": ("batch", "head", "pos", "d_head"),
    "attn.k": ("batch", "kv_head", "key_pos", "d_head"),
    "attn.v": ("batch", "kv_head", "key_pos", "d_head"),
    "attn.scores": ("batch", "head", "query_pos", "key_pos"),
    "attn.pattern": ("batch", "head", "query_pos", "key_pos"),
    "attn.z": ("batch", "head", "query_pos", "d_head"),
    "attn.z_merged": ("batch", "pos", "d_model"),
    "attn.result": ("batch", "head", "pos", "d_model"),
    "attn_out": ("batch", "pos", "d_model"),
    "resid_mid": ("batch", "pos", "d_model"),
    "mlp.pre": ("batch", "pos", "d_ff"),
    "mlp.up": ("batch", "pos", "d_ff"),
    "mlp.post": ("batch", "pos", "d_ff"),
    "mlp_out": ("batch", "pos", "d_model"),
    "resid_post": ("batch", "pos", "d_model"),
    "tokens": ("batch", "pos"),
    "logits": ("batch", "pos", "vocab"),
    "memory": ("batch", "src_pos", "d_model"),
    # Encoder-decoder (tfm.encdec): decoder self-attention, cross-attention, their outputs.
    "self.q": ("batch", "head", "pos", "d_head"),
    "self.k": ("batch", "head", "key_pos", "d_head"),
    "self.v": ("batch", "head", "key_pos", "d_head"),
    "self.scores": ("batch", "head", "query_pos", "key_pos"),
    "self.pattern": ("batch", "head", "query_pos", "key_pos"),
    "self.z": ("batch", "head", "query_pos", "d_head"),
    "self.z_merged": ("batch", "pos", "d_model"),
    "cross.q": ("batch", "head", "pos", "d_head"),
    "cross.k": ("batch", "head", "src_pos", "d_head"),
    "cross.v": ("batch", "head", "src_pos", "d_head"),
    "cross.scores": ("batch", "head", "query_pos", "src_pos"),
    "cross.pattern": ("batch", "head", "query_pos", "src_pos"),
    "cross.z": ("batch", "head", "query_pos", "d_head"),
    "cross.z_merged": ("batch", "pos", "d_model"),
    "self_out": ("batch", "pos", "d_model"),
    "cross_out": ("batch", "pos", "d_model"),
    "resid_cross": ("batch", "pos", "d_model"),
}


def axes_for(name: str) -> tuple[str, ...]:
    """Axis names for a trace name, from the longest matching suffix in `AXES`."""
    parts = name.split(".")
    for start in range(len(parts)):
        suffix = ".".join(parts[start:])
        if suffix in AXES:
            return AXES[suffix]
    raise KeyError(f"no axis names documented for trace name {name!r}; add it to tfm.trace.AXES")


@dataclass(frozen=True)
class ShapeEntry:
    """One tensor of the run: name, shape, axis names and dtype, in execution order."""

    name: str
    shape: tuple[int, ...]
    axes: tuple[str, ...]
    dtype: str
    stored: bool  # False for reshapes listed only in the shape trace

    def as_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "axes": list(self.axes),
                "dtype": self.dtype, "stored": self.stored}


class Recorder:
    """Collects tensors during one forward call. Created per call; never stored on a model."""

    def __init__(self, prefix: str = "") -> None:
        self._tensors: dict[str, torch.Tensor | Deferred] = {}
        self._shapes: list[ShapeEntry] = []
        self._prefix = prefix

    def scoped(self, prefix: str) -> "Recorder":
        """A view that writes into the same store under `prefix.`."""
        child = Recorder.__new__(Recorder)
        child._tensors, child._shapes = self._tensors, self._shapes
        child._prefix = f"{self._prefix}{prefix}."
        return child

    def _entry(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, stored: bool = True) -> str:
        full = self._prefix + name
        axes = axes_for(full)
        if len(shape) != len(axes):
            raise RuntimeError(f"trace {full!r} has shape {shape} but axes {axes}")
        self._shapes.append(ShapeEntry(full, shape, axes, str(dtype).removeprefix("torch."), stored))
        return full

    def add(self, name: str, tensor: torch.Tensor) -> None:
        self._tensors[self._entry(name, tuple(tensor.shape), tensor.dtype)] = tensor.detach()

    def add_deferred(self, name: str, shape: tuple[int, ...], dtype: torch.dtype,
                     compute: Callable[[], torch.Tensor]) -> None:
        """An entry computed on first read from tensors the run already recorded (see `Deferred`)."""
        self._tensors[self._entry(name, tuple(shape), dtype)] = Deferred(compute)

    def shape_only(self, name: str, tensor: torch.Tensor) -> None:
        self._entry(name, tuple(tensor.shape), tensor.dtype, stored=False)

    def finish(self) -> "Trace":
        return Trace(dict(self._tensors), tuple(self._shapes))


class Deferred:
    """A trace entry computed on first read, then kept: for large tensors that are cheap to
    derive from recorded ones (a head's output is its z times its slice of W_O), so a forward
    whose reader never asks for them does not pay for them. The computation must depend only on
    what it captured; `Trace` runs it once, under a lock, however many threads read."""

    __slots__ = ("compute",)

    def __init__(self, compute: Callable[[], torch.Tensor]) -> None:
        self.compute = compute


class Trace(Mapping):
    """Read-only mapping of trace names to detached tensors, with the ordered shape trace."""

    def __init__(self, tensors: dict[str, torch.Tensor | Deferred], shapes: tuple[ShapeEntry, ...]) -> None:
        self._tensors = tensors
        self.shapes = shapes
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> torch.Tensor:
        try:
            value = self._tensors[name]
        except KeyError:
            close = [k for k in self._tensors if name.split(".")[-1] in k][:5]
            raise KeyError(f"{name!r} is not in the trace; similar names: {close}") from None
        if not isinstance(value, Deferred):
            return value
        with self._lock:  # another thread may have computed it while this one waited
            value = self._tensors[name]
            if isinstance(value, Deferred):
                value = self._tensors[name] = value.compute().detach()
            return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def axes(self, name: str) -> tuple[str, ...]:
        return axes_for(name)

    def n_layers(self) -> int:
        return 1 + max((int(m.group(1)) for k in self._tensors if (m := re.match(r"blocks\.(\d+)\.", k))), default=-1)

    def stack(self, suffix: str) -> torch.Tensor:
        """`blocks.{i}.<suffix>` for every block, stacked on a new leading layer axis."""
        return torch.stack([self[f"blocks.{i}.{suffix}"] for i in range(self.n_layers())])

    def __repr__(self) -> str:
        return f"Trace({len(self)} tensors, {len(self.shapes)} shape entries)"
