"""Lazy traces: a traced forward that keeps only the residual stream between blocks and
computes a block's internals when one of them is first read.

An eager trace of GPT-2 small at 1024 tokens holds ~2.7 GB (every block's scores and pattern
alone are 100 MB). A lazy trace runs the same traced forward (so every number is the eager
trace's, bit for bit) but stores only what is cheap and always wanted, and computes no scores or
pattern it does not store: its first pass costs the plain forward's fused attention only.

    embed, pos_embed / rope.angles     as recorded
    blocks.{i}.resid_pre               the stream entering each block, (B, T, D)
    ln_final.*                         the final norm (post-norm: the last block's resid_post)
    the last position's logits         private, for `logits_at(-1)` (`last_only`: the only row computed)
    every block's entries in `keep`    e.g. keep=("pattern",): all patterns, no block recomputed

Every other entry is `LAZY`. Reading one runs that block's own `Block.forward` again, with a
Recorder, on the stored `resid_pre` (same code, same input: identical values) and keeps the
whole block as one group. `attn.scores` and `attn.pattern` are then derived from the group's q
and k when read (the same `attention_scores` as the forward's), `attn.result` and
`{n}.normalized` stay deferred as in an eager trace. The full `logits` (B, T, V) are one more
group, computed from the final hidden state.

Groups are held under a byte budget, `LazyTrace.max_lazy_bytes`: after a read the least
recently read groups are dropped until the held groups fit, but the group just read is always
kept; a dropped group is recomputed on its next read (same values). So a trace holds at most
its stored part + max(budget, one group): ~47 MB + ~106 MB (~200 MB with every deferred entry
of the block read) for GPT-2 small at 1024 tokens.

Reading is thread-safe: a group is computed once however many threads ask (one lock per
group; different blocks compute in parallel). A group refuses to compute if the model's
weights changed in place after the forward. A lazy trace keeps a reference to its model.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .encoder import final_name, head_logits, head_parameters
from .functional import attention_scores
from .trace import LAZY, Deferred, ModelOutput, Recorder, Trace, _move, storage_bytes
from .trace_options import KEEPABLE, kept_suffixes, prefer_lazy, use_lazy, wanted  # noqa: F401 (re-exported)
from .window import attention_mask

Getter = Callable[[str], torch.Tensor]


def traced_forward(
    model: nn.Module, idx: torch.Tensor, last_only: bool, keep: tuple[str, ...] = (), token_types=None
) -> ModelOutput:
    """The explicit traced forward, storing only each block's `resid_pre`, the entries named by
    `keep` (every block's: `keep=("pattern",)` gives every attention pattern without a
    recomputation) and what the module doc lists."""
    n, final, suffixes = model.config.n_layer, final_name(model), kept_suffixes(keep)
    suffixes = (".resid_pre", *suffixes)
    rec = Recorder(keep=lambda name: not name.startswith("blocks.") or name.endswith(suffixes) or name == final)
    x = model.hidden(idx, None, rec, token_types=token_types)  # (B, T, D)
    recipes = {f"blocks.{i}": block_recipe(model, i) for i in range(n)}
    # the entry is every position's logits, computed when read, whatever `last_only` says (the trace
    # is the same for every caller); the caller's copy is not kept: (B, T, V) is the largest entry
    # (1 GB for Gemma 3 at 1,024 tokens), and with `last_only` never computed in the forward at all
    logits = head_logits(model, x[:, -1:] if last_only else x)  # (B, 1 or T, V)
    rec.add_lazy("logits", (*x.shape[:2], logits.shape[-1]), logits.dtype)
    recipes["logits"] = logits_recipe(model, final)
    specs = {k: (v.device, v.dtype) for k, v in rec._tensors.items() if isinstance(v, torch.Tensor)}
    # the last row of the logits just computed: no second pass over the unembedding (V x D)
    lazy = Lazy(recipes, specs, final, logits[:, -1].clone(), _unembedding(model))
    trace = LazyTrace(rec._tensors, tuple(rec._shapes), lazy)
    return ModelOutput(logits, trace)


def _versions(params: list[torch.Tensor]) -> Callable[[], None]:
    before = [p._version for p in params]

    def check() -> None:
        if [p._version for p in params] != before:
            raise RuntimeError(
                "the model's weights changed after this trace was recorded; "
                "run the forward again to trace the new weights"
            )

    return check


def _parameters(module: torch.nn.Module) -> list[torch.Tensor]:
    """`list(module.parameters())` (no parameter is shared inside a block) at a fraction of the
    cost of nn.Module's generic walk: a lazy forward lists every block's."""
    own = [p for p in module._parameters.values() if p is not None]
    return own + [p for child in module._modules.values() if child is not None for p in _parameters(child)]


_DERIVED = (".attn.scores", ".attn.pattern")  # a recomputed block derives these when read


def block_recipe(model: nn.Module, i: int) -> Callable[[Getter], dict]:
    """Block i's entries, recomputed by the block itself from the stored `resid_pre`."""
    block, key, rope = model.blocks[i], f"blocks.{i}", model.config.pos_encoding == "rope"
    local = block.attn.window is not None and getattr(model, "local_inv_freq", None) is not None
    angles, scale, window = "rope.local_angles" if local else "rope.angles", block.attn.scale, block.attn.window
    causal = model.config.causal  # an encoder's lazy trace is never of a padded batch: no mask at all
    check = _versions(_parameters(block))

    def compute(get: Getter) -> dict:
        check()
        rec = Recorder(keep=lambda name: not name.endswith(_DERIVED))
        with torch.no_grad():
            block(get(f"{key}.resid_pre"), rec.scoped(key), get(angles) if rope else None)
        values = rec._tensors
        q, k = values[f"{key}.attn.q"], values[f"{key}.attn.k"]
        # (T, T) per head and not read by every reader (the Norms page wants none): derived from
        # q and k by the same code as the forward's, when read
        t = q.shape[-2]
        mask = lambda: attention_mask("causal", t, t, window, q.device) if causal else None  # noqa: E731
        values[f"{key}.attn.scores"] = Deferred(lambda: attention_scores(q, k, mask(), scale))
        values[f"{key}.attn.pattern"] = Deferred(lambda: attention_scores(q, k, mask(), scale).softmax(dim=-1))
        return values

    return compute


