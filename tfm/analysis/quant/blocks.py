"""How a GGUF file stores its weights: each tensor's type and bits per weight, and one block's
stored integers, scale and minimum beside the floats they stand for.

llama.cpp cuts each row of a weight matrix into blocks of 32 numbers and stores each block as
one scale `d` (float16), for some types a minimum `m`, and 32 small integers `q`. The float a
block stands for is `d·q + m` (Q4_1, Q5_1) or `d·(q − offset)` (Q4_0: 8, Q5_0: 16, Q8_0: 0).
`block_view` reads one block's bytes straight from the file and decodes them by that rule;
`BlockView.dequantized` is what the `gguf` package's own `gguf.quants.dequantize` makes of the
same bytes, so a page can show the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gguf_quants

from ...core.validate import check_int
from ...loaders.gguf_file import GGUFFile
from ...loaders.loading import LM
from ...loaders.ollama import gguf_in
from ...loaders.packaged import gemma3_path, smollm2_path
from .kblocks import K_DECODED, decode_q4_k, decode_q6_k
from ...loaders.spec import parse_spec

__all__ = ["DECODED", "TensorRow", "QuantTable", "BlockView", "gguf_path", "tensor_table", "block_view", "block_size"]

# type -> (has a minimum, offset subtracted from q, bits of q): the block layouts decoded here
DECODED = {
    "Q8_0": (False, 0, 8),
    "Q4_0": (False, 8, 4),
    "Q4_1": (True, 0, 4),
    "Q5_0": (False, 16, 5),
    "Q5_1": (True, 0, 5),
    **K_DECODED,
}  # K-quants: 256-weight super-blocks (tfm.analysis.quant.kblocks)


@dataclass(frozen=True)
class TensorRow:
    name: str
    shape: tuple[int, ...]
    qtype: str
    n_weights: int
    nbytes: int  # stored bytes in the file

    @property
    def bits_per_weight(self) -> float:
        return 8 * self.nbytes / max(1, self.n_weights)


@dataclass(frozen=True)
class QuantTable:
    rows: tuple[TensorRow, ...]
    file_bytes: int

    @property
    def stored_bytes(self) -> int:
        return sum(r.nbytes for r in self.rows)

    @property
    def n_weights(self) -> int:
        return sum(r.n_weights for r in self.rows)

    def by_type(self) -> dict[str, tuple[int, int, int]]:
        """type -> (tensors, weights, stored bytes)."""
        out: dict[str, tuple[int, int, int]] = {}
        for r in self.rows:
            n, w, b = out.get(r.qtype, (0, 0, 0))
            out[r.qtype] = (n + 1, w + r.n_weights, b + r.nbytes)
        return out


@dataclass(frozen=True)
class BlockView:
    tensor: str
    qtype: str
    row: int
    block: int
    raw: bytes  # the block's bytes as stored
    scale: float  # d
    minimum: float | None  # m (Q4_1, Q5_1), else None
    offset: int  # subtracted from q before scaling (Q4_0: 8, Q5_0: 16)
    ints: np.ndarray  # (32,) the stored integers q
    values: np.ndarray  # (32,) float32, d·(q − offset) + m, decoded here (K-quants: (256,))
    dequantized: np.ndarray  # (32,) float32, gguf.quants.dequantize of the same bytes
    sub_scale: np.ndarray | None = None  # K-quants: each weight's d·sc_j (its sub-block's scale)
    sub_min: np.ndarray | None = None  # Q4_K: each weight's dmin·m_j

    @property
    def formula(self) -> str:
        q = f"(q − {self.offset})" if self.offset else "q"
        if self.sub_scale is not None:
            return f"x = d·sc_j·{q}" + (" − dmin·m_j" if self.sub_min is not None else "")
        return f"x = d·{q}" + (" + m" if self.minimum is not None else "")


def gguf_path(lm: LM) -> Path | None:
    """The GGUF file a loaded model came from (its spec names it), or None for any other model."""
    if lm.meta.get("source_format") != "gguf":
        return None
    spec = parse_spec(lm.source, bare_path=True)
    if spec.kind in ("smollm2", "gemma3"):
        return smollm2_path() if spec.kind == "smollm2" else gemma3_path()
    return gguf_in(Path(spec.path).expanduser()) if spec.kind == "folder" else None


def tensor_table(f: GGUFFile) -> QuantTable:
    rows = tuple(TensorRow(t.name, t.shape, t.qtype.name, t.n_elements, t.nbytes) for t in f.tensors.values())
    return QuantTable(rows, f.size)


def _ints(qtype: str, body: np.ndarray) -> np.ndarray:
    """The 32 stored integers of a block body (after d, m): nibbles low half first, 5th bits from qh."""
    if qtype == "Q8_0":
        return body[:32].view(np.int8).astype(np.int16)
    qh = None
    if qtype in ("Q5_0", "Q5_1"):
        qh, body = int(body[:4].view("<u4")[0]), body[4:]
    qs = body[:16]
    q = np.concatenate([qs & 0x0F, qs >> 4]).astype(np.int16)
    if qh is not None:
        q |= (((qh >> np.arange(32)) & 1) << 4).astype(np.int16)
    return q


def block_size(f: GGUFFile, name: str) -> int:
    """Weights per block of tensor `name` (32; 256 for the K-quants)."""
    return GGML_QUANT_SIZES[f.tensors[name].qtype][0]


def block_view(f: GGUFFile, name: str, row: int, block: int) -> BlockView:
    """Block `block` of row `row` of tensor `name`, read from the file and decoded."""
    if name not in f.tensors:
        raise ValueError(f"the file has no tensor {name[:80]!r}")
    t = f.tensors[name]
    if t.qtype.name not in DECODED:
        raise ValueError(
            f"{name} is stored as {t.qtype.name}; the block view decodes "
            f"{', '.join(DECODED)} (pick a tensor of one of these types)"
        )
    row, block, raw = _read_block(f, name, row, block)
    data = np.frombuffer(raw, dtype=np.uint8)
    deq = np.asarray(gguf_quants.dequantize(data[None, :], GGMLQuantizationType[t.qtype.name]), np.float32)[0]
    if t.qtype.name == "Q4_K":
        d, dmin, q, mul, sub, x = decode_q4_k(data)
        return BlockView(name, "Q4_K", row, block, raw, d, dmin, 0, q, x, deq, mul, sub)
    if t.qtype.name == "Q6_K":
        d, q, mul, x = decode_q6_k(data)
        return BlockView(name, "Q6_K", row, block, raw, d, None, 32, q, x, deq, mul)
    return _plain_block(name, t.qtype.name, row, block, raw, data, deq)


def _read_block(f: GGUFFile, name: str, row: int, block: int) -> tuple[int, int, bytes]:
    """(row, block) checked against tensor `name`'s shape, and that block's bytes read from the file."""
    t = f.tensors[name]
    size, type_size = GGML_QUANT_SIZES[t.qtype]
    n_rows = t.n_elements // t.shape[-1]
    row = check_int("row", row, 0, n_rows - 1)
    block = check_int("block", block, 0, t.shape[-1] // size - 1)
    at = t.offset + (row * (t.shape[-1] // size) + block) * type_size
    with open(f.path, "rb") as fh:
        fh.seek(at)
        raw = fh.read(type_size)
    if len(raw) != type_size:
        raise ValueError(f"{f.path} changed or was truncated while being read (tensor {name!r})")
    return row, block, raw


def _plain_block(
    name: str, qtype: str, row: int, block: int, raw: bytes, data: np.ndarray, deq: np.ndarray
) -> BlockView:
    """A Q8_0 / Q4_0 / Q4_1 / ... block: one scale (and a minimum), then its integers."""
    has_min, offset, _ = DECODED[qtype]
    d = data[:2].view("<f2").astype(np.float32)[0]
    m = data[2:4].view("<f2").astype(np.float32)[0] if has_min else None
    ints = _ints(qtype, data[4 if has_min else 2 :])
    values = d * (ints - offset).astype(np.float32)
    if m is not None:
        values = values + m
    return BlockView(
        name,
        qtype,
        row,
        block,
        raw,
        float(d),
        None if m is None else float(m),
        offset,
        ints,
        values.astype(np.float32),
        deq,
    )
