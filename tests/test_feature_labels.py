"""SAE feature labels (tfm.analysis.dictionaries.labels): the shipped labels.json of the bundled SAE
equals a fresh computation; a "says X" label's X is the argmax of the decoder row read through
the final norm and the unembedding, recomputed here; an "on ..." label's first token is where
its top contexts peak; the search finds a feature by the token it says; the steering check is
recomputed through the Steer page's sweep; a damaged labels.json gets one clear message."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

import tfm
from tfm.analysis.dictionaries import labels as FL
from tfm.analysis.dictionaries import features as FT
from tfm.analysis.steering import vectors as steering

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def bundled():
    lm = tfm.load("default", device="cpu")
    return lm, FT.bundled(lm, "default")


@pytest.fixture(scope="module", params=["default", pytest.param("smollm2", marks=pytest.mark.slow)])
def each_sae(request):
    """Both shipped SAEs (SmolLM2's in the slow tier)."""
    lm = tfm.load(request.param, device="cpu")
    return lm, FT.bundled(lm, request.param)


def test_shipped_labels_equal_a_fresh_computation(bundled):
    lm, fs = bundled
    assert fs.labels is not None and len(fs.labels.features) == fs.sae.cfg.n_features
    again = FL.compute_labels(lm, fs, fs.labels.says_margin)
    for f, (shipped, fresh) in enumerate(zip(fs.labels.features, again.features)):
        assert (shipped.label, shipped.says_id, shipped.tokens) == (fresh.label, fresh.says_id, fresh.tokens), f
        assert shipped.margin == pytest.approx(fresh.margin, abs=2e-3)


def test_says_token_is_the_argmax_of_the_decoder_read_out(each_sae):
    lm, fs = each_sae
    n_vocab = min(lm.tokenizer.vocab_size, lm.config.vocab_size)
    gain = lm.model.ln_final.weight.float()
    scores = (fs.sae.W_dec.float() * gain) @ lm.model.unembed.weight.float()[:n_vocab].t()  # (F, V)
    if lm.model.ln_final.kind == "layernorm":  # centred, as the final LayerNorm reads a direction
        scores = (
            fs.sae.W_dec.float() * gain - (fs.sae.W_dec.float() * gain).mean(-1, keepdim=True)
        ) @ lm.model.unembed.weight.float()[:n_vocab].t()
    top = scores.topk(2, dim=-1)
    margin = (top.values[:, 0] - top.values[:, 1]) / scores.std(-1)
    ids, read = steering.reading_ids(lm, steering.NEUTRAL_TEXT, "neutral", cut=True)
    final = (
        lm.model(torch.tensor([ids]), trace=True).trace.residual_streams()[-1][1][read].float()
    )  # leaving the last block
    if lm.model.ln_final.kind == "layernorm":
        final = final - final.mean(-1, keepdim=True)
    rms = float(final.pow(2).mean(-1).sqrt().median())
    gain = fs.data["hist_max"].float() * (top.values[:, 0] - scores.mean(-1)) / rms  # nats at strength 1
    says = [f for f, lab in enumerate(fs.labels.features) if lab.says_id is not None]
    assert says, "the SAE has no 'says' label"
    want = (margin >= fs.labels.says_margin) & (gain >= fs.labels.says_gain)
    assert set(says) == set(want.nonzero().flatten().tolist())
    for f in says:
        lab = fs.labels.features[f]
        assert lab.says_id == int(top.indices[f, 0])
        assert lab.label == f"says '{lm.tokenizer.decode([lab.says_id])}'".replace("\n", "⏎")


def test_on_label_names_where_the_top_contexts_peak(bundled):
    lm, fs = bundled
    checked = 0
    for f, lab in enumerate(fs.labels.features[:200]):
        if lab.says_id is not None or float(fs.data["freq"][f]) == 0:
            continue
        peaks = [
            ids[int(acts.float().argmax())]
            for ids, acts in zip(fs.data["ctx_ids"][f].tolist(), fs.data["ctx_acts"][f])
            if max(ids) >= 0 and float(acts.float().max()) > 0
        ]
        token, n = Counter(peaks).most_common(1)[0]
        first = FL.piece(lm.tokenizer, token)
        assert lab.tokens[0] == first
        assert lab.label.startswith(f"on {first}") if 2 * n >= len(peaks) else lab.label.startswith("on ")
        checked += 1
    assert checked > 100


def test_search_finds_a_feature_by_the_token_it_says(bundled):
    lm, fs = bundled
    for f, lab in enumerate(fs.labels.features):
        if lab.says_id is not None:
            word = lm.tokenizer.decode([lab.says_id])
            found = fs.labels.search(word.upper() if word.strip() else word, 1000)
            if word.strip():
                assert f in found, (f, word)
                assert all(fs.labels.features[g].matches(word) for g in found)
    assert fs.labels.search("zzzz-no-such-token") == []
    with pytest.raises(ValueError, match="at most 80"):
        fs.labels.search("x" * 81)


def test_steering_check_recomputed_through_the_sweep(each_sae):
    """Each 'says X' label's check equals p(X) at strength 1 above strength 0 after every neutral
    prompt, recomputed with steering.sweep_tokens (the Steer page's sweep); at least 80% pass."""
    lm, fs = each_sae
    says = [f for f, lab in enumerate(fs.labels.features) if lab.says_id is not None]
    for f in says:
        x, vec = fs.labels.features[f].says_id, FT.steering_vector(fs, f)
        up = []
        for prompt in fs.labels.prompts:
            ids, _ = steering.reading_ids(lm, prompt, "check")
            p = steering.sweep_tokens(lm, ids, vec, [0.0, 1.0], [x])[:, 0]
            up.append(bool(p[1] > p[0]))
        assert fs.labels.features[f].check == all(up), f
    passed, checked = fs.labels.check_share()
    assert checked == len(says) and passed >= 0.8 * checked
    assert fs.card["labels"]["says_passed"] == passed and fs.card["labels"]["says_checked"] == checked


def _write(folder, data):
    (folder / FL.LABELS_FILE).write_text(json.dumps(data))


def test_damaged_labels_file_gets_one_message(tmp_path, bundled):
    lm, fs = bundled
    good = FL.labels_json(fs.labels)
    good["features"] = good["features"][:3]
    _write(tmp_path, good)
    assert [lab.label for lab in FL.read_labels(tmp_path, 3, 100_000).features] == [
        lab.label for lab in fs.labels.features[:3]
    ]
    assert FL.read_labels(tmp_path / "none", 3, 100) is None
    bad_cases = [
        ({**good, "features": good["features"][:2]}, "one entry per feature"),
        ({**good, "features": [{**good["features"][0], "label": "x" * 81}] + good["features"][1:]}, "at most 80"),
        ({**good, "features": [{**good["features"][0], "extra": 1}] + good["features"][1:]}, "exactly the keys"),
        (
            {**good, "features": [{**good["features"][0], "says": "'a'", "says_id": 10**9}] + good["features"][1:]},
            "says_id",
        ),
    ]
    for data, words in bad_cases:
        _write(tmp_path, data)
        with pytest.raises(ValueError, match=words) as err:
            FL.read_labels(tmp_path, 3, 100_000)
        assert FL.LABELS_FILE in str(err.value)
    (tmp_path / FL.LABELS_FILE).write_text("x" * (FL.MAX_LABELS_BYTES + 1))
    with pytest.raises(ValueError):
        FL.read_labels(tmp_path, 3, 100_000)
