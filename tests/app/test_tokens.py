"""Tokens page: the table is the tokenizer's output, and odd text stays text."""

from __future__ import annotations

import pytest

from ui import models

from tests.app.conftest import open_page

PROMPTS = {
    "plain": "The cat sat on the mat.",
    "emoji_cjk": "Emoji 🙂🚀, CJK 你好世界 and テスト.",
    "endoftext": "end <|endoftext|> start",
    "html": "<img src=x onerror=alert(1)> <b>not bold</b> &amp;",
}


def lm():
    return models.load_lm(models.default_model_spec(), "cpu")


@pytest.mark.parametrize("name", list(PROMPTS))
def test_table_is_the_tokenizer_output(name):
    prompt = PROMPTS[name]
    tok = lm().tokenizer
    at = open_page("tokens", prompt)
    table = at.dataframe[0].value
    ids = tok.encode(prompt)
    assert table["id"].tolist() == ids
    assert table["position"].tolist() == list(range(len(ids)))
    assert table["piece"].tolist() == [tok.display_piece(t) for t in ids]
    assert table["bytes"].tolist() == [len(tok.piece_bytes(t)) for t in ids]
    assert sum(table["bytes"]) == len(prompt.encode("utf-8")), "the pieces cover every byte of the prompt"
    assert tok.eot_id not in ids, "typed <|endoftext|> is text, not the control token"


def test_pieces_are_readable():
    prompt = PROMPTS["plain"]
    at = open_page("tokens", prompt)
    pieces = at.dataframe[0].value["piece"].tolist()
    assert not any(" " in p for p in pieces), "spaces are shown as ␣"
    assert any(p.startswith("␣") for p in pieces)
    assert "".join(pieces).replace("␣", " ") == prompt


@pytest.mark.parametrize("name", list(PROMPTS))
def test_chip_strip_escapes_every_piece(name):
    import html

    prompt = PROMPTS[name]
    tok = lm().tokenizer
    at = open_page("tokens", prompt)
    body = at.get("html")[0].proto.body
    ids = tok.encode(prompt)
    assert body.count("<span ") == len(ids)
    for t in ids:
        assert html.escape(tok.display_piece(t)) in body
    if name == "html":
        assert "<img" not in body and "<b>" not in body and "&amp;" in body
