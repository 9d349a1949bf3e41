"""Parity with Hugging Face for BERT (tfm.loaders.convert.bert): bidirectional encoders with a
WordPiece tokenizer.json give the fill-mask logits, hidden states and attention patterns of
`transformers`' own; what tfm cannot build is refused by name."""

from __future__ import annotations

import pytest
import torch

import tfm
from tests.conftest import BPE_TEXT
from tests.test_families import SMALL, rewrite_config, save

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread", "every_product_onednn")

BERT_CASES = {"bert-masked-lm": "BertForMaskedLM", "bert-model": "BertModel"}


@pytest.fixture(scope="module")
def wordpiece_folder(tmp_path_factory):
    """A WordPiece tokenizer.json (lower-casing, [CLS]/[SEP]/[MASK], the ## prefix) trained by the tokenizers library."""
    tokenizers = pytest.importorskip("tokenizers")
    folder = tmp_path_factory.mktemp("wordpiece")
    wp = tokenizers.BertWordPieceTokenizer(lowercase=True)
    wp.train_from_iterator(BPE_TEXT, vocab_size=SMALL["vocab_size"], min_frequency=1, show_progress=False)
    wp.save(str(folder / "tokenizer.json"))
    return folder


def bert_hf(arch: str, seed: int = 0):
    cfg = transformers.BertConfig(**SMALL, type_vocab_size=2, attn_implementation="eager")
    torch.manual_seed(seed)
    model = getattr(transformers, arch)(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.2 * noise if "LayerNorm" in name and name.endswith("weight") else 0.25 * noise)
    return model


@pytest.mark.parametrize("case", sorted(BERT_CASES))
def test_bert_fill_mask_logits_hidden_states_and_patterns_match_hf(case, wordpiece_folder, tmp_path):
    arch = BERT_CASES[case]
    hf = bert_hf(arch)
    lm = tfm.load(save(hf, tmp_path / case, wordpiece_folder), device="cpu")
    tok = lm.tokenizer
    assert (lm.config.causal, lm.config.lm_head) == (False, "masked" if arch == "BertForMaskedLM" else "none")
    rows = [
        tok.prompt_ids("the cat sat on the [MASK]. [SEP] the dog sat on the log."),
        tok.prompt_ids("hello [MASK], hello there!"),
    ]
    assert all(tok.mask_id in r for r in rows) and tok.sep_id == lm.config.sep_token_id
    width = max(map(len, rows))
    idx = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    types = torch.tensor([tok.segments(r) + [0] * (width - len(r)) for r in rows])
    with torch.inference_mode():
        want = hf(
            input_ids=idx, attention_mask=mask, token_type_ids=types, output_attentions=True, output_hidden_states=True
        )
        got = lm.model(idx, trace=True, attention_mask=mask, token_types=types)
    real = mask.bool()
    if arch == "BertForMaskedLM":  # fill-mask: every real position's logits, the [MASK] ones above all
        torch.testing.assert_close(got.logits[real], want.logits[real], atol=1e-4, rtol=0)
        at = idx == tok.mask_id
        assert torch.equal(got.logits[at].argmax(-1), want.logits[at].argmax(-1))
    else:
        torch.testing.assert_close(
            got.trace[f"blocks.{SMALL['num_hidden_layers'] - 1}.resid_post"][real],
            want.last_hidden_state[real],
            atol=1e-5,
            rtol=0,
        )
    hidden = want.hidden_states
    for i, pattern in enumerate(want.attentions):
        torch.testing.assert_close(got.trace[f"blocks.{i}.resid_post"][real], hidden[i + 1][real], atol=1e-5, rtol=0)
        keep = real[:, None, :, None].expand_as(pattern)
        torch.testing.assert_close(got.trace[f"blocks.{i}.attn.pattern"][keep], pattern[keep], atol=1e-5, rtol=0)


def test_bert_refuses_what_it_cannot_build(wordpiece_folder, tmp_path):
    folder = save(bert_hf("BertModel"), tmp_path / "bert", wordpiece_folder)
    rewrite_config(folder, lambda d: d.update(position_embedding_type="relative_key"))
    with pytest.raises(ValueError, match="position_embedding_type 'relative_key' is not supported"):
        tfm.load(folder, device="cpu")
    rewrite_config(folder, lambda d: d.update(position_embedding_type="absolute", is_decoder=True))
    with pytest.raises(ValueError, match="BERT decoder"):
        tfm.load(folder, device="cpu")
