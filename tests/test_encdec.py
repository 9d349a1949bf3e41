"""Encoder-decoder: config validation, shapes, trace names, masks, decoding, save/load."""

from __future__ import annotations

import json

import pytest
import torch

from tfm.teach.encdec import EncDecConfig, EncoderDecoder, greedy_decode, load_encdec, save_encdec
from tfm.core.trace_names import axes_for

BASE = dict(
    src_vocab_size=11,
    tgt_vocab_size=13,
    src_context_length=9,
    tgt_context_length=7,
    d_model=16,
    n_enc_layer=2,
    n_dec_layer=3,
    n_head=4,
    d_ff=32,
)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny tensors, one thread


def make(seed: int = 0, **overrides) -> EncoderDecoder:
    """An eval-mode model with large random weights, so attention is far from uniform."""
    model = EncoderDecoder(EncDecConfig(**{**BASE, **overrides}))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.2 * noise if (p.dim() == 1 and name.endswith("weight")) else 0.4 * noise)
    return model.eval()


def batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, 11, (3, 9), generator=g)
    tgt = torch.randint(0, 13, (3, 7), generator=g)
    pad = torch.zeros(3, 9, dtype=torch.bool)
    pad[1, 6:] = True
    pad[2, 3:] = True
    return src, tgt, pad


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(n_head=3), "not divisible"),
        (dict(d_model=0), "d_model"),
        (dict(n_enc_layer=0), "n_enc_layer"),
        (dict(pos_encoding="rope"), "pos_encoding"),
        (dict(norm_placement="middle"), "norm_placement"),
        (dict(d_model=15, n_head=1), "must be even"),
        (dict(dropout=1.5), "dropout"),
        (dict(src_vocab_size=1), "src_vocab_size"),
    ],
)
def test_config_rejects_bad_values(bad, message):
    with pytest.raises(ValueError, match=message):
        EncDecConfig(**{**BASE, **bad})


def test_config_dict_round_trip_and_errors():
    cfg = EncDecConfig(**BASE)
    assert EncDecConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown config keys"):
        EncDecConfig.from_dict({**cfg.to_dict(), "n_layer": 2})
    with pytest.raises(ValueError, match="missing required keys"):
        EncDecConfig.from_dict({k: v for k, v in cfg.to_dict().items() if k != "d_ff"})


def test_shapes_and_trace_names():
    model, (src, tgt, pad) = make(), batch()
    logits, trace = model(src, tgt, pad, trace=True)
    assert logits.shape == (3, 7, 13)
    b, s, t, h, d = 3, 9, 7, 4, 16
    expected = {"memory": (b, s, d), "enc.embed": (b, s, d), "dec.pos_embed": (t, d), "logits": (b, t, 13)}
    for i in range(2):
        expected[f"enc.blocks.{i}.attn.pattern"] = (b, h, s, s)
    for i in range(3):
        expected |= {
            f"dec.blocks.{i}.self.pattern": (b, h, t, t),
            f"dec.blocks.{i}.cross.pattern": (b, h, t, s),
            f"dec.blocks.{i}.cross.q": (b, h, t, d // h),
            f"dec.blocks.{i}.cross.k": (b, h, s, d // h),
            f"dec.blocks.{i}.cross_out": (b, t, d),
            f"dec.blocks.{i}.ln3.output": (b, t, d),
        }
    for name, shape in expected.items():
        assert tuple(trace[name].shape) == shape, name
    assert axes_for("dec.blocks.0.cross.pattern") == ("batch", "head", "query_pos", "src_pos")
    for entry in trace.shapes:  # every recorded tensor has one axis name per dimension
        assert len(entry.axes) == len(entry.shape), entry.name
    merged = [e for e in trace.shapes if e.name == "dec.blocks.0.cross.z_merged"]
    assert merged and merged[0].shape == (b, t, d) and not merged[0].stored


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"norm_placement": "pre"},
        {"pos_encoding": "learned", "norm": "rmsnorm"},
        {"activation": "swiglu", "bias": False},
    ],
)
def test_traced_equals_fused(variant):
    model, (src, tgt, pad) = make(**variant), batch()
    with torch.no_grad():
        plain = model(src, tgt, pad).logits
        traced = model(src, tgt, pad, trace=True).logits
    torch.testing.assert_close(plain, traced, atol=1e-4, rtol=1e-4)


