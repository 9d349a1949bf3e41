"""tfm.loaders.gguf_dequant decodes Q8_0 and Q5_0 blocks to the same float32 numbers as
gguf.quants.dequantize (the package's own numpy code, the oracle), bit for bit, on random
blocks: every scale and integer pattern, negative and subnormal float16 scales included."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gguf_quants

from tfm.loaders import gguf_dequant


def random_blocks(qtype: str, n_blocks: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(n_blocks, gguf_dequant.BYTES[qtype]), dtype=np.uint8)
    scales = rng.normal(0, 0.05, size=n_blocks).astype(np.float16)
    scales[:3] = np.array([0.0, -1e-7, 65504.0], dtype=np.float16)  # zero, a subnormal, the largest
    raw[:, :2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return raw


@pytest.mark.parametrize("qtype", ["Q8_0", "Q5_0"])
@pytest.mark.parametrize("shape", [(3, 64), (40, 96), (1, 96)])
def test_blocks_equal_gguf_dequantize(qtype, shape):
    rows, cols = shape
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]]
    assert size == gguf_dequant.BYTES[qtype] and block == gguf_dequant.BLOCK
    raw = random_blocks(qtype, rows * cols // block, seed=rows + cols)
    want = gguf_quants.dequantize(raw.reshape(rows, cols // block * size), GGMLQuantizationType[qtype])
    got = gguf_dequant.dequantize(raw.reshape(-1), qtype, shape)
    assert got.dtype == np.float32 and got.shape == shape
    np.testing.assert_array_equal(got, want)


def test_other_types_are_left_to_gguf():
    assert gguf_dequant.dequantize(np.zeros(144, dtype=np.uint8), "Q4_K", (1, 256)) is None
