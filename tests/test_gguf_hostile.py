"""Truncated, corrupt and hostile GGUF files (written with `gguf.GGUFWriter`, then bytes
changed): each gets one clear ValueError before anything large is read or allocated; and the
size limit is checked from the header before any tensor is dequantized. Ollama manifests cannot
point outside their blobs folder."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from gguf import GGUFValueType

import tfm
from tests.gguf_files import bytelevel_vocab, write_model
from tfm.loaders import limits as tfm_limits
from tfm.loaders.gguf_file import GGUFFile, read_gguf
from tfm.loaders.ollama import blob_of, gguf_in, models


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("good") / "m.gguf", "llama", "Q8_0", bytelevel_vocab())


def patched(good: Path, tmp_path: Path, offset: int, fmt: str, value) -> Path:
    data = bytearray(good.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    out = tmp_path / "bad.gguf"
    out.write_bytes(bytes(data))
    return out


def key_offset(path: Path, key: str) -> int:
    """Offset of the bytes right after a metadata key's text."""
    data = path.read_bytes()
    return data.index(key.encode()) + len(key)


def refused(path: Path, *words: str) -> str:
    with pytest.raises(ValueError) as e:
        tfm.load(path, device="cpu")
    msg = str(e.value)
    assert all(w in msg for w in words), msg
    assert len(msg) < 600
    return msg


def test_the_good_file_loads(good):
    assert tfm.load(good, device="cpu").config.n_layer == 2


