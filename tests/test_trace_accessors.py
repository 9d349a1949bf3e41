"""Typed trace accessors (tfm.trace.Trace.pattern, attention_row, residual_streams, norm_stats,
logits_at) and the one name table they read through, against the raw trace entries."""

from __future__ import annotations

import pytest
import torch

from tfm.core.trace_names import NAMES, name

pytestmark = pytest.mark.usefixtures("one_thread")


def _trace(model, b=2, t=6):
    idx = torch.randint(0, 257, (b, t), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model(idx, trace=True)


def test_name_table_builds_every_trace_name(make_model):
    tr = _trace(make_model("tiny")).trace
    for concept, template in NAMES.items():
        if "{norm}" in template:
            keys = [name(concept, 1, "ln2"), name(concept, norm="ln_final")]
        else:
            keys = [name(concept, 1) if "{layer}" in template else name(concept)]
        for key in keys:
            assert key in tr or concept in ("pos_embed", "rope_angles", "mlp_up", "norm_rms"), key
    assert name("pattern", 3) == "blocks.3.attn.pattern" and name("norm_std", 2, "ln1") == "blocks.2.ln1.std"
    with pytest.raises(ValueError, match="unknown trace concept"):
        name("patterns", 0)
    with pytest.raises(ValueError, match="give its layer index"):
        name("pattern")
    with pytest.raises(ValueError, match="choose ln1, ln2 or ln_final"):
        name("norm_mean", 0, "ln3")


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_accessors_equal_the_raw_entries(placement, make_model):
    out = _trace(make_model("tiny", norm_placement=placement))
    tr = out.trace
    for b in (0, 1):
        assert torch.equal(tr.pattern(1, b), tr["blocks.1.attn.pattern"][b])
        assert torch.equal(tr.attention_row(0, 1, 4, b), tr["blocks.0.attn.pattern"][b, 1, 4])
        streams = tr.residual_streams(b)
        assert [label for label, _ in streams] == ["embed", "after block 0", "after block 1"]
        torch.testing.assert_close(streams[0][1], tr["blocks.0.resid_pre"][b], atol=0, rtol=0)
        for i in range(2):  # leaving block i: what the block returned
            assert torch.equal(streams[i + 1][1], tr[f"blocks.{i}.resid_post"][b])
        stats = tr.norm_stats(1, "ln2", b)
        assert set(stats) == {"input", "output", "mean", "std"}
        assert torch.equal(stats["std"], tr["blocks.1.ln2.std"][b])
        assert torch.equal(stats["input"], tr["blocks.1.ln2.input"][b])
        for pos in (0, 3, 5, -1):
            torch.testing.assert_close(tr.logits_at(pos, b), out.logits[b, pos], atol=1e-5, rtol=0)
    if placement == "pre":
        assert set(tr.norm_stats(None, "ln_final")) == {"input", "output", "mean", "std"}
    assert tr.n_layers() == 2


def test_rmsnorm_stats_and_range_errors(make_model):
    tr = _trace(make_model("tiny", norm="rmsnorm")).trace
    assert set(tr.norm_stats(0, "ln1")) == {"input", "output", "rms"}
    for call, match in (
        (lambda: tr.pattern(2), "layer 2 does not exist"),
        (lambda: tr.pattern(0, 2), "batch 2"),
        (lambda: tr.attention_row(0, 2, 0), "head 2"),
        (lambda: tr.logits_at(6), "position 6"),
        (lambda: tr.norm_stats(None, "ln1"), "layer -1 does not exist"),
    ):
        with pytest.raises(ValueError, match=match):
            call()
