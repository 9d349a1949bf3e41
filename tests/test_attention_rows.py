"""tfm.analysis.attention_rows.pattern_rows equals the trace's own pattern rows, in every variant."""

from __future__ import annotations

import itertools

import pytest
import torch

from tfm.analysis.attention_rows import pattern_rows
from tfm.core.config import ModelConfig
from tfm.core.model import GPT

VARIANTS = list(itertools.product(("learned", "sinusoidal", "rope", "none"), ("layernorm", "rmsnorm"), ("pre", "post")))


@pytest.mark.parametrize("pos,norm,placement", VARIANTS)
def test_rows_equal_the_traced_pattern(pos, norm, placement):
    cfg = ModelConfig.preset("tiny").replace(pos_encoding=pos, norm=norm, norm_placement=placement)
    model = GPT(cfg).eval()
    model.reset_parameters(torch.Generator().manual_seed(1))
    ids = torch.randint(0, cfg.vocab_size, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        trace = model(ids, trace=True).trace
    for layer, (start, stop) in itertools.product(range(cfg.n_layer), ((0, 30), (7, 19), (29, 30))):
        rows = pattern_rows(model, trace, layer, start, stop)
        torch.testing.assert_close(rows, trace.pattern(layer)[:, start:stop, :stop], rtol=1e-5, atol=1e-6)
        assert torch.all(rows.triu(start + 1) == 0)  # keys after each query: exactly 0


def test_bad_ranges_raise():
    model = GPT(ModelConfig.preset("tiny")).eval()
    with torch.inference_mode():
        trace = model(torch.zeros(1, 5, dtype=torch.long), trace=True).trace
    for layer, start, stop in ((9, 0, 5), (0, 3, 3), (0, 0, 6), (0, -1, 2)):
        with pytest.raises(ValueError):
            pattern_rows(model, trace, layer, start, stop)


def test_rows_of_local_layers_equal_the_traced_pattern():
    """Gemma 3's shape: local layers with a window shorter than the prompt and their own RoPE base,
    QK-norm, a query scale of its own; a global layer. Keys left of a local window get exactly 0."""
    cfg = ModelConfig.preset("tiny").replace(
        pos_encoding="rope",
        norm="rmsnorm",
        n_layer=3,
        n_head=4,
        n_kv_head=1,
        head_dim=16,
        qk_norm=True,
        post_norms=True,
        attn_scalar=7.0,
        sliding_window=6,
        local_layers=(0, 1),
        rope_local_base=50.0,
    )
    model = GPT(cfg, torch.Generator().manual_seed(1)).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        trace = model(ids, trace=True).trace
    for layer, (start, stop) in itertools.product(range(cfg.n_layer), ((0, 30), (17, 29))):
        rows = pattern_rows(model, trace, layer, start, stop)
        torch.testing.assert_close(rows, trace.pattern(layer)[:, start:stop, :stop], rtol=1e-5, atol=1e-6)
        if layer in cfg.local_layers:
            assert torch.all(rows.tril(start - cfg.sliding_window) == 0) and rows[:, -1, stop - 6 :].min() > 0
