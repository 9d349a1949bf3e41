"""The LayerNorm page's caption on a norm's output says what is true for that norm's kind, checked
against the statistics of a real `Norm` of each kind on random input."""

from __future__ import annotations

import pytest
import torch

from tfm import ModelConfig
from tfm.core.norm import Norm
from tfm.viz.norms import output_caption


def _out(norm: str, bias: bool) -> tuple[Norm, ModelConfig, torch.Tensor]:
    cfg = ModelConfig(vocab_size=64, context_length=8, d_model=64, n_layer=1, n_head=4, d_ff=64, norm=norm, bias=bias)
    gen = torch.Generator().manual_seed(0)
    layer = Norm(cfg)
    with torch.no_grad():
        layer.weight.copy_(1.5 + 0.1 * torch.randn(64, generator=gen))
        if layer.bias is not None:
            layer.bias.copy_(0.7 + 0.1 * torch.randn(64, generator=gen))
        x = 3.0 + 5.0 * torch.randn(200, 64, generator=gen)  # tokens of different means and sizes
        return layer, cfg, layer(x)


@pytest.mark.parametrize(("norm", "bias"), [("layernorm", True), ("layernorm", False), ("rmsnorm", True)])
def test_the_output_caption_says_what_the_norm_does(norm, bias):
    layer, cfg, out = _out(norm, bias)
    text, mean = output_caption(cfg), out.mean(dim=-1)
    if layer.bias is not None:  # a LayerNorm with a bias: every token's mean near the bias's mean
        assert "bias's mean" in text and torch.allclose(mean, layer.bias.mean().expand_as(mean), atol=0.05)
    elif norm == "layernorm":  # no bias: centred
        assert "mean ≈ 0" in text and mean.abs().max() < 0.05
    else:  # an RMSNorm has no bias (even with cfg.bias) and pins no mean: tokens' means spread
        assert layer.bias is None and "bias's mean" not in text and "not pinned" in text
        assert mean.std() > 0.1
        rms = out.pow(2).mean(dim=-1).sqrt()
        assert torch.allclose(rms, layer.weight.pow(2).mean().sqrt().expand_as(rms), rtol=0.1)
