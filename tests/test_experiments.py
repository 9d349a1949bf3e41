"""The experiments return what they claim."""

from __future__ import annotations

import statistics

import pytest
import torch

from tfm.teach import experiments as ex
from tfm.analysis.norms import depth_norms


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: tiny tensors, one thread


def test_unscaled_softmax_saturates_as_d_k_grows():
    res = ex.softmax_scaling(d_ks=(4, 64, 1024))
    raw, scaled = res["unscaled"], res["scaled"]
    assert torch.all(raw["max_weight"].diff() > 0) and torch.all(raw["entropy"].diff() < 0)
    assert float(raw["max_weight"][-1]) > 0.9 > 0.3 > float(scaled["max_weight"].max())
    assert float(raw["grad_norm"][-1]) < 0.3 * float(scaled["grad_norm"][-1])
    # with the scaling nothing depends much on d_k
    assert float(scaled["entropy"].max() / scaled["entropy"].min()) < 1.1
    torch.testing.assert_close(scaled["score_std"], torch.ones(3), atol=0.1, rtol=0)
    torch.testing.assert_close(raw["score_std"], torch.tensor([2.0, 8.0, 32.0]), rtol=0.1, atol=0)


def test_no_residual_gradient_is_much_smaller_at_the_first_layer():
    res = ex.residual_gradients(n_layers=50)
    assert res["plain"].shape == res["residual"].shape == (50,)
    assert res["plain_first"] < 1e-4 * res["residual_first"]
    assert float(res["residual"].max() / res["residual"].min()) < 3  # residual: even across depth
    assert float(res["plain"][-1] / res["plain"][0]) > 1e4  # plain: decays toward the input


def test_norm_placement_reuses_depth_norms():
    res = ex.norm_placement_depth(n_layer=12)
    ids = list(ex.DEFAULT_TEXT.encode())
    for variant in ("pre", "post"):
        cfg = res["config"] if variant == "pre" else res["config"].replace(norm_placement="post")
        want = depth_norms(cfg, ids, 0)
        torch.testing.assert_close(res[variant].resid_norm, want.resid_norm)
        torch.testing.assert_close(res[variant].grad_norm, want.grad_norm)
        assert res[variant].resid_norm.shape == (13,)
    # post-norm: every block ends in a LayerNorm with unit gain: per-token norm sqrt(d_model)
    torch.testing.assert_close(res["post"].resid_norm[1:], torch.full((12,), 8.0), atol=1e-3, rtol=0)
    assert float(res["pre"].resid_norm[1:].max()) < 4.0


def test_layernorm_and_batchnorm_normalise_different_axes():
    res = ex.norm_axes()
    x = res["x"]
    torch.testing.assert_close(res["layernorm_row_mean"], torch.zeros(6), atol=1e-5, rtol=0)
    torch.testing.assert_close(res["layernorm_row_std"], torch.ones(6), atol=1e-3, rtol=0)
    torch.testing.assert_close(res["batchnorm_col_mean"], torch.zeros(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(res["batchnorm_col_std"], torch.ones(4), atol=1e-3, rtol=0)
    assert float(res["layernorm_col_mean"].abs().max()) > 0.5  # the other axis is left alone
    assert float(res["batchnorm_row_mean"].abs().max()) > 0.1
    manual = (x - x.mean(1, keepdim=True)) / (x.var(1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    torch.testing.assert_close(res["layernorm"], manual, atol=1e-5, rtol=1e-5)
    manual_bn = (x - x.mean(0)) / (x.var(0, unbiased=False) + 1e-5).sqrt()
    torch.testing.assert_close(res["batchnorm"], manual_bn, atol=1e-5, rtol=1e-5)


def test_norm_timing_reports_medians_of_its_samples():
    res = ex.norm_timing(shape=(4, 16, 64), repeats=5)
    assert len(res["names"]) == 4
    for name in res["names"]:
        samples = res["samples_ms"][name]
        assert len(samples) == 5 and all(s > 0 for s in samples)
        assert res["median_ms"][name] == statistics.median(samples)
    x = torch.randn(3, 8)
    torch.testing.assert_close(ex._rmsnorm_explicit(x, torch.ones(8)), torch.nn.functional.rms_norm(x, (8,), eps=1e-5))
    torch.testing.assert_close(
        ex._layernorm_explicit(x, torch.ones(8), torch.zeros(8)), torch.nn.functional.layer_norm(x, (8,))
    )


@pytest.mark.parametrize("causal", [True, False])
def test_masks_zero_the_pattern_exactly(causal):
    res = ex.mask_demo(t=6, n_pad=2, causal=causal)
    mask, pattern = res["mask"], res["pattern"]
    assert res["keys_real"].tolist() == [True] * 4 + [False] * 2
    assert torch.all(pattern[~mask] == 0) and torch.all(pattern[mask] > 0)
    assert torch.all(res["masked_scores"][~mask] == float("-inf"))
    torch.testing.assert_close(res["masked_scores"][mask], res["scores"][mask])
    torch.testing.assert_close(pattern.sum(-1), torch.ones(6))
    future = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)
    assert bool((~mask[future]).all()) == causal
    assert not mask[:, 4:].any()
    with pytest.raises(ValueError, match="at least one real token"):
        ex.mask_demo(t=4, n_pad=4)


def test_head_split_shapes_come_from_the_trace():
    res = ex.head_split_shapes(64, 4)
    shapes = {s["name"].removeprefix("blocks.0."): tuple(s["shape"]) for s in res["steps"]}
    assert res["d_head"] == 16 and res["n_tokens"] == 5
    assert shapes == {
        "ln1.output": (1, 5, 64),
        "attn.qkv": (1, 5, 192),
        "attn.q": (1, 4, 5, 16),
        "attn.k": (1, 4, 5, 16),
        "attn.v": (1, 4, 5, 16),
        "attn.scores": (1, 4, 5, 5),
        "attn.pattern": (1, 4, 5, 5),
        "attn.z": (1, 4, 5, 16),
        "attn.z_merged": (1, 5, 64),
        "attn_out": (1, 5, 64),
    }
    assert tuple(ex.head_split_shapes(96, 12)["steps"][2]["shape"]) == (1, 12, 5, 8)
    with pytest.raises(ValueError, match="not divisible"):
        ex.head_split_shapes(64, 5)
    with pytest.raises(ValueError):
        ex.head_split_shapes(5000, 4)
