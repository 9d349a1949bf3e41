"""tfm.core.lazy's sizes and what its pass computes: block and trace byte estimates equal the
shape trace (key/value heads counted), the block parameter walk equals nn.Module's, and the lazy
pass computes no norm statistics it does not keep."""

from __future__ import annotations

import pytest
import torch

from tests.test_lazy_trace import FAMILY, ids, lazy_trace, variant
from tfm.core import lazy as lazy_module
from tfm.core.config import ModelConfig
from tfm.core.trace import estimate_block_bytes

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread


def test_gpt2_shape_block_estimate():
    cfg = ModelConfig.preset("gpt2")
    assert estimate_block_bytes(cfg, 1024) == 1024 * (10 * 768 + 12 * 1024 + 4 + 2 * 3072) * 4
    assert lazy_module.LazyTrace.max_lazy_bytes >= estimate_block_bytes(cfg, 1024)  # one GPT-2 block fits


@pytest.mark.parametrize("i", range(0, 64, 5))
def test_trace_byte_estimate_equals_the_shape_trace(i):
    from tfm.analysis.shapes import shape_trace
    from tfm.core.trace import estimate_trace_bytes

    cfg = ModelConfig.preset("tiny", **variant(i))
    shapes = shape_trace(cfg, [1, 2, 3], 2, 9)
    assert estimate_trace_bytes(cfg, 9, batch=2) == sum(4 * torch.Size(e.shape).numel() for e in shapes if e.stored)


@pytest.mark.parametrize("extra", FAMILY, ids=["gqa", "partial-rotary-parallel", "qkv-bias-llama3", "gemma3"])
def test_byte_estimates_count_key_value_heads(extra, make_model):
    from tfm.analysis.shapes import shape_trace
    from tfm.core.trace import estimate_trace_bytes

    cfg = ModelConfig.preset("tiny", **extra)
    shapes = shape_trace(cfg, [1, 2, 3], 2, 9)
    assert estimate_trace_bytes(cfg, 9, batch=2) == sum(4 * torch.Size(e.shape).numel() for e in shapes if e.stored)
    tr = lazy_trace(make_model("tiny", **extra), ids())
    stored = tr.nbytes
    tr["blocks.0.attn.pattern"]
    assert tr.nbytes - stored == estimate_block_bytes(cfg, 7, batch=2)


@pytest.mark.parametrize("extra", FAMILY, ids=["gqa", "partial-rotary-parallel", "qkv-bias-llama3", "gemma3"])
def test_block_parameter_walk_equals_nn_module_parameters(extra, make_model):
    model = make_model("tiny", **extra)
    for block in model.blocks:
        assert [id(p) for p in lazy_module._parameters(block)] == [id(p) for p in block.parameters()]


class _CountPow(torch.overrides.TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += func in (torch.Tensor.pow, torch.pow)
        return func(*args, **(kwargs or {}))


def test_the_lazy_pass_computes_no_norm_statistics_it_does_not_keep(make_model):
    """An RMSNorm's rms and normalized stream are listed, not computed, in the lazy pass (a
    (T, D) pass each, per norm); reading them recomputes the block, equal to the eager trace."""
    model = make_model("tiny", norm="rmsnorm")
    idx = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        with _CountPow() as counted:
            out = model(idx, trace=True, keep=("pattern",))
        assert counted.calls == 1  # the final norm's, which the lazy trace keeps (2 per block before)
        eager = model(idx, trace=True, lazy=False).trace
        for name in ("blocks.1.ln1.rms", "blocks.0.ln2.normalized", "ln_final.rms"):
            assert torch.equal(out.trace[name], eager[name]), name
