"""Named intermediates of one forward pass, recorded without hooks.

A `Recorder` is created per call and passed down through the modules' `forward`, so the
model itself is never mutated and many threads can trace the same cached model at once.
The result is a read-only `Trace`: a mapping from TransformerLens-style names to detached
tensors, plus the ordered shape trace of every tensor the run produced.

Names and axes of every entry: `tfm.core.trace_names` (the table, `NAMES`, `AXES`).

`attn.result` and `{n}.normalized` are computed from recorded tensors when first read (once,
whichever thread asks), so a forward whose reader never looks at them does not pay for them.
With post-norm the norms sit after each residual sum, so `resid_mid` and `resid_post` are the
normalised streams. The shape trace also lists reshapes that are not stored (e.g. the fused
`qkv` projection before the heads are split).

Lazy traces (`tfm.core.lazy`, the default for a forward without a KV cache, in eval mode, autograd
off): the forward stores only embed / positions, every block's `resid_pre`, the final norm and
the last position's logits (~47 MB for GPT-2 small at 1024 tokens, against 2.75 GB for every
entry). A block's other entries are computed when one is first read, by the block itself on
its stored input: the same values as the eager trace, bit for bit. Computed blocks are held
under `LazyTrace.max_lazy_bytes` (least recently read dropped first, the last one read always
kept; a dropped block is recomputed on its next read), so one prompt's trace holds at most
~47 MB + one block (~107 MB, `estimate_block_bytes`). Keys, shapes and their order are the
eager trace's; iterating keys computes nothing, reading values does. `trace.nbytes` is what is
held now; `trace.to("cpu", torch.float32)` moves the stored tensors and keeps the rest lazy.

Read through the typed accessors, with names from the one table `NAMES` (`name(concept, ...)`)
and an explicit batch row:

    out = lm.model(torch.tensor([ids]), trace=True, last_only=True)   # under torch.inference_mode()
    tr = out.trace.to("cpu", torch.float32)
    tr.pattern(3)                      # (H, T, S) block 3, batch row 0: computes block 3 only
    tr.attention_row(3, head=0, pos=5) # (S,)
    tr.residual_streams()              # [("embed", (T, D)), ("after block 0", (T, D)), ...]: no block computed
    tr.norm_stats(3, "ln1")            # {"input", "output", "mean", "std"} (RMSNorm: "rms")
    tr.logits_at(-1)                   # (V,): stored for the last position
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch

from .trace_cost import estimate_block_bytes, estimate_trace_bytes  # noqa: F401 (re-exported)
from .trace_names import AXES, NAMES, axes_for, name  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class ShapeEntry:
    """One tensor of the run: name, shape, axis names and dtype, in execution order."""

    name: str
    shape: tuple[int, ...]
    axes: tuple[str, ...]
    dtype: str
    stored: bool  # False for reshapes listed only in the shape trace

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "axes": list(self.axes),
            "dtype": self.dtype,
            "stored": self.stored,
        }


@functools.lru_cache(maxsize=None)
def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


LAZY = object()  # placeholder value of an entry a lazy trace computes when read (tfm.core.lazy)


class Recorder:
    """Collects tensors during one forward call. Created per call; never stored on a model.

    With `keep`, only names it accepts are stored; the others are listed in the shape trace and
    hold the `LAZY` placeholder, for a lazy trace to compute when read (see `tfm.core.lazy`). With
    `listed=False` as well, the others are not even listed: a reader of a few entries (a batched
    decode step's attention rows) pays nothing for the rest."""

    def __init__(self, prefix: str = "", keep: Callable[[str], bool] | None = None, listed: bool = True) -> None:
        if not listed and keep is None:
            raise ValueError("listed=False leaves out the entries `keep` refuses: pass keep as well")
        self._tensors: dict[str, torch.Tensor | Deferred | object] = {}
        self._shapes: list[ShapeEntry] = []
        self._prefix, self._keep, self._listed = prefix, keep, listed

    def scoped(self, prefix: str) -> "Recorder":
        """A view that writes into the same store under `prefix.`."""
        child = Recorder.__new__(Recorder)
        child._tensors, child._shapes, child._keep = self._tensors, self._shapes, self._keep
        child._listed, child._prefix = self._listed, f"{self._prefix}{prefix}."
        return child

    def _skipped(self, name: str) -> bool:
        return not self._listed and not self._keep(self._prefix + name)

    def stores(self, name: str) -> bool:
        """Whether `add(name, ...)` would keep the tensor: a producer may skip computing one it won't."""
        return self._keep is None or self._keep(self._prefix + name)

    def _store(self, full: str, value) -> None:
        self._tensors[full] = value if self._keep is None or self._keep(full) else LAZY

    def _entry(self, name: str, shape: tuple[int, ...], dtype: torch.dtype, stored: bool = True) -> str:
        full = self._prefix + name
        axes = axes_for(full)
        if len(shape) != len(axes):
            raise RuntimeError(f"trace {full!r} has shape {shape} but axes {axes}")
        self._shapes.append(ShapeEntry(full, shape, axes, _dtype_name(dtype), stored))
        return full

    def add(self, name: str, tensor: torch.Tensor) -> None:
        if self._skipped(name):
            return
        self._store(
            self._entry(name, tuple(tensor.shape), tensor.dtype), tensor.detach() if tensor.requires_grad else tensor
        )  # no graph to cut: the tensor itself

    def add_deferred(
        self, name: str, shape: tuple[int, ...], dtype: torch.dtype, compute: Callable[[], torch.Tensor]
    ) -> None:
        """An entry computed on first read from tensors the run already recorded (see `Deferred`)."""
        if self._skipped(name):
            return
        self._store(self._entry(name, tuple(shape), dtype), Deferred(compute))

    def add_lazy(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        """An entry nothing computed yet, only listed: a lazy trace computes it when read."""
        if self._skipped(name):
            return
        self._tensors[self._entry(name, tuple(shape), dtype)] = LAZY

    def shape_only(self, name: str, tensor: torch.Tensor) -> None:
        if not self._listed:
            return
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


def storage_bytes(tensors) -> int:
    """Bytes of the memory behind `tensors`, each storage counted once."""
    seen: dict[tuple, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[(t.device, storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())


def _move(t: torch.Tensor, device, dtype) -> torch.Tensor:
    return t.to(device=device, dtype=dtype if dtype is not None and t.is_floating_point() else None)


def _moved_deferred(d: Deferred, device, dtype) -> Deferred:
    return Deferred(lambda: _move(d.compute(), device, dtype))


class Trace(Mapping):
    """Read-only mapping of trace names to detached tensors, with the ordered shape trace."""

    def __init__(self, tensors: dict[str, torch.Tensor | Deferred], shapes: tuple[ShapeEntry, ...]) -> None:
        self._tensors = tensors
        self.shapes = shapes
        self._lock = threading.Lock()
        self._n_layers: int | None = None  # the names are fixed: counted once (every accessor asks)
        # nbytes is asked on every insertion into a server cache, for every trace it holds: it is
        # remembered until a held tensor changes (`_version`, bumped under the lock)
        self._version, self._sized = 0, (-1, 0)

    def __getitem__(self, name: str) -> torch.Tensor:
        try:
            value = self._tensors[name]
        except KeyError:
            close = [k for k in self._tensors if name.split(".")[-1] in k][:5]
            raise KeyError(f"{name!r} is not in the trace; similar names: {close}") from None
        return value if isinstance(value, torch.Tensor) else self._resolve(name)

    def _resolve(self, name: str) -> torch.Tensor:
        with self._lock:  # another thread may have computed it while this one waited
            value = self._tensors[name]
            if isinstance(value, Deferred):
                value = self._tensors[name] = value.compute().detach()
                self._version += 1
            return value

    def _held(self) -> list[torch.Tensor]:
        with self._lock:
            return [v for v in self._tensors.values() if isinstance(v, torch.Tensor)]

    @property
    def nbytes(self) -> int:
        """Bytes this trace holds now (entries not yet computed count 0); tensors that share
        memory (a view, the same residual stream under two names) count once."""
        version, size = self._sized
        if version != self._version:
            version = self._version  # read before measuring: a change meanwhile makes this stale
            size = storage_bytes(self._held())
            self._sized = (version, size)
        return size

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "Trace":
        """A trace with every held tensor moved (floating ones cast to `dtype`); entries not
        computed yet stay so and are moved when computed (they keep what they were derived
        from). Returns this trace itself when nothing would change. Shapes stay the run's."""
        moved = {
            k: _move(v, device, dtype) if isinstance(v, torch.Tensor) else _moved_deferred(v, device, dtype)
            for k, v in self._tensors.items()
        }
        if all(moved[k] is v for k, v in self._tensors.items() if isinstance(v, torch.Tensor)):
            return self  # pending entries are computed where the held ones are
        return Trace(moved, self.shapes)

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def axes(self, name: str) -> tuple[str, ...]:
        return axes_for(name)

    def n_layers(self) -> int:
        if self._n_layers is None:
            self._n_layers = 1 + max(
                (int(m.group(1)) for k in self._tensors if (m := re.match(r"blocks\.(\d+)\.", k))), default=-1
            )
        return self._n_layers

    def stack(self, suffix: str) -> torch.Tensor:
        """`blocks.{i}.<suffix>` for every block, stacked on a new leading layer axis."""
        return torch.stack([self[f"blocks.{i}.{suffix}"] for i in range(self.n_layers())])

    # ---- typed accessors: names from `NAMES`, batch row explicit, ranges checked ----

    def _row(self, key: str, batch: int) -> torch.Tensor:
        t = self[key]
        if not 0 <= batch < t.shape[0]:
            raise ValueError(f"batch {batch} does not exist; the trace has batch size {t.shape[0]}")
        return t[batch]

    def _layer(self, layer: int) -> int:
        n = self.n_layers()
        if not 0 <= layer < n:
            raise ValueError(f"layer {layer} does not exist; the model has {n} blocks (0..{n - 1})")
        return layer

    def pattern(self, layer: int, batch: int = 0) -> torch.Tensor:
        """Attention pattern of every head of a block, (H, T, S): row t is query t's weights."""
        return self._row(name("pattern", self._layer(layer)), batch)

    def attention_row(self, layer: int, head: int, pos: int, batch: int = 0) -> torch.Tensor:
        """What query `pos` of `head` attends to, (S,); sums to 1."""
        pat = self.pattern(layer, batch)  # (H, T, S)
        if not 0 <= head < pat.shape[0] or not 0 <= pos < pat.shape[1]:
            raise ValueError(
                f"head {head} / position {pos} out of range: {pat.shape[0]} heads, {pat.shape[1]} positions"
            )
        return pat[head, pos]

    def residual_streams(self, batch: int = 0) -> list[tuple[str, torch.Tensor]]:
        """The residual stream entering block 0 ("embed": token plus additive positions) and
        leaving every block ("after block i"), each (T, D). Leaving block i is what enters
        block i + 1; leaving the last block is what the final norm (or the unembedding) reads."""
        return [(label, self._row(key, batch)) for label, key in self._stream_keys()]

    def residual_stack(self) -> tuple[list[str], torch.Tensor]:
        """`residual_streams` of every row at once: the labels and (L+1, B, T, D)."""
        labels, keys = zip(*self._stream_keys())
        return list(labels), torch.stack([self[k] for k in keys])

    def _stream_keys(self) -> list[tuple[str, str]]:
        n = self.n_layers()
        keys = [name("resid_pre", i) for i in range(n)]
        keys.append(
            name("norm_input", norm="ln_final") if "ln_final.input" in self._tensors else name("resid_post", n - 1)
        )
        return list(zip(["embed"] + [f"after block {i}" for i in range(n)], keys))

    def norm_stats(self, layer: int | None, which: str, batch: int = 0) -> dict[str, torch.Tensor]:
        """One norm call's `input` and `output` (T, D) and its per-token statistics (T,):
        `mean` and `std` (LayerNorm) or `rms` (RMSNorm). `which`: ln1, ln2 (with a layer) or
        ln_final (layer None)."""
        if which != "ln_final":
            self._layer(-1 if layer is None else layer)
        out = {part: self._row(name(f"norm_{part}", layer, which), batch) for part in ("input", "output")}
        for stat in ("mean", "std", "rms"):
            if (key := name(f"norm_{stat}", layer, which)) in self:
                out[stat] = self._row(key, batch)
        return out

    def logits_at(self, pos: int, batch: int = 0) -> torch.Tensor:
        """Next-token logits at one position, (V,); negative positions count from the end."""
        logits = self._row("logits", batch)  # (T, V)
        if not -logits.shape[0] <= pos < logits.shape[0]:
            raise ValueError(f"position {pos} out of range for {logits.shape[0]} positions")
        return logits[pos]

    def __repr__(self) -> str:
        return f"Trace({len(self)} tensors, {len(self.shapes)} shape entries)"


@dataclass(frozen=True)
class ModelOutput:
    """What a forward returns."""

    logits: torch.Tensor  # (B, T, V): next-token logits at every position
    trace: Trace | None  # named intermediates when called with trace=True
