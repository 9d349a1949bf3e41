"""A shared server's refusals, as a browser meets them: each one explains itself and the app keeps
serving the previous model (the tokens page shows that model's token ids)."""

from __future__ import annotations

import json
import os
import pickle

import pytest

import tfm
from tfm.core.config import ModelConfig
from tfm.loaders.weights import save_model
from services import server
from ui.models import default_model_spec, load_lm, random_spec

from tests.app.conftest import APP, AppTest, allow_models, open_page, use_random

PROMPT = "Shared servers say no politely."
OUTSIDE = "is not inside a model folder this server allows"


def default_ids(text: str = PROMPT) -> list[int]:
    return load_lm(default_model_spec(), "cpu").tokenizer.encode(text)


def shown_ids(at: AppTest) -> list[int]:
    return at.dataframe[0].value["id"].tolist()


def errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def use_folder(at: AppTest, folder) -> AppTest:
    at.radio(key="sidebar.model_kind").set_value("folder").run()
    at.text_input(key="sidebar.folder").set_value(str(folder)).run()
    assert not at.exception, at.exception
    return at


@pytest.fixture
def models(tmp_path):
    """allowed/ (an allowed root) holding a tiny model; outside/ beside it with another."""
    lm = tfm.random_model(ModelConfig.preset("tiny"), seed=1)
    save_model(tmp_path / "allowed" / "tiny", lm.model, lm.tokenizer)
    save_model(tmp_path / "outside" / "tiny", lm.model, lm.tokenizer)
    allow_models(tmp_path / "allowed")
    return tmp_path


def test_a_too_large_random_model_is_refused_and_the_previous_one_stays():
    at = open_page("tokens", PROMPT)
    use_random(at, "tiny")
    tiny_ids = tfm.random_model("tiny").tokenizer.encode(PROMPT)
    assert shown_ids(at) == tiny_ids
    use_random(at, "tiny", n_layer=48, d_model=8192, n_head=64, d_ff=32768)
    msg = " ".join(errors(at))
    assert "Not built" in msg and "parameters" in msg and "over this server's limit of 2 GB" in msg, msg
    assert "make n_layer, d_model, d_ff or vocab_size smaller" in msg
    assert shown_ids(at) == tiny_ids  # still the tiny model, not a 150 GB one


def test_the_limit_is_the_owners_choice():
    allow_models(max_model_bytes=100_000)  # as if started with --max-model-bytes 100kB
    at = open_page("tokens", PROMPT)
    use_random(at, "tfm-small")
    assert any("over this server's limit of 100 kB" in e for e in errors(at)), errors(at)
    assert shown_ids(at) == default_ids()


@pytest.mark.parametrize("probe", ["/etc", "/root/.ssh", "/etc/passwd", "/no/such/folder"])
def test_a_folder_outside_the_roots_gets_one_message(probe):
    at = use_folder(open_page("tokens", PROMPT), probe)
    msg = [e for e in errors(at) if OUTSIDE in e]
    assert len(msg) == 1, errors(at)
    assert msg[0].replace(probe, "<P>") == (
        "Could not load model folder <P>: '<P>' is not inside a model folder "
        "this server allows (assets/models, models); "
        "put the model in one of those folders, or start the app with its folder "
        "allowed (README, 'Running for a class')"
    )
    assert str(server.APP_ROOT) not in " ".join(errors(at)), "no server path the user did not type"
    assert not any(w in " ".join(errors(at)) for w in ("does not exist", "is a file", "is not a model folder"))
    assert any("previous model" in i.value for i in at.info)
    assert shown_ids(at) == default_ids()


def test_dotdot_and_symlink_escapes_are_refused_but_the_root_loads(models):
    os.symlink(models / "outside" / "tiny", models / "allowed" / "link")
    tiny_ids = tfm.load(models / "allowed" / "tiny").tokenizer.encode(PROMPT)
    for escape in (models / "allowed" / ".." / "outside" / "tiny", models / "allowed" / "link"):
        at = use_folder(open_page("tokens", PROMPT), escape)
        assert any(OUTSIDE in e for e in errors(at)), errors(at)
        assert shown_ids(at) == default_ids()
    at = use_folder(open_page("tokens", PROMPT), models / "allowed" / "tiny")
    assert not errors(at) and shown_ids(at) == tiny_ids


