"""A key/value cache for incremental decoding, created per generation call.

It is passed to `GPT.forward(..., cache=cache)` and never stored on the model, so a shared
cached model stays untouched. Buffers are preallocated to `max_len` so each decode step
writes in place instead of concatenating.
"""

from __future__ import annotations

import torch

from .config import ModelConfig


class KVCache:
    """`windows=True`: local (sliding-window) layers keep only their last window - 1 positions
    (a query reads the window's keys, itself included), in buffers of their own, the global
    layers every position: Gemma 3's cache at 32k positions is ~5x smaller. A local layer's
    `update` then returns just the keys it can read, in order (the window mask needs no more)."""

    def __init__(
        self,
        cfg: ModelConfig,
        batch: int = 1,
        max_len: int | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        windows: bool = False,
    ) -> None:
        max_len = cfg.context_length if max_len is None else max_len
        if not 1 <= max_len <= cfg.context_length:
            raise ValueError(f"max_len={max_len} must be between 1 and the context length {cfg.context_length}")
        w = cfg.sliding_window
        self.local = {l: i for i, l in enumerate(cfg.local_layers)} if windows and w is not None and w < max_len else {}
        self.slot = {l: i for i, l in enumerate(l for l in range(cfg.n_layer) if l not in self.local)}
        shape = (len(self.slot), batch, cfg.n_kv_head, max_len, cfg.d_head)  # (L, B, Hkv, S, hd): KV heads only
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        kept = (len(self.local), batch, cfg.n_kv_head, (w or 1) - 1 if self.local else 0, cfg.d_head)
        self.k_local = torch.zeros(kept, device=device, dtype=dtype)  # (L_local, B, Hkv, W - 1, hd)
        self.v_local = torch.zeros(kept, device=device, dtype=dtype)
        self.length = 0  # positions already cached, the same for every layer
        self.max_len = max_len

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store this step's (B, Hkv, T, hd) keys and values; return all of them so far."""
        end = self.length + k.shape[-2]
        if end > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions; {end} were asked for")
        if layer in self.local:
            return self._update_local(self.local[layer], k, v)
        i = self.slot[layer]
        self.k[i, :, :, self.length : end] = k
        self.v[i, :, :, self.length : end] = v
        return self.k[i, :, :, :end], self.v[i, :, :, :end]  # (B, Hkv, S, hd)

    def _update_local(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The held positions (at most window - 1, the latest) then the new ones, (B, Hkv, b + T, hd);
        the latest window - 1 of them are held for the next step."""
        b = min(self.length, self.k_local.shape[-2])
        keys = torch.cat([self.k_local[i, :, :, :b], k], dim=-2)
        values = torch.cat([self.v_local[i, :, :, :b], v], dim=-2)
        keep = min(keys.shape[-2], self.k_local.shape[-2])
        if keep:
            self.k_local[i, :, :, :keep] = keys[..., keys.shape[-2] - keep :, :]
            self.v_local[i, :, :, :keep] = values[..., values.shape[-2] - keep :, :]
        return keys, values

    def advance(self, n: int) -> None:
        """Called once per forward, after every layer has stored its n new positions."""
        self.length += n

    def nbytes(self) -> int:
        return (self.k.numel() + self.k_local.numel()) * self.k.element_size() * 2

    def batch_size(self) -> int:
        return self.k.shape[1]

    @property
    def starts(self) -> int:
        """Position of the next token, every row alike (RaggedKVCache: one per row)."""
        return self.length

    def attn_mask(self, t_q: int):
        """None: the model masks causally from the shapes, as without a cache."""
        return None


class RaggedKVCache:
    """Rows at different lengths in one batch, for continuous batching (tfm.generation.batcher):
    row b holds `lengths[b]` positions of buffers (L, R, Hkv, S, hd) with room for R rows.
    A forward over the first `rows` rows feeds one new token per row (T = 1) at that row's own
    position; keys past a row's length are masked out. Created per batcher, never on the model."""

    def __init__(
        self,
        cfg: ModelConfig,
        capacity: int,
        max_len: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if not 1 <= max_len <= cfg.context_length:
            raise ValueError(f"max_len={max_len} must be between 1 and the context length {cfg.context_length}")
        shape = (cfg.n_layer, capacity, cfg.n_kv_head, max_len, cfg.d_head)  # (L, R, Hkv, S, hd)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.lengths = torch.zeros(capacity, dtype=torch.long, device=device)  # (R,)
        self.rows, self.max_len, self.cfg = 0, max_len, cfg
        self._edits, self._step = 0, None  # what every layer of one step shares, computed once

    @property
    def length(self) -> int:
        """The longest active row (what the model checks against the context)."""
        return int(self.lengths[: self.rows].max()) if self.rows else 0

    @property
    def starts(self) -> torch.Tensor:
        return self.lengths[: self.rows]  # (B,)

    def _shared(self) -> tuple[int, torch.Tensor, torch.Tensor]:
        """(keys after this step, row indices (B,), mask (B, 1, 1, S)) for the step about to run:
        the same for every layer, so computed once until the rows or their lengths change."""
        key = (self.rows, self._edits)
        if self._step is None or self._step[0] != key:
            n, device = self.length + 1, self.lengths.device
            mask = (torch.arange(n, device=device) <= self.starts[:, None])[:, None, None]
            self._step = (key, (n, torch.arange(self.rows, device=device), mask))
        return self._step[1]

    def attn_mask(self, t_q: int) -> torch.Tensor:
        """(B, 1, 1, S) True where a row's query may look: its own positions, the new one included."""
        if t_q != 1:
            raise ValueError("a ragged cache decodes one token per row; prefill each row with a KVCache")
        return self._shared()[2]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write each row's (Hkv, hd) new key/value at its own position; all keys so far, (B, Hkv, S, hd)."""
        n, rows, _ = self._shared()
        if n > self.max_len:
            raise ValueError(f"the batch cache holds {self.max_len} positions; {n} were asked for")
        self.k[layer, rows, :, self.starts] = k[:, :, 0]
        self.v[layer, rows, :, self.starts] = v[:, :, 0]
        return self.k[layer, : self.rows, :, :n], self.v[layer, : self.rows, :, :n]

    def advance(self, n: int) -> None:
        self.lengths[: self.rows] += n
        self._edits += 1

    def batch_size(self) -> int:
        return self.rows

    def put(self, row: int, prefilled: KVCache, src: int = 0, n: int | None = None) -> None:
        """Copy row `src` of a prefilled cache into `row`: its first n positions (default: all it holds)."""
        n = prefilled.length if n is None else n
        self.k[:, row, :, :n] = prefilled.k[:, src, :, :n]
        self.v[:, row, :, :n] = prefilled.v[:, src, :, :n]
        self.lengths[row] = n
        self._edits += 1

    def move(self, src: int, dst: int) -> None:
        """Row src's positions into row dst (the batcher keeps active rows first)."""
        n = int(self.lengths[src])
        self.k[:, dst, :, :n] = self.k[:, src, :, :n]
        self.v[:, dst, :, :n] = self.v[:, src, :, :n]
        self.lengths[dst] = n
        self._edits += 1

    def grown(self, max_len: int, capacity: int) -> "RaggedKVCache":
        """A copy with room for `capacity` rows of `max_len` positions (rows and lengths kept)."""
        big = RaggedKVCache(self.cfg, capacity, max_len, self.k.device, self.k.dtype)
        keep, n = min(self.max_len, max_len), self.rows
        big.k[:, :n, :, :keep] = self.k[:, :n, :, :keep]
        big.v[:, :n, :, :keep] = self.v[:, :n, :, :keep]
        big.lengths[:n] = self.lengths[:n]
        big.rows = n
        return big

    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2
