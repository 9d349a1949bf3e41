"""A GGUF file's header, metadata and tensor table, read strictly, before any weight is touched.

GGUF (llama.cpp's format): magic "GGUF", version (2 or 3), tensor count, metadata count, the
metadata (key, typed value), the tensor table (name, dims, type, offset), then the aligned
tensor data. The `gguf` package's reader trusts the counts it reads and memory-maps every
field; a file from a browser is untrusted, so this module parses the header itself: every
count and length is checked against the bytes left in the file before it is used, so a
hostile header costs at most one pass over the file's own bytes, and every problem is one
ValueError naming the file. Tensor data are read (and dequantized with `gguf.quants`) only
by `GGUFFile.tensor`, one tensor at a time, after the caller has checked `float_bytes()`.

    f = read_gguf("model.gguf")
    f.metadata["general.architecture"], f.tensors["token_embd.weight"].shape
    f.float_bytes()                    # the float32 size of every tensor, from the header
    f.tensor("blk.0.attn_q.weight")   # float32 numpy array, shape (rows, cols)
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gguf_quants

from ..core.files import reading
from . import gguf_dequant

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_KEY_CHARS = 1 << 16
MAX_DIMS = 4
MAX_ARRAY = 1 << 22  # metadata array items (the largest vocabularies have ~262k tokens): bounds Python objects made
DEFAULT_ALIGNMENT = 32
# Scalar metadata types: GGUF type code -> (struct format, numpy dtype).
SCALARS = {
    0: ("<B", "<u1"),
    1: ("<b", "<i1"),
    2: ("<H", "<u2"),
    3: ("<h", "<i2"),
    4: ("<I", "<u4"),
    5: ("<i", "<i4"),
    6: ("<f", "<f4"),
    7: ("<?", "<u1"),
    10: ("<Q", "<u8"),
    11: ("<q", "<i8"),
    12: ("<d", "<f8"),
}
STRING, ARRAY = 8, 9
# Tensor types tfm dequantizes (with the gguf package's own numpy code), by GGML type name.
TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
SUPPORTED = {GGMLQuantizationType[n] for n in TYPES}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the table. `shape` is numpy order (GGUF lists dims fastest first, so it is
    reversed); `offset` is absolute in the file; `nbytes` what the stored form takes."""

    name: str
    shape: tuple[int, ...]
    qtype: GGMLQuantizationType
    offset: int
    nbytes: int

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    version: int
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo]
    size: int

    def float_bytes(self, itemsize: int = 4) -> int:
        """Bytes every tensor takes once dequantized (`itemsize` 4 for float32, 2 for bfloat16)."""
        return sum(t.n_elements for t in self.tensors.values()) * itemsize

    def tensor(self, name: str) -> np.ndarray:
        """The tensor dequantized to a float32 array of its shape (a fresh copy)."""
        t = self.tensors[name]
        with open(self.path, "rb") as fh:
            fh.seek(t.offset)
            raw = np.empty(t.nbytes, dtype=np.uint8)  # writable: torch decodes Q8_0 / Q5_0 from it
            got = fh.readinto(memoryview(raw))
        if got != t.nbytes:
            raise ValueError(f"{self.path} changed or was truncated while being read (tensor {name!r})")
        fast = gguf_dequant.dequantize(raw, t.qtype.name, t.shape)  # Q8_0, Q5_0: torch, the same numbers
        if fast is not None:
            return fast
        block, type_size = GGML_QUANT_SIZES[t.qtype]
        rows = raw.reshape(*t.shape[:-1], t.shape[-1] // block * type_size)
        return np.array(gguf_quants.dequantize(rows, t.qtype), dtype=np.float32).reshape(t.shape)

    def types(self) -> dict[str, int]:
        """How many tensors the file stores in each type, e.g. {"Q4_1": 210, "F32": 61}."""
        out: dict[str, int] = {}
        for t in self.tensors.values():
            out[t.qtype.name] = out.get(t.qtype.name, 0) + 1
        return out


class _Cursor:
    """Reads little-endian values from a buffer, refusing any read past its end."""

    def __init__(self, buf, source: str):
        self.buf, self.pos, self.end, self.source = buf, 0, len(buf), source

    def fail(self, what: str) -> ValueError:
        return ValueError(f"{self.source} is not a valid GGUF file: {what}")

    def left(self) -> int:
        return self.end - self.pos

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or n > self.left():
            raise self.fail(
                f"{what} needs {n:,} bytes at offset {self.pos:,}, past the end of the file (truncated or corrupt)"
            )
        out = self.buf[self.pos : self.pos + n]  # a bytes copy: nothing keeps the map open
        self.pos += n
        return out

    def scalar(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str, limit: int | None = None) -> str:
        n = self.scalar("<Q", what + "'s length")
        if limit is not None and n > limit:
            raise self.fail(f"{what} is {n:,} bytes long; at most {limit:,} are allowed")
        try:
            return self.take(n, what).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8 text") from None

    def count(self, what: str, min_item_bytes: int, cap: int | None = None) -> int:
        """A uint64 count, refused if that many items of at least `min_item_bytes` cannot fit."""
        n = self.scalar("<Q", what)
        if n * min_item_bytes > self.left():
            raise self.fail(f"{what} is {n:,}, more than the {self.left():,} bytes left in the file can hold")
        if cap is not None and n > cap:
            raise self.fail(f"{what} is {n:,}; tfm reads at most {cap:,}")
        return n


def read_gguf(path: str | Path) -> GGUFFile:
    """Parse the header, metadata and tensor table of a GGUF file (no tensor data is read)."""
    path = Path(path)
    source = path.name
    with reading(source):
        size = path.stat().st_size
        with open(path, "rb") as fh:
            if size < 24:
                raise ValueError(f"{source} is not a GGUF file: it has only {size} bytes")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                cur = _Cursor(mm, source)
                return _parse(cur, path, size)


def _parse(cur: _Cursor, path: Path, size: int) -> GGUFFile:
    magic = bytes(cur.take(4, "the magic number"))
    if magic != MAGIC:
        raise cur.fail(f"it starts with {magic!r}, not {MAGIC!r} (is it a GGUF model file?)")
    version = cur.scalar("<I", "the version")
    if version not in VERSIONS:
        hint = " (a big-endian file?)" if version >= 1 << 16 else ""
        raise cur.fail(f"version {version}{hint}; tfm reads GGUF versions {VERSIONS}")
    n_tensors = cur.scalar("<Q", "the tensor count")
    n_kv = cur.scalar("<Q", "the metadata count")
    # smallest entries: a tensor has a name length, n_dims, type and offset (24 bytes); a key/value 8 + 4 + 1
    if n_tensors * 24 > cur.left() or n_kv * 13 > cur.left():
        raise cur.fail(
            f"it claims {n_tensors:,} tensors and {n_kv:,} metadata entries, more than its {size:,} bytes can hold"
        )
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string("a metadata key", MAX_KEY_CHARS)
        if key in metadata:
            raise cur.fail(f"metadata key {key[:80]!r} appears twice")
        metadata[key] = _value(cur, cur.scalar("<I", f"the type of {key[:80]!r}"), key, depth=0)
    infos = [_tensor_info(cur) for _ in range(n_tensors)]
    return GGUFFile(path, version, metadata, _placed(cur, infos, metadata, size), size)


def _placed(cur: _Cursor, infos: list, metadata: dict[str, Any], size: int) -> dict[str, TensorInfo]:
    """The tensor table with absolute offsets, each tensor's data checked to lie inside the file."""
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1) or alignment > 1 << 20:
        raise cur.fail(f"general.alignment {alignment!r} is not a power of two")
    data_start = -(-cur.pos // alignment) * alignment
    tensors = {}
    for name, shape, qtype, offset, nbytes in infos:
        if name in tensors:
            raise cur.fail(f"tensor {name[:80]!r} appears twice")
        start = data_start + offset
        if start + nbytes > size:
            raise cur.fail(
                f"tensor {name[:80]!r}'s data ({nbytes:,} bytes at {start:,}) runs past the end "
                f"of the file ({size:,} bytes): truncated or corrupt"
            )
        tensors[name] = TensorInfo(name, shape, qtype, start, nbytes)
    return tensors


def _value(cur: _Cursor, kind: int, key: str, depth: int):
    what = f"the value of {key[:80]!r}"
    if kind in SCALARS:
        value = cur.scalar(SCALARS[kind][0], what)
        return bool(value) if kind == 7 else value
    if kind == STRING:
        return cur.string(what)
    if kind != ARRAY:
        raise cur.fail(f"metadata {key[:80]!r} has unknown type {kind}")
    if depth > 1:
        raise cur.fail(f"metadata {key[:80]!r} nests arrays more than two deep")
    item = cur.scalar("<I", what + "'s item type")
    if item in SCALARS:
        dtype = np.dtype(SCALARS[item][1])
        n = cur.count(what + "'s length", dtype.itemsize, MAX_ARRAY)
        arr = np.frombuffer(cur.take(n * dtype.itemsize, what), dtype=dtype)
        return (arr != 0).tolist() if item == 7 else arr.tolist()
    n = cur.count(what + "'s length", 8 if item in (STRING, ARRAY) else 1, MAX_ARRAY)
    if item == STRING:
        return [cur.string(what) for _ in range(n)]
    return [_value(cur, item, key, depth + 1) for _ in range(n)]


def _tensor_info(cur: _Cursor):
    name = cur.string("a tensor name", MAX_KEY_CHARS)
    n_dims = cur.scalar("<I", f"tensor {name[:80]!r}'s dimension count")
    if not 1 <= n_dims <= MAX_DIMS:
        raise cur.fail(f"tensor {name[:80]!r} has {n_dims} dimensions; GGUF tensors have 1 to {MAX_DIMS}")
    dims = struct.unpack(f"<{n_dims}Q", cur.take(8 * n_dims, f"tensor {name[:80]!r}'s dimensions"))
    code = cur.scalar("<I", f"tensor {name[:80]!r}'s type")
    offset = cur.scalar("<Q", f"tensor {name[:80]!r}'s offset")
    try:
        qtype = GGMLQuantizationType(code)
    except ValueError:
        raise cur.fail(f"tensor {name[:80]!r} has unknown type {code}") from None
    if qtype not in SUPPORTED:
        raise ValueError(
            f"{cur.source}: tensor {name[:80]!r} is stored as {qtype.name}, which tfm cannot "
            f"dequantize; supported types: {', '.join(TYPES)}"
        )
    block, type_size = GGML_QUANT_SIZES[qtype]
    if any(d == 0 for d in dims) or dims[0] % block:
        raise cur.fail(f"tensor {name[:80]!r} has dims {list(dims)}; {qtype.name} rows are whole blocks of {block}")
    n = 1
    for d in dims:
        n *= d
        if n > cur.end * 256:  # no real file has more numbers than ~8 per byte it holds
            raise cur.fail(f"tensor {name[:80]!r} has dims {list(dims)}, far more numbers than the file can hold")
    return name, tuple(reversed(dims)), qtype, offset, n // block * type_size
