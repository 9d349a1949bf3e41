"""A key/value cache for incremental decoding, created per generation call.

It is passed to `GPT.forward(..., cache=cache)` and never stored on the model, so a shared
cached model stays untouched. Buffers are preallocated to `max_len` so each decode step
writes in place instead of concatenating.
"""
from __future__ import annotations

import torch

from .config import ModelConfig


class KVCache:
    def __init__(self, cfg: ModelConfig, batch: int = 1, max_len: int | None = None,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
        max_len = cfg.context_length if max_len is None else max_len
        if not 1 <= max_len <= cfg.context_length:
            raise ValueError(f"max_len={max_len} must be between 1 and the context length {cfg.context_length}")
        shape = (cfg.n_layer, batch, cfg.n_kv_head, max_len, cfg.d_head)  # (L, B, Hkv, S, hd): KV heads only
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0  # positions already cached, the same for every layer
        self.max_len = max_len

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store this step's (B, Hkv, T, hd) keys and values; return all of them so far."""
        end = self.length + k.shape[-2]
        if end > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions; {end} were asked for")
        self.k[layer, :, :, self.length:end] = k
        self.v[layer, :, :, self.length:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]  # (B, Hkv, S, hd)

    def advance(self, n: int) -> None:
        """Called once per forward, after every layer has stored its n new positions."""
        self.length += n

    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2