def test_masks_give_exact_zeros():
    model, (src, tgt, pad) = make(), batch()
    _, trace = model(src, tgt, pad, trace=True)
    future = torch.triu(torch.ones(7, 7, dtype=torch.bool), diagonal=1)
    for i in range(3):
        self_p, cross_p = trace[f"dec.blocks.{i}.self.pattern"], trace[f"dec.blocks.{i}.cross.pattern"]
        assert torch.all(self_p[..., future] == 0)
        assert torch.all(self_p[..., ~future] > 0)  # everything allowed gets some weight
        for row in range(3):
            assert torch.all(cross_p[row][..., pad[row]] == 0)
            assert torch.all(cross_p[row][..., ~pad[row]] > 0)
        torch.testing.assert_close(cross_p.sum(-1), torch.ones(3, 4, 7))
    for i in range(2):
        enc_p = trace[f"enc.blocks.{i}.attn.pattern"]
        for row in range(3):
            assert torch.all(enc_p[row][..., pad[row]] == 0)
        assert torch.all(enc_p[0] > 0)  # no padding, no causal mask: all keys


def test_padding_is_ignored_and_decoder_is_causal():
    model, (src, tgt, pad) = make(), batch()
    with torch.no_grad():
        ref = model(src, tgt, pad).logits
        noisy = src.clone()
        noisy[pad] = (noisy[pad] + 5) % 11  # change only padded source tokens
        torch.testing.assert_close(model(noisy, tgt, pad).logits, ref)
        short = model(src[2:, :3], tgt[2:]).logits  # row 2 without its padding at all
        torch.testing.assert_close(short, ref[2:], atol=1e-5, rtol=1e-5)
        later = tgt.clone()
        later[:, 4:] = (later[:, 4:] + 1) % 13  # change the future of position 3
        changed = model(src, later, pad).logits
        torch.testing.assert_close(changed[:, :4], ref[:, :4])
        assert not torch.allclose(changed[:, 4:], ref[:, 4:])
        other_src = model((src + 1) % 11, tgt, pad).logits  # the decoder does read the encoder
        assert not torch.allclose(other_src, ref)


def test_bad_inputs_raise_clear_errors():
    model, (src, tgt, pad) = make(), batch()
    all_pad = pad.clone()
    all_pad[0] = True
    with pytest.raises(ValueError, match="all padding"):
        model(src, tgt, all_pad)
    with pytest.raises(ValueError, match="source ids must be in"):
        model(src + 20, tgt, pad)
    with pytest.raises(ValueError, match="exceeds"):
        model(torch.zeros(3, 10, dtype=torch.long), tgt)
    with pytest.raises(ValueError, match="shaped like src"):
        model(src, tgt, pad[:, :4])
    with pytest.raises(ValueError, match="batch"):
        model(src, tgt[:2], pad)


def test_greedy_decode_matches_step_by_step_argmax():
    model, (src, _, pad) = make(seed=3), batch()
    out = greedy_decode(model, src, pad, bos_id=1, eos_id=2)
    assert out.shape[0] == 3 and torch.all(out[:, 0] == 1) and out.shape[1] <= 7
    with torch.no_grad():
        for row in range(3):
            seq = torch.tensor([[1]])
            for pos in range(1, out.shape[1]):
                nxt = model(src[row : row + 1], seq, pad[row : row + 1]).logits[0, -1].argmax()
                if seq[0, -1] == 2 and pos > 1:
                    nxt = torch.tensor(2)  # finished rows repeat EOS
                assert int(out[row, pos]) == int(nxt), (row, pos)
                seq = torch.cat([seq, nxt.view(1, 1)], dim=1)


def test_save_load_round_trip_and_errors(tmp_path):
    model, (src, tgt, pad) = make(), batch()
    save_encdec(tmp_path / "m", model, {"note": "x"})
    loaded, meta = load_encdec(tmp_path / "m")
    assert meta == {"note": "x"} and loaded.config == model.config
    with torch.no_grad():
        torch.testing.assert_close(loaded(src, tgt, pad).logits, model(src, tgt, pad).logits)
    with pytest.raises(FileNotFoundError):
        load_encdec(tmp_path / "nothing")
    cfg_path = tmp_path / "m" / "config.json"
    data = json.loads(cfg_path.read_text())
    data["model"]["d_ff"] = 64
    cfg_path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="shape"):
        load_encdec(tmp_path / "m")
    cfg_path.write_text(json.dumps({**data, "format": "tfm"}))
    with pytest.raises(ValueError, match="not an encoder-decoder config"):
        load_encdec(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").write_bytes(b"garbage")
    cfg_path.write_text(json.dumps({**data, "model": model.config.to_dict()}))
    with pytest.raises(ValueError, match="corrupt"):
        load_encdec(tmp_path / "m")