@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")  # torch says it while refusing the file
def test_a_pickle_ckpt_in_an_allowed_folder_is_refused_without_running(models):
    marker = models / "ran"

    class Touch:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (models / "allowed" / "evil").mkdir()
    (models / "allowed" / "evil" / "ckpt.pt").write_bytes(pickle.dumps({"model": Touch(), "model_args": {}}))
    at = use_folder(open_page("tokens", PROMPT), models / "allowed" / "evil")
    assert any("Could not load model folder" in e for e in errors(at)), errors(at)
    assert not marker.exists()
    assert shown_ids(at) == default_ids()


def link(page: str, **params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for name, value in {"prompt": PROMPT, **params}.items():
        at.query_params[name] = value
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, at.exception
    return at


def test_a_link_with_a_huge_random_model_opens_the_default():
    cfg = ModelConfig.preset("gpt2", n_layer=1000, d_model=65536, n_head=64, vocab_size=1_000_000)
    at = link("tokens", model=random_spec(cfg, seed=0))
    assert any("The link's random model was not built" in e and "parameters" in e for e in errors(at)), errors(at)
    assert at.radio(key="sidebar.model_kind").value == "default"
    assert shown_ids(at) == default_ids()


def test_a_link_with_sizes_beyond_the_widgets_or_a_bad_seed_opens_the_default():
    cfg = ModelConfig.preset("tiny", vocab_size=151_936, d_model=2)  # Qwen2.5's vocabulary: the widget holds it
    at = link("tokens", model=random_spec(cfg, seed=0))
    assert not errors(at) and at.number_input(key="sidebar.vocab_size").value == 151_936, errors(at)
    spec = "random:" + json.dumps({"config": ModelConfig.preset("tiny").to_dict(), "seed": 2**40})
    at = link("tokens", model=spec, seed=str(10**12))
    assert any("seed=1,099,511,627,776 is out of range" in e for e in errors(at)), errors(at)
    assert any("Ignored the link's seed=1000000000000" in w.value for w in at.warning)
    assert shown_ids(at) == default_ids()


def test_a_link_to_a_folder_outside_the_roots_opens_the_default(models):
    at = link("tokens", model=f"path:{models / 'outside' / 'tiny'}")
    assert any("The link's model folder was not opened" in e and OUTSIDE in e for e in errors(at)), errors(at)
    assert shown_ids(at) == default_ids()


def test_a_link_with_a_huge_prompt_is_cut_to_the_limit():
    allow_models(max_prompt_chars=50)
    at = link("tokens", prompt="ab " * 10_000)
    assert any("this server takes at most 50" in w.value for w in at.warning)
    assert at.text_area(key="sidebar.prompt").value == ("ab " * 10_000)[:50]
    assert shown_ids(at) == default_ids(("ab " * 10_000)[:50])


def test_new_tokens_beyond_the_limit_are_not_generated():
    allow_models(max_new_tokens=5)
    at = open_page("generate", PROMPT)
    assert at.number_input(key="gen.max_new").max == 5 and at.number_input(key="gen.max_new").value == 5
    at.number_input(key="gen.max_new").set_value(100_000)
    at.button(key="gen.run").click().run()
    assert not at.exception, at.exception
    last = at.session_state["gen.last"]
    assert last["done"] and 1 <= len(last["samples"][0]) <= 5


def test_training_steps_beyond_the_limit_are_refused():
    allow_models(max_train_steps=20)
    at = open_page("encdec")
    assert at.number_input(key="encdec.steps").value == 20
    at.session_state["encdec.steps"] = 3000  # what a crafted client could send
    at.button(key="encdec.train").click().run()
    assert not at.exception, at.exception
    assert 10 <= len(at.session_state["encdec.result"]["losses"]) <= 20  # trained, within the limit


def test_the_encdec_folder_box_is_restricted_too(models):
    at = open_page("encdec")
    at.text_input(key="encdec.folder").set_value("/etc").run()
    at.button(key="encdec.load").click().run()
    assert not at.exception, at.exception
    assert any(OUTSIDE in e for e in errors(at)), errors(at)


def test_a_generation_too_large_to_keep_is_refused():
    allow_models(max_generation_bytes=10_000)
    at = open_page("generate", PROMPT)
    at.button(key="gen.run").click().run()
    assert not at.exception, at.exception
    assert any("Not generated" in e and "over this server's limit of 10 kB" in e for e in errors(at)), errors(at)
    assert "gen.last" not in at.session_state
