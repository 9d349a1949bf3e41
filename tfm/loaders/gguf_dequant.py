"""Q8_0 and Q5_0 blocks to float32 in torch, the same numbers as `gguf.quants.dequantize`.

The gguf package's numpy code splits a tensor into groups and makes several full-size temporary
arrays per group, on one core: Gemma 3 270M's 262,144 x 640 Q8_0 embedding took most of its load.
These two block types are simple (a float16 scale per 32 weights, times 8- or 5-bit integers), so
they are decoded here with a few vectorised torch ops; the product is the same single float32
multiplication of the same two values as numpy's, so the result is equal bit for bit
(tests/test_gguf_dequant.py). Other types go to `gguf.quants` (`tfm.loaders.gguf_file`).

    Q8_0 block (34 bytes):  d float16 | 32 x int8 q          -> d * q
    Q5_0 block (22 bytes):  d float16 | qh uint32 | 16 bytes -> d * ((low nibble | high bit << 4) - 16)
      weights 0-15 are the low nibbles of the 16 bytes, 16-31 the high ones; weight j's fifth bit is qh's bit j
"""

from __future__ import annotations

import numpy as np
import torch

BLOCK = 32
BYTES = {"Q8_0": 2 + BLOCK, "Q5_0": 2 + 4 + BLOCK // 2}


def dequantize(raw: np.ndarray, qtype: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """The float32 array of `shape` that the file's bytes `raw` (uint8) hold, or None when `qtype`
    is not one decoded here (the caller then uses gguf.quants)."""
    if qtype not in BYTES:
        return None
    blocks = torch.from_numpy(np.ascontiguousarray(raw)).view(-1, BYTES[qtype])  # (n_blocks, bytes)
    d = blocks[:, :2].contiguous().view(torch.float16).to(torch.float32)  # (n_blocks, 1)
    q = _q8(blocks) if qtype == "Q8_0" else _q5(blocks)  # (n_blocks, 32) float32
    return q.mul_(d).view(shape).numpy()


def _q8(blocks: torch.Tensor) -> torch.Tensor:
    return blocks[:, 2:].contiguous().view(torch.int8).to(torch.float32)


def _q5(blocks: torch.Tensor) -> torch.Tensor:
    shifts = torch.arange(8, dtype=torch.uint8)
    high = (blocks[:, 2:6, None] >> shifts) & 1  # (n, 4, 8): qh's bits, LSB first
    packed = blocks[:, 6:]  # (n, 16)
    low = torch.cat([packed & 0x0F, packed >> 4], dim=1)  # (n, 32)
    q = (low | (high.reshape(-1, BLOCK) << 4)).to(torch.int16) - 16  # (n, 32) in -16..15
    return q.to(torch.float32)