def _unembedding(model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    check = _versions(head_parameters(model))

    def logits(x: torch.Tensor) -> torch.Tensor:
        check()
        with torch.no_grad():
            return head_logits(model, x)  # (B, T, V)

    return logits


def logits_recipe(model: nn.Module, final: str) -> Callable[[Getter], dict]:
    """Every position's logits, (B, T, V), from the stored final hidden state."""
    logits = _unembedding(model)
    return lambda get: {"logits": logits(get(final))}


@dataclass(frozen=True)
class Lazy:
    """What a lazy trace needs to compute its groups, shared by its `to()` copies."""

    recipes: dict[str, Callable[[Getter], dict]]  # group key -> compute(get) -> {name: value}
    specs: dict[str, tuple[torch.device, torch.dtype]]  # stored entry -> where the model made it
    final: str  # the stored final hidden state's name
    last_logits: torch.Tensor  # (B, V) logits of the last position
    row_logits: Callable[[torch.Tensor], torch.Tensor]  # (B, T, D) final hidden -> logits


class _Group:
    __slots__ = ("compute", "lock", "values", "nbytes")

    def __init__(self, compute) -> None:
        self.compute, self.lock, self.values, self.nbytes = compute, threading.Lock(), None, 0


def _group_key(name: str) -> str:
    return "logits" if name == "logits" else ".".join(name.split(".")[:2])  # blocks.{i}


def _lossless(old: torch.dtype, new: torch.dtype | None) -> bool:
    return (
        new is None
        or new == old
        or new == torch.float64
        or (new == torch.float32 and old in (torch.float16, torch.bfloat16))
    )


class LazyTrace(Trace):
    """A `Trace` whose block internals and full logits are computed when read (module doc)."""

    max_lazy_bytes: int = 128 * 2**20  # groups kept beyond the one read last (instance may override)

    def __init__(
        self, tensors: dict, shapes: tuple, lazy: Lazy, moves: tuple = (), inputs: dict[str, torch.Tensor] | None = None
    ) -> None:
        super().__init__(tensors, shapes)
        self._lazy, self._moves, self._inputs = lazy, moves, inputs or {}
        self._groups = {k: _Group(c) for k, c in lazy.recipes.items()}
        self._lru: OrderedDict[str, None] = OrderedDict()

    def _out(self, t: torch.Tensor) -> torch.Tensor:
        for device, dtype in self._moves:  # each `to()` this trace came through, in order
            t = _move(t, device, dtype)
        return t

    def _get_input(self, name: str) -> torch.Tensor:
        """A stored entry as the model made it (device, dtype), for a recomputation."""
        return self._inputs.get(name, self._tensors[name]).to(*self._lazy.specs[name])

    def _materialise(self, group: _Group) -> dict:
        fed: dict[int, torch.Tensor] = {}

        def get(name: str) -> torch.Tensor:
            t = self._get_input(name)
            fed[t.data_ptr()] = self._tensors[name]
            return t

        values = {}
        for k, v in group.compute(get).items():
            if self._tensors.get(k) is not LAZY:
                continue  # stored already (resid_pre; post-norm's last resid_post): identical
            if isinstance(v, torch.Tensor):  # an input recorded again (a pre-norm ln1.input) is the stored one
                same = fed.get(v.data_ptr())
                v = same if same is not None and same.shape == v.shape else self._out(v)
            values[k] = v
        return values

    def _resolve(self, name: str) -> torch.Tensor:
        if self._tensors[name] is not LAZY:
            return super()._resolve(name)
        group = self._groups[_group_key(name)]
        with group.lock:  # one computation per group, whoever asks; other groups run meanwhile
            values = group.values
            if values is None:
                values = group.values = self._materialise(group)
            value = values[name]
            if isinstance(value, Deferred):
                value = values[name] = self._out(value.compute().detach())
            self._account(_group_key(name), values)
            return value

    def _account(self, key: str, values: dict) -> None:
        """Count the group just read, then drop the least recently read ones over the budget."""
        with self._lock:
            group = self._groups[key]
            if group.values is not values:
                return  # dropped meanwhile by another reader: the caller still has its value
            stored = {(t.device, t.untyped_storage().data_ptr()) for t in self._stored()}
            group.nbytes = storage_bytes(
                v
                for v in values.values()
                if isinstance(v, torch.Tensor) and (v.device, v.untyped_storage().data_ptr()) not in stored
            )
            self._version += 1  # held groups change: nbytes measures again
            self._lru[key] = None
            self._lru.move_to_end(key)
            total = sum(self._groups[k].nbytes for k in self._lru)
            for old in list(self._lru)[:-1]:
                if total <= self.max_lazy_bytes:
                    break
                victim = self._groups[old]
                total -= victim.nbytes
                victim.values, victim.nbytes = None, 0
                del self._lru[old]

    def _stored(self) -> list[torch.Tensor]:
        return [v for v in self._tensors.values() if isinstance(v, torch.Tensor)]

    def _held(self) -> list[torch.Tensor]:
        with self._lock:
            resident = [
                v for k in self._lru for v in (self._groups[k].values or {}).values() if isinstance(v, torch.Tensor)
            ]
            return self._stored() + resident + [self._lazy.last_logits] + list(self._inputs.values())

    def logits_at(self, pos: int, batch: int = 0) -> torch.Tensor:
        """Next-token logits at one position, (V,): the last position's are stored, another's is
        one row of the unembedding (to float rounding the full logits' row)."""
        b, t, _ = next(e.shape for e in self.shapes if e.name == self._lazy.final)
        if not 0 <= batch < b or not -t <= pos < t:
            raise ValueError(f"batch {batch} / position {pos} out of range: batch size {b}, {t} positions")
        pos %= t
        if pos == t - 1:
            return self._out(self._lazy.last_logits[batch])
        values = self._groups["logits"].values if "logits" in self._groups else None
        if values is not None:
            return values["logits"][batch, pos]
        x = self._get_input(self._lazy.final)[batch, pos]  # (D,)
        return self._out(self._lazy.row_logits(x[None, None])[0, 0])

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "LazyTrace":
        """Stored tensors moved now; lazy entries stay lazy, are computed where the model is and
        then moved (the model-side copy is not kept). Inputs of recomputations that `dtype`
        would round (a narrower type) are kept as recorded, on the new device."""
        moved = {k: _move(v, device, dtype) if isinstance(v, torch.Tensor) else v for k, v in self._tensors.items()}
        if all(moved[k] is v for k, v in self._tensors.items() if isinstance(v, torch.Tensor)):
            return self
        inputs = [
            k
            for k in self._tensors
            if k.endswith(".resid_pre") or k in ("rope.angles", "rope.local_angles", self._lazy.final)
        ]
        keep = {
            k: self._inputs.get(k, self._tensors[k]).to(device)
            for k in inputs
            if not _lossless(self._lazy.specs[k][1], dtype)
        }
        lazy = Lazy(
            self._lazy.recipes,
            self._lazy.specs,
            self._lazy.final,
            _move(self._lazy.last_logits, device, dtype),
            self._lazy.row_logits,
        )
        new = LazyTrace(moved, self.shapes, lazy, self._moves + ((device, dtype),), keep)
        new.max_lazy_bytes = self.max_lazy_bytes
        return new

    def __repr__(self) -> str:
        held = sum(g.values is not None for g in self._groups.values())
        return f"LazyTrace({len(self)} tensors, {held}/{len(self._groups)} groups computed, {self.nbytes / 2**20:.0f} MiB held)"
