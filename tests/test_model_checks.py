"""tfm.model's inputs and tfm.core.config's configs are validated: each bad value raises a
ValueError that says what is allowed; JSON configs name unknown and missing keys; presets
round-trip and an unknown one is named."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from tests.test_model import tokens
from tfm.core.config import PRESETS, ModelConfig
from tfm.core.model import GPT

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread


# ---- input validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.zeros(1, 0, dtype=torch.long), "empty"),
        (torch.zeros(0, 4, dtype=torch.long), "empty"),
        (torch.zeros(1, 33, dtype=torch.long), "33 positions exceed the context length 32"),
        (torch.tensor([[1, 257]]), r"token ids must be in \[0, 257\), got 1..257"),
        (torch.tensor([[-1, 3]]), r"token ids must be in \[0, 257\), got -1..3"),
        (torch.zeros(1, 4), "integer tensor of shape \\(batch, seq\\), got torch.float32"),
        (torch.zeros(1, 4, dtype=torch.bool), "integer tensor"),
        (torch.zeros(4, dtype=torch.long), r"shape \(batch, seq\), got torch.int64 \(4,\)"),
        (torch.zeros(1, 2, 3, dtype=torch.long), "shape \\(batch, seq\\)"),
        ([[1, 2, 3]], "must be a torch tensor"),
    ],
)
def test_bad_inputs_raise_clear_value_errors(bad, message):
    model = GPT(ModelConfig.preset("tiny")).eval()
    for trace in (False, True):
        with pytest.raises(ValueError, match=message):
            model(bad, trace=trace)


def test_int32_ids_are_accepted_and_match_int64(make_model):
    model = make_model("tiny")
    idx = tokens(1, 7)
    with torch.no_grad():
        torch.testing.assert_close(model(idx.int()).logits, model(idx).logits, atol=0, rtol=0)


# ---- config validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(d_model=15), "d_model=15 is not divisible by n_head=2; pick n_head among the divisors"),
        (
            dict(pos_encoding="alibi"),
            "pos_encoding='alibi' is not allowed; choose one of 'learned', 'sinusoidal', 'rope', 'none'",
        ),
        (dict(norm="batchnorm"), "norm='batchnorm' is not allowed; choose one of 'layernorm', 'rmsnorm'"),
        (dict(norm_placement="sandwich"), "choose one of 'pre', 'post'"),
        (dict(activation="tanh"), "choose one of 'gelu', 'gelu_tanh', 'relu', 'swiglu'"),
        (dict(d_model=-16), "d_model=-16 is out of range; it must be between 1 and 65,536"),
        (dict(n_layer=0), "n_layer=0 is out of range; it must be between 1 and"),
        (dict(n_head=-2), "n_head=-2 is out of range"),
        (dict(vocab_size=1), "vocab_size=1 is out of range; it must be between 2 and"),
        (dict(context_length=0), "context_length=0 is out of range"),
        (dict(d_ff=-1), "d_ff=-1 is out of range"),
        (dict(n_head=True), "n_head must be an integer between 1 and 1,024, got True"),
        (dict(d_model=16.0), "d_model must be an integer between 1 and 65,536, got 16.0"),
        (dict(vocab_size="257"), "vocab_size must be an integer"),
        (dict(bias=1), "bias must be true or false, got 1"),
        (dict(tied_embeddings="yes"), "tied_embeddings must be true or false"),
        (dict(norm_eps=0.0), "norm_eps=0.0 must be a small positive number such as 1e-5"),
        (dict(norm_eps="1e-5"), "norm_eps must be a finite number, got '1e-5'"),
        (dict(norm_eps=True), "norm_eps must be a finite number"),
        (dict(dropout=1.0), "dropout=1.0 must be in [0, 1)"),
        (dict(dropout=-0.1), "must be in [0, 1)"),
        (dict(dropout=None), "dropout must be a finite number, got None"),
        (dict(rope_base=1.0), "rope_base=1.0 must be greater than 1"),
        (dict(rope_base=float("nan")), "rope_base must be a finite number"),
        (dict(pos_encoding="rope", d_model=18), "RoPE rotates pairs of dimensions: d_model/n_head=9 must be even"),
        (dict(pos_encoding="sinusoidal", d_model=15, n_head=1), "d_model=15 must be even"),
    ],
)
def test_bad_configs_raise_value_errors_that_say_what_is_allowed(changes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ModelConfig.preset("tiny", **changes)
    with pytest.raises(ValueError):
        ModelConfig.preset("tiny").replace(**changes)


def test_from_dict_rejects_unknown_and_missing_keys_and_non_objects():
    good = ModelConfig.preset("tiny").to_dict()
    assert ModelConfig.from_dict(good) == ModelConfig.preset("tiny")
    with pytest.raises(ValueError, match=r"unknown config keys \['n_embd'\]; allowed keys are \[.*'d_model'.*\]"):
        ModelConfig.from_dict({**good, "n_embd": 16})
    with pytest.raises(ValueError, match=r"missing required keys \['d_ff', 'n_head'\]"):
        ModelConfig.from_dict({k: v for k, v in good.items() if k not in ("d_ff", "n_head")})
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        ModelConfig.from_dict([good])
    with pytest.raises(ValueError, match="must be a JSON object, got NoneType"):
        ModelConfig.from_dict(None)
    with pytest.raises(ValueError, match="choose one of"):
        ModelConfig.from_dict({**good, "activation": "GELU"})


def test_presets_build_round_trip_and_unknown_presets_are_named():
    for name, values in PRESETS.items():
        cfg = ModelConfig.preset(name)
        assert ModelConfig.from_dict(cfg.to_dict()) == cfg
        assert all(getattr(cfg, k) == v for k, v in values.items())
    assert ModelConfig.preset("tiny", n_layer=3).n_layer == 3
    with pytest.raises(ValueError, match=r"unknown preset 'gpt3'; choose one of .*gpt2.*tiny"):
        ModelConfig.preset("gpt3")
    with pytest.raises(ValueError, match="n_head"):
        ModelConfig.preset("tiny", n_head=3)
    cfg = ModelConfig.preset("tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 32  # type: ignore[misc]