def test_bad_magic(good, tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGML" + good.read_bytes()[4:])
    refused(bad, "not a valid GGUF file", "GGUF")


def test_unknown_version(good, tmp_path):
    refused(patched(good, tmp_path, 4, "<I", 7), "version 7")
    refused(patched(good, tmp_path, 4, "<I", 3 << 24), "big-endian")


@pytest.mark.parametrize("offset, what", [(8, "tensors"), (16, "metadata")])
def test_absurd_counts_are_refused_before_reading_entries(good, tmp_path, offset, what):
    refused(patched(good, tmp_path, offset, "<Q", 1 << 60), what, "more than its")


def test_absurd_string_length(good, tmp_path):
    refused(patched(good, tmp_path, 24, "<Q", 1 << 62), "metadata key", "at most")  # the first key's length
    at = key_offset(good, "general.architecture") + 4  # past the value's type: the string's length
    refused(patched(good, tmp_path, at, "<Q", 1 << 50), "past the end of the file")


def test_absurd_array_length(good, tmp_path):
    at = key_offset(good, "tokenizer.ggml.tokens") + 8  # type ARRAY, item type STRING, then the count
    refused(patched(good, tmp_path, at, "<Q", 1 << 58), "tokenizer.ggml.tokens", "more than the")


def test_unknown_value_type(good, tmp_path):
    refused(patched(good, tmp_path, key_offset(good, "general.architecture"), "<I", 99), "unknown type 99")


def test_tensor_data_past_the_end_of_the_file(good, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good.read_bytes()[:-4096])
    refused(cut, "past the end of the file", "truncated")


def test_tensor_header_offsets_and_types(good, tmp_path):
    name = b"blk.1.ffn_down.weight"
    at = good.read_bytes().index(name) + len(name)  # n_dims u32, dims 2 x u64, type u32, offset u64
    refused(patched(good, tmp_path, at, "<I", 9), "dimensions")
    refused(patched(good, tmp_path, at + 4, "<Q", 1 << 40), "far more numbers")
    refused(
        patched(good, tmp_path, at + 20, "<I", 16), "IQ2_XXS", "cannot dequantize", "Q4_K"
    )  # a type tfm does not read
    refused(patched(good, tmp_path, at + 24, "<Q", 1 << 40), "past the end of the file")


def test_shapes_that_disagree_with_the_config(tmp_path):
    path = write_model(tmp_path / "m.gguf", shapes={"blk.0.attn_q.weight": (64, 96)})
    refused(path, "blk.0.attn_q.weight", "(64, 96)", "expects (64, 64)")
    path = write_model(tmp_path / "n.gguf", skip=("blk.1.ffn_gate.weight",))
    refused(path, "missing tensor", "blk.1.ffn_gate.weight")
    path = write_model(tmp_path / "o.gguf", shapes={"blk.2.ffn_gate.weight": (96, 64)})
    refused(path, "unexpected tensors", "blk.2.ffn_gate.weight")


def test_unknown_architecture_is_refused_by_name_with_the_list(tmp_path):
    path = write_model(tmp_path / "m.gguf", extra_kv={"general.architecture": ("mamba", GGUFValueType.STRING)})
    refused(path, "'mamba'", "llama, qwen2, gpt2")


def test_unknown_pre_tokenizer_is_refused_never_guessed(tmp_path):
    path = write_model(tmp_path / "m.gguf", vocab=bytelevel_vocab(pre="made-up-bpe"))
    refused(path, "'made-up-bpe'", "never guesses", "smollm")


def test_bad_metadata_values_are_named(tmp_path):
    path = write_model(tmp_path / "m.gguf", extra_kv={"llama.block_count": ("two", GGUFValueType.STRING)})
    refused(path, "llama.block_count", "integer")
    path = write_model(tmp_path / "n.gguf", extra_kv={"tokenizer.ggml.eos_token_id": (10**6, GGUFValueType.UINT32)})
    refused(path, "eos_token_id", "not a token id")


@pytest.mark.parametrize(
    "vocab, key, value, kind",
    [
        ("sentencepiece", "tokenizer.ggml.merges", 7, GGUFValueType.UINT32),  # was TypeError: not iterable
        ("bytelevel", "tokenizer.ggml.pre", ["a", "b"], GGUFValueType.ARRAY),  # was TypeError: unhashable
        ("bytelevel", "llama.vocab_size", ["a", "b"], GGUFValueType.ARRAY),  # was TypeError from int()
        ("bytelevel", "llama.vocab_size", float("inf"), GGUFValueType.FLOAT64),  # was OverflowError
    ],
)
def test_metadata_of_the_wrong_kind_is_a_valueerror_naming_the_file(tmp_path, vocab, key, value, kind):
    from tests.gguf_files import sentencepiece_vocab

    v = bytelevel_vocab() if vocab == "bytelevel" else sentencepiece_vocab()
    path = write_model(tmp_path / "m.gguf", vocab=v, extra_kv={key: (value, kind)})
    msg = refused(path, "m.gguf")
    assert str(tmp_path) not in msg


def test_the_limit_is_checked_from_the_header_before_anything_is_dequantized(good, monkeypatch):
    def no_reads(self, name):
        raise AssertionError(f"dequantized {name} before the size check")

    monkeypatch.setattr(GGUFFile, "tensor", no_reads)
    expanded = read_gguf(good).float_bytes()
    with pytest.raises(ValueError, match="once expanded to float32"):
        tfm_limits.check_folder(good, tfm_limits.Limits(max_model_bytes=expanded - 1))
    tfm_limits.check_folder(good, tfm_limits.Limits(max_model_bytes=expanded))  # just fits: passes
    stored = sum(t.nbytes for t in read_gguf(good).tensors.values())
    assert expanded > 3.5 * stored  # Q8_0 (34 bytes per 32 numbers) grows ~3.8x in float32


def test_a_header_is_parsed_again_only_when_its_file_changes(good, tmp_path, monkeypatch):
    """The app checks its model on every page run: an unchanged file's header is not parsed
    again, a file rewritten in place is (its size or modification time changed), and a new
    limit applies at once."""
    parsed = []
    real = tfm_limits.read_checked
    monkeypatch.setattr(tfm_limits, "read_checked", lambda p: parsed.append(p) or real(p))
    path = tmp_path / "m.gguf"
    path.write_bytes(good.read_bytes())
    expanded = read_gguf(good).float_bytes()
    for _ in range(3):
        tfm_limits.check_folder(path, tfm_limits.Limits(max_model_bytes=expanded))
    assert len(parsed) == 1
    with pytest.raises(ValueError, match="once expanded to float32"):
        tfm_limits.check_folder(path, tfm_limits.Limits(max_model_bytes=expanded - 1))
    assert len(parsed) == 1
    data = bytearray(good.read_bytes())
    struct.pack_into("<I", data, key_offset(good, "llama.block_count") + 4, 10**6)
    path.write_bytes(bytes(data))  # same size, a new modification time
    with pytest.raises(ValueError, match="its header describes a model tfm cannot build: n_layer=1,000,000"):
        tfm_limits.check_folder(path, tfm_limits.Limits(max_model_bytes=expanded))
    assert len(parsed) == 2


# ---- Ollama folders ----------------------------------------------------------------------
def ollama_folder(root: Path, good: Path, manifests: dict[str, str]) -> Path:
    """An Ollama models folder: each manifest path (below manifests/) -> a digest it names."""
    (root / "blobs").mkdir(parents=True)
    for rel, digest in manifests.items():
        m = root / "manifests" / rel
        m.parent.mkdir(parents=True, exist_ok=True)
        m.write_text(
            json.dumps(
                {
                    "layers": [
                        {"mediaType": "application/vnd.ollama.image.license", "digest": "sha256:" + "0" * 64},
                        {"mediaType": "application/vnd.ollama.image.model", "digest": digest},
                    ]
                }
            )
        )
    (root / "blobs" / ("sha256-" + "a" * 64)).write_bytes(good.read_bytes())
    return root


def test_ollama_models_are_listed_by_name_and_load(good, tmp_path):
    root = ollama_folder(
        tmp_path / "models",
        good,
        {"registry.ollama.ai/library/tiny/latest": "sha256:" + "a" * 64, "hf.co/user/repo/Q8_0": "sha256:" + "a" * 64},
    )
    found = models(root)
    assert set(found) == {"tiny:latest", "hf.co/user/repo:Q8_0"}
    assert blob_of(found["tiny:latest"]).name == "sha256-" + "a" * 64
    assert tfm.load(found["tiny:latest"], device="cpu").config.n_layer == 2
    with pytest.raises(ValueError, match="2 models"):
        gguf_in(root)


@pytest.mark.parametrize("digest", ["sha256:../../../etc/passwd", "sha256:" + "A" * 64, "md5:abc"])
def test_ollama_manifests_cannot_point_outside_the_blobs(good, tmp_path, digest):
    root = ollama_folder(tmp_path / "models", good, {"registry.ollama.ai/library/evil/latest": digest})
    with pytest.raises(ValueError, match="no single model layer"):
        blob_of(root / "manifests/registry.ollama.ai/library/evil/latest")
