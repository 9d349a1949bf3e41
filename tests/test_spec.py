"""tfm.loaders.spec: every model spec form reads back as what was written, old link forms keep their
meaning, and bad or oversized specs are refused with a message saying what is allowed."""

from __future__ import annotations

import json

import pytest
import torch

import tfm
from tfm.core.config import PRESETS, ModelConfig
from tfm.loaders.spec import MAX_SPEC_CHARS, ModelSpec, format_spec, parse_spec, random_spec

SPECS = [
    ModelSpec(),
    ModelSpec("folder", path="/models/my model"),
    random_spec(ModelConfig.preset("gpt2")),
    random_spec(ModelConfig.preset("gpt2"), seed=7),
    random_spec(ModelConfig.preset("gpt2", n_layer=4, rope_original_context=4096), seed=1, preset="gpt2"),
    random_spec(ModelConfig.preset("gpt2", n_layer=4), seed=1),  # custom
    random_spec(ModelConfig.preset("tiny", d_model=24, n_head=3, norm_eps=1e-6)),  # custom: no preset given
    random_spec(ModelConfig.preset("gpt2"), preset="tiny"),  # tiny with gpt2's sizes
    random_spec(ModelConfig.preset("tiny", d_model=32, n_head=4, n_kv_head=2), preset="tiny"),  # tiny's n_kv_head kept
    random_spec(ModelConfig.preset("gpt2", n_head=4), preset="gpt2"),  # n_kv_head follows n_head
    *(random_spec(ModelConfig.preset(p)) for p in PRESETS),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: format_spec(s)[:60])
def test_specs_round_trip(spec):
    text = format_spec(spec)
    assert parse_spec(text) == spec
    assert format_spec(parse_spec(text)) == text
    assert len(text) < MAX_SPEC_CHARS


def test_short_forms_and_presets():
    assert format_spec(random_spec(ModelConfig.preset("gpt2"))) == "random:gpt2"
    assert (
        format_spec(random_spec(ModelConfig.preset("gpt2", n_layer=4), seed=2, preset="gpt2"))
        == 'random:{"config":{"n_layer":4},"preset":"gpt2","seed":2}'
    )
    custom = random_spec(ModelConfig.preset("tiny", d_model=24, n_head=3))
    assert (
        custom.preset is None
        and json.loads(format_spec(custom).removeprefix("random:"))["config"] == custom.config.to_dict()
    )
    assert random_spec(ModelConfig.preset("llama-tiny")).preset == "llama-tiny"  # named by equality


def test_old_link_forms_keep_their_meaning():
    """The app wrote random:{"config": every field, "seed": n} (spaces, no preset) before."""
    cfg = ModelConfig.preset("gpt2")
    old = "random:" + json.dumps({"config": cfg.to_dict(), "seed": 3}, sort_keys=True)
    assert parse_spec(old) == ModelSpec("random", config=cfg, seed=3, preset="gpt2")
    odd = ModelConfig.preset("tiny", n_layer=3)
    spec = parse_spec("random:" + json.dumps({"config": odd.to_dict(), "seed": 0}))
    assert spec.config == odd and spec.preset is None
    assert parse_spec("path:/a/b") == ModelSpec("folder", path="/a/b") and parse_spec("default") == ModelSpec()
    assert parse_spec("/a/b", bare_path=True) == ModelSpec("folder", path="/a/b")


def test_load_reads_every_form_the_same_way():
    cfg = ModelConfig.preset("tiny", n_layer=3)
    a = tfm.load(format_spec(random_spec(cfg, seed=5)), device="cpu")
    b = tfm.random_model(cfg, seed=5)
    assert a.config == cfg and a.source == format_spec(random_spec(cfg, seed=5)) == b.source
    for (name, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(x, y), name
    assert tfm.load("random:tiny", device="cpu").source == "random:tiny"


@pytest.mark.parametrize(
    "text, message",
    [
        ("nonsense", 'is not known; use default, smollm2, minilm, gemma3, random:<preset>, random:{"preset"'),
        ("random:huge", "unknown preset 'huge'"),
        ("random:{", "not valid JSON"),
        ('random:{"config":' + "[" * 3000, "not valid JSON"),
        ("random:" + "x" * 3000, "unknown preset 'xxx"),
        ("random:[1]", "must be a JSON object"),
        ('random:{"preset":"tiny","evil":1}', "unknown keys ['evil']"),
        ('random:{"preset":"tiny","config":{"n_layers":2}}', "could not be read"),
        ('random:{"config":{"n_layer":2}}', "missing required keys"),
        ('random:{"preset":"tiny","seed":-1}', "seed=-1 is out of range; it must be between 0 and"),
        ('random:{"preset":"tiny","seed":"1"}', "seed must be an integer between 0 and"),
        ('random:{"preset":3}', "preset must be a preset's name"),
        ('random:{"preset":"tiny","config":[]}', "config must be a JSON object"),
        ("random:{}", 'needs a "preset", a "config"'),
        ("path:  ", "names no folder"),
        (
            "random:" + json.dumps({"preset": "tiny", "config": {"n_layer": 1}, "x": "a" * MAX_SPEC_CHARS}),
            f"at most {MAX_SPEC_CHARS:,} are read",
        ),
    ],
)
def test_bad_specs_say_what_is_allowed(text, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        parse_spec(text)
    with pytest.raises(ValueError):
        ModelSpec("random")
