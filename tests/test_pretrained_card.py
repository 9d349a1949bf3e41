"""tfm.train.pretrained_card: the card's figures are the models' own, measured by the command."""

from __future__ import annotations

import json

import pytest

import tfm
from tfm.train import pretrained_card
from tfm.train.data import EvalText

pytestmark = pytest.mark.usefixtures("one_thread")
SPEC = 'random:{"preset":"tiny","config":{"context_length":128},"seed":3}'


def test_card_holds_each_models_bits_per_byte_and_heads(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / pretrained_card.EVAL_FILE).write_text("Once upon a time there was a cat. " * 1400, encoding="utf-8")
    pretrained_card.main(
        [SPEC, "--beside", "default", "--corpus", str(corpus), "--eval-bytes", "3000", "--out", str(tmp_path / "card")]
    )
    card = json.loads((tmp_path / "card" / "card.json").read_text())
    for spec in (SPEC, "default"):
        lm = tfm.load(spec)
        want = EvalText(corpus / pretrained_card.EVAL_FILE, lm.tokenizer, 3000, min(lm.config.context_length, 512))
        assert card[spec]["bits_per_byte"] == pytest.approx(want.bits_per_byte(lm.model, "cpu"), rel=1e-6)
        assert len(card[spec]["heads"]["induction"]) == lm.config.n_layer
    text = (tmp_path / "card" / "README.md").read_text()
    assert f"{card[SPEC]['bits_per_byte']:.3f}" in text and f"{card['default']['bits_per_byte']:.3f}" in text
