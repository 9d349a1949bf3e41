"""The sidebar reads and writes model specs through tfm.loaders.spec: a link's random model shows the
preset it came from (or "custom"), its fields, and loads exactly the link's config."""

from __future__ import annotations

import json

from tfm.core.config import ModelConfig
from tfm.loaders.spec import format_spec, parse_spec, random_spec
from ui import models
from ui.sidebar import FIELDS

from tests.app.conftest import APP, AppTest, as_shown, use_random

PROMPT = "Links carry the model."
GPT2_SMALLER = dict(n_layer=2, d_model=64, n_head=4, n_kv_head=4, d_ff=256)  # GPT-2's shape, narrower


def link(spec: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["model"], at.query_params["prompt"] = spec, PROMPT
    at.switch_page("pages/tokens.py").run()
    assert not at.exception, at.exception
    return at


def shown(at: AppTest, cfg: ModelConfig, preset: str) -> None:
    """The sidebar shows `preset` and every field of `cfg`, and the tokens come from `cfg`'s model."""
    assert at.radio(key="sidebar.model_kind").value == "random"
    assert at.selectbox(key="sidebar.preset").value == preset
    for name in FIELDS:
        assert at.session_state[f"sidebar.{name}"] == getattr(cfg, name), name
    lm = models.load_lm(at.session_state["app.model_spec"], "cpu")
    assert lm.config == cfg
    assert at.dataframe[0].value["id"].tolist() == lm.tokenizer.encode(PROMPT)


def test_a_gpt2_shaped_link_shows_the_gpt2_preset():
    cfg = ModelConfig.preset("gpt2", **GPT2_SMALLER)
    spec = format_spec(random_spec(cfg, seed=4, preset="gpt2"))
    at = link(spec)
    shown(at, cfg, "gpt2")
    assert at.query_params["model"] == spec and parse_spec(spec).seed == 4


def test_an_old_full_config_link_names_its_preset_or_custom():
    tiny = ModelConfig.preset("tiny")
    at = link("random:" + json.dumps({"config": tiny.to_dict(), "seed": 0}, sort_keys=True))  # the old form
    shown(at, tiny, "tiny")
    assert at.query_params["model"] == "random:tiny"
    odd = ModelConfig.preset("tiny", n_layer=3, rope_original_context=4096)  # a field no widget holds
    at = link("random:" + json.dumps({"config": odd.to_dict(), "seed": 1}, sort_keys=True))
    shown(at, odd, "custom")
    assert parse_spec(at.query_params["model"]).config == odd


def test_a_preset_chosen_in_the_sidebar_travels_in_the_link():
    at = AppTest.from_file(APP, default_timeout=120)
    at.switch_page("pages/tokens.py").run()
    use_random(at, "gpt2", **GPT2_SMALLER)
    spec = parse_spec(at.session_state["app.model_spec"])
    assert spec.preset == "gpt2" and spec.config == ModelConfig.preset("gpt2", **GPT2_SMALLER)
    assert at.query_params["model"] == format_spec(spec)
    again = link(at.query_params["model"])
    assert again.selectbox(key="sidebar.preset").value == "gpt2"
    again.selectbox(key="sidebar.preset").set_value("tiny").run()  # another preset: its fields, its base
    assert not again.exception, again.exception
    assert parse_spec(again.session_state["app.model_spec"]) == random_spec(ModelConfig.preset("tiny"), preset="tiny")


def test_a_bad_or_oversized_link_spec_says_why_and_opens_the_default():
    for text, why in (
        ('random:{"preset":"tiny","evil":1}', "unknown keys ['evil']"),
        ("random:{" + " " * 5000 + "}", "at most 4,096 are read"),
        ("nonsense", "is not known"),
    ):
        at = link(text)
        warnings = [w.value for w in at.warning if "The link's model setting could not be read" in w.value]
        assert len(warnings) == 1 and why in as_shown(warnings[0]), [w.value for w in at.warning]
        assert at.radio(key="sidebar.model_kind").value == "default"
        assert at.session_state["app.model_spec"] == models.default_model_spec()


def test_every_model_known_by_name_is_described_in_words():
    """ui.models.describe_spec names each NAMED model (it raised AttributeError for gemma3, whose
    spec has no config, on the home page of the real model)."""
    from tfm.loaders.spec import NAMED

    words = {"default": "bundled", "smollm2": "SmolLM2", "minilm": "MiniLM", "gemma3": "Gemma 3"}
    assert set(words) == set(NAMED)
    for kind in NAMED:
        assert words[kind] in models.describe_spec(kind), kind
