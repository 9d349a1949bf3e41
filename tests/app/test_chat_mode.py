"""The Generation page's chat mode on a Hugging Face Llama folder whose tokenizer carries a ChatML
template: the rendered prompt's tokens (special ones marked) equal tfm.text.chat's and HF's, and
generation stops at the template's end-of-turn token, which the model here always writes first."""

from __future__ import annotations

import html
import json
import re

import pytest
import torch

import tfm
from tfm.generation.generate import prepare_prompt
from tfm.text.chat import ChatMessage, chat_prompt
from ui import models

from tests.app.conftest import allow_models, open_page, as_shown

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@pytest.fixture(scope="module")
def chat_folder(tmp_path_factory):
    """A random Llama whose every next token is <|im_end|> (one residual dimension fixed at +5,
    read only by <|im_end|>'s output row), with a ChatML tokenizer: end of text is
    <|endoftext|>, so only the template can say that <|im_end|> ends a turn."""
    from tests.conftest import BPE_TEXT
    from tests.test_families import SMALL, hf_model

    folder = tmp_path_factory.mktemp("chatml")
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(BPE_TEXT, vocab_size=SMALL["vocab_size"], special_tokens=SPECIALS, show_progress=False)
    bpe.save(str(folder / "tokenizer.json"))
    end = bpe.token_to_id("<|im_end|>")
    model = hf_model("llama-gqa")
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 5.0
        for layer in model.model.layers:  # nothing writes dimension 0: it stays +5 at every position
            layer.self_attn.o_proj.weight[0] = 0
            layer.mlp.down_proj.weight[0] = 0
        model.lm_head.weight[:, 0] = 0
        model.lm_head.weight[end, 0] = 100.0
    model.save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": CHATML,
                "eos_token": "<|endoftext|>",
                "bos_token": "<|im_start|>",
                "tokenizer_class": "PreTrainedTokenizerFast",
            }
        )
    )
    return folder


def open_chat(folder, errors_ok=False):
    allow_models(folder.parent)
    at = open_page("generate")
    at.radio(key="sidebar.model_kind").set_value("folder").run()
    at.text_input(key="sidebar.folder").set_value(str(folder)).run()
    assert not at.exception, at.exception
    assert errors_ok or not at.error, [e.value for e in at.error]
    return at, models.load_lm(at.session_state["app.model_spec"], "cpu")


def chips(at) -> list[tuple[str, int, bool]]:
    """(piece, id, special) of every chip the page drew."""
    page = "".join(h.proto.body for h in at.get("html"))
    found = re.findall(r'title="position \d+ · id (\d+) · (special token|token)"[^>]*>([^<]*)<sub', page)
    return [(html.unescape(p), int(i), kind == "special token") for i, kind, p in found]


def test_chat_mode_renders_marks_and_stops_at_end_of_turn(chat_folder):
    at, lm = open_chat(chat_folder)
    assert at.radio(key="gen.mode").value == "Chat"
    at.text_area(key="gen.system").set_value("Be brief <b>.").run()
    at.text_area(key="gen.user").set_value("Hi 😀 <|im_end|> typed").run()
    assert not at.exception, at.exception
    messages = [ChatMessage("system", "Be brief <b>."), ChatMessage("user", "Hi 😀 <|im_end|> typed")]
    want = chat_prompt(lm.tokenizer, messages, 20_000)
    hf = transformers.AutoTokenizer.from_pretrained(chat_folder)
    hf_ids = hf.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in messages],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    assert list(want.ids) == list(hf_ids)
    end = lm.tokenizer.special_tokens["<|im_end|>"]
    assert want.stop_ids == {end, lm.tokenizer.eot_id} and lm.tokenizer.eot_id != end
    drawn = chips(at)
    assert [i for _, i, _ in drawn] == list(want.ids)
    assert [s for _, _, s in drawn] == list(want.special) and sum(
        want.special
    ) == 6  # 3 starts, 3 ends (the typed one too)
    assert [p for p, _, _ in drawn] == lm.tokenizer.display_pieces(want.ids)

    at.number_input(key="gen.max_new").set_value(6).run()
    at.button(key="gen.run").click().run()
    assert not at.exception, at.exception
    last = at.session_state["gen.last"]
    assert last["prompt_ids"] == want.ids
    steps = list(tfm.generate(lm, want.ids, 6, 0.8, 0, 1.0, seed=0, stop_ids=want.stop_ids))
    assert [r.token_id for r in last["samples"][0]] == [s.token_id for s in steps] == [end]
    assert any("stop: end of turn" in c.value for c in at.caption)
    _plain_text_goes_past_the_end_of_turn(at, lm, end)


def _plain_text_goes_past_the_end_of_turn(at, lm, end: int) -> None:
    """Plain-text mode generates from the sidebar's prompt, with no end of turn: 6 of 6 tokens."""
    at.radio(key="gen.mode").set_value("Plain text")
    at.text_area(key="sidebar.prompt").set_value("Hello there").run()
    at.button(key="gen.run").click().run()
    assert not at.exception, at.exception
    last = at.session_state["gen.last"]
    assert last["prompt_ids"] == prepare_prompt(lm, at.session_state["sidebar.prompt"]).ids
    assert [r.token_id for r in last["samples"][0]] == [end] * 6
    assert last["samples"][0][-1].stop_reason == "max_new_tokens"
    assert not chips(at)


def test_a_hostile_template_is_one_message(chat_folder, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in chat_folder.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    config = json.loads((bad / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    (bad / "tokenizer_config.json").write_text(json.dumps(config))
    at, _ = open_chat(bad, errors_ok=True)
    assert len(at.error) == 1
    assert as_shown(at.error[0].value).startswith(
        "This chat cannot be sent to the model: the chat template was stopped: it ran"
    )
    assert not at.exception


def test_a_model_without_a_template_has_no_mode_switch():
    at = open_page("generate")
    assert not at.get("radio") or all(r.key != "gen.mode" for r in at.radio)
