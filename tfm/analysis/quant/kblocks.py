"""llama.cpp's K-quant super-blocks, decoded byte by byte: Q4_K and Q6_K (Gemma 3 270M's file
stores its matrices in these, Q5_0 and Q8_0; `blocks` decodes the 32-weight types).

A K-quant block holds 256 weights in sub-blocks, each with its own small integer scale (and, for
Q4_K, minimum) that multiplies the super-block's float16 `d` (and `dmin`):

    Q4_K  144 bytes: d, dmin, 12 bytes of 6-bit scales and minimums for 8 sub-blocks of 32,
          128 bytes of 4-bit q.                       x = d·sc_j·q − dmin·m_j
    Q6_K  210 bytes: 128 bytes of low 4 bits, 64 of high 2 bits, 16 int8 scales for sub-blocks
          of 16, then d.                              x = d·sc_j·(q − 32)

as ggml's dequantize_row_q4_K / dequantize_row_q6_K compute them (in float32, the same order), so
`values` equal `gguf.quants.dequantize` of the same bytes.
"""

from __future__ import annotations

import numpy as np

K_DECODED = {"Q4_K": (True, 0, 4), "Q6_K": (False, 32, 6)}  # type -> (has minimums, offset, bits of q)


def _scale_min_k4(j: int, s: np.ndarray) -> tuple[int, int]:
    """ggml's get_scale_min_k4: sub-block j's 6-bit scale and minimum from the 12 packed bytes."""
    if j < 4:
        return int(s[j] & 63), int(s[j + 4] & 63)
    return int((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4)), int((s[j + 4] >> 4) | ((s[j] >> 6) << 4))


def decode_q4_k(data: np.ndarray) -> tuple[float, float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(d, dmin, q (256,), per-weight scale d·sc_j (256,), per-weight minimum dmin·m_j (256,), x (256,))."""
    d, dmin = (float(v) for v in data[:4].view("<f2").astype(np.float32))
    scales, qs = data[4:16], data[16:144]
    q, mul, sub = (np.empty(256, np.int16), np.empty(256, np.float32), np.empty(256, np.float32))
    for g in range(4):  # 64 weights: low nibbles, then high nibbles, of 32 bytes
        chunk = qs[32 * g : 32 * g + 32]
        for half, nib in enumerate((chunk & 0x0F, chunk >> 4)):
            sc, m = _scale_min_k4(2 * g + half, scales)
            at = slice(64 * g + 32 * half, 64 * g + 32 * half + 32)
            q[at], mul[at], sub[at] = nib, np.float32(d) * np.float32(sc), np.float32(dmin) * np.float32(m)
    return d, dmin, q, mul, sub, (mul * q.astype(np.float32) - sub).astype(np.float32)


def decode_q6_k(data: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """(d, q (256,) in 0..63, per-weight scale d·sc_j (256,), x (256,))."""
    ql, qh, sc = data[:128].astype(np.int16), data[128:192].astype(np.int16), data[192:208].view(np.int8)
    d = float(data[208:210].view("<f2").astype(np.float32)[0])
    q, mul = np.empty(256, np.int16), np.empty(256, np.float32)
    for n in range(2):  # two halves of 128 weights
        lo, hi, s, base = ql[64 * n : 64 * n + 64], qh[32 * n : 32 * n + 32], sc[8 * n : 8 * n + 8], 128 * n
        parts = (
            (lo[:32] & 0xF) | ((hi & 3) << 4),
            (lo[32:] & 0xF) | (((hi >> 2) & 3) << 4),
            (lo[:32] >> 4) | (((hi >> 4) & 3) << 4),
            (lo[32:] >> 4) | (((hi >> 6) & 3) << 4),
        )
        for k, part in enumerate(parts):
            at = slice(base + 32 * k, base + 32 * k + 32)
            q[at] = part
            mul[at] = np.repeat([np.float32(d) * np.float32(s[2 * k]), np.float32(d) * np.float32(s[2 * k + 1])], 16)
    return d, q, mul, (mul * (q - 32).astype(np.float32)).astype(np.float32)
