"""tfm.teach.examples: every number an example states equals a recomputation on another path
(a full eager trace, the whole vocabulary's probabilities, the full forward's logits), the
offered examples are exactly the measured ones that reach the bar, and an untrained model is
offered none."""

from __future__ import annotations

import pytest
import torch

import tfm
from tfm.analysis.dictionaries import features as FT
from tfm.analysis.attribution import n_words
from tfm.analysis.heads import strongest_heads
from tfm.analysis.lens.logit import logit_lens
from tfm.core.cancel import Cancelled
from tfm.core.trace_names import head_label
from tfm.teach import examples as X


@pytest.fixture(scope="module")
def bundled():
    lm = tfm.load("default", device="cpu")
    return lm, FT.bundled(lm, "default")


@pytest.fixture(scope="module")
def untrained():
    return tfm.load("random:tfm-small", device="cpu")


def full_trace(lm, text: str):
    ids = lm.tokenizer.prompt_ids(text)
    with torch.no_grad():
        return ids, lm.model(torch.tensor([ids]), trace=True, lazy=False)


def copy_scores_by_hand(trace, ids) -> torch.Tensor:
    """(L, H): for each query whose token came before, the attention on every key right after an
    earlier copy of it, summed, then averaged over those queries; a loop, not detection masks."""
    queries = [(q, [j + 1 for j in range(q) if ids[j] == ids[q]]) for q in range(len(ids))]
    queries = [(q, keys) for q, keys in queries if keys]
    out = torch.zeros(trace.n_layers(), trace.pattern(0).shape[0], dtype=torch.float64)
    for layer in range(trace.n_layers()):
        pat = trace.pattern(layer).double()
        for q, keys in queries:
            out[layer] += pat[:, q, keys].sum(-1)
    return out / len(queries)


def check_offer(offer: X.Offer, passes) -> None:
    """The offered examples are the measured ones that pass, best first, at most the page's number."""
    want, features = [], set()
    for e in offer.measured:
        feature = e.settings.get("feature")  # the Features page: one example per feature
        if passes(e) and (feature is None or feature not in features):
            want.append(e)
            features.add(feature)
    assert list(offer.examples) == want[: X.PAGES[offer.page]]
    assert all(e.page == offer.page for e in offer.measured)


def check_induction(lm, offer: X.Offer) -> None:
    assert len(offer.measured) == len(X.INDUCTION_TEXTS)
    assert [e.score for e in offer.measured] == sorted((e.score for e in offer.measured), reverse=True)
    for ex in offer.measured:
        ids, out = full_trace(lm, ex.prompt)
        scores = copy_scores_by_hand(out.trace, ids)
        layer, head = divmod(int(scores.argmax()), scores.shape[1])
        assert (layer, head) == (ex.settings["layer"], ex.settings["head"]), ex.prompt
        assert ex.score == pytest.approx(float(scores[layer, head]), abs=1e-5)
        # the label says the score is on these words (Home's induction head is on random tokens)
        shown = f"on its words, induction: {head_label(layer, head)} scores {float(scores[layer, head]):.2f})"
        assert ex.label.endswith(shown), ex.label
    check_offer(offer, lambda e: e.score >= X.INDUCTION_MIN)


def check_ioi(lm, offer: X.Offer) -> None:
    for ex in offer.measured:
        ids, out = full_trace(lm, ex.prompt)
        a, b = (lm.tokenizer.encode(ex.settings[k]) for k in ("token", "versus"))
        assert len(a) == len(b) == 1 and ex.settings["position"] == len(ids) - 1
        logits = out.logits[0, -1].double()
        assert ex.score == pytest.approx(float(logits[a[0]] - logits[b[0]]), abs=1e-4)
    check_offer(offer, lambda e: e.score >= X.IOI_MIN)


def check_lens(lm, offer: X.Offer) -> None:
    """Rows recomputed from every layer's full softmax (keep_probs) of a full eager trace."""
    known = set()
    for ex in offer.measured:
        ids, out = full_trace(lm, ex.prompt)
        answer = dict(X.LENS_TEXTS)[ex.prompt]
        lens = logit_lens(lm.model, out.trace, k=1, n_words=n_words(lm))
        top5 = lens.probs[:, -1].topk(X.LENS_K, dim=-1).indices  # (L+1, 5)
        inside = [bool((row == lm.tokenizer.encode(answer)[0]).any()) for row in top5]
        row = min([r for r in range(len(inside)) if all(inside[r:])], default=len(inside))
        assert ex.settings == {"position": len(ids) - 1, "row": row}, ex.prompt
        assert ex.score == pytest.approx(row / lm.config.n_layer)
        if int(top5[-1, 0]) == lm.tokenizer.encode(answer)[0]:
            known.add(ex.prompt)
    check_offer(offer, lambda e: e.prompt in known and e.settings["row"] < lm.config.n_layer)


def check_features(lm, fs, offer: X.Offer) -> None:
    top, freq = fs.data["hist_max"].float(), fs.data["freq"].float()
    for ex in offer.measured:
        ids, out = full_trace(lm, ex.prompt)
        acts = fs.sae.encode(out.trace.residual_streams()[fs.layer][1].float())  # as the Features page
        acts[: fs.skip] = 0
        share = acts / top.clamp_min(1e-12) * ((top > 0) & (freq <= X.FEATURE_SHARE))
        p, f = ex.settings["position"], ex.settings["feature"]
        assert float(share[p, f]) == pytest.approx(float(share.max()), abs=1e-5), ex.prompt
        assert ex.score == pytest.approx(float(acts[p, f] / top[f]), abs=1e-5)
        assert freq[f] <= X.FEATURE_SHARE
    check_offer(offer, lambda e: e.score >= X.FEATURE_MIN)


def test_bundled_model_examples_equal_recomputations(bundled):
    lm, fs = bundled
    check_induction(lm, X.for_page(lm, "attention"))
    check_ioi(lm, X.for_page(lm, "why"))
    check_lens(lm, X.for_page(lm, "logit_lens"))
    check_features(lm, fs, X.for_page(lm, "features", fs))


def test_bundled_induction_example_opens_on_an_induction_head(bundled):
    """The bundled model has an induction head (the repeated-random-tokens probe: its score
    averages over both halves and the first has nothing to induct, so 0.5 is its ceiling), and
    its example opens on that head, which puts at least half of a later copy's attention on the
    induction target."""
    lm, _ = bundled
    layer, head, probe = strongest_heads(lm)["induction"]
    assert probe >= 0.4
    ex = X.for_page(lm, "attention").examples[0]
    assert ex.score >= 0.5 and (ex.settings["layer"], ex.settings["head"]) == (layer, head)


def test_bundled_model_offers_lens_and_feature_examples(bundled):
    lm, fs = bundled
    lens = X.for_page(lm, "logit_lens").examples
    assert lens and all(0 < e.settings["row"] < lm.config.n_layer for e in lens)
    feats = X.for_page(lm, "features", fs).examples
    assert len({e.settings["feature"] for e in feats}) == len(feats) >= 1


def test_untrained_model_is_offered_nothing_and_numbers_still_recompute(untrained):
    lm = untrained
    offers = {page: X.for_page(lm, page) for page in X.PAGES}
    assert not any(o.examples for o in offers.values())
    assert offers["attention"].measured and max(e.score for e in offers["attention"].measured) < X.INDUCTION_MIN
    assert offers["features"].measured == ()  # no SAE
    check_induction(lm, offers["attention"])
    check_ioi(lm, offers["why"])
    check_lens(lm, offers["logit_lens"])


@pytest.mark.parametrize("page", list(X.PAGES))
def test_stops_when_asked(bundled, page):
    lm, fs = bundled
    with pytest.raises(Cancelled):
        X.for_page(lm, page, fs, should_stop=lambda: True)


def test_candidates_that_do_not_fit_are_left_out():
    """A context of 8 tokens cuts every repeated sequence: nothing is measured, nothing offered."""
    lm = tfm.load('random:{"preset":"tfm-small","config":{"context_length":8,"n_layer":1}}', device="cpu")
    offer = X.for_page(lm, "attention")
    assert offer.measured == () and offer.examples == ()
    assert all(len(lm.tokenizer.encode(t)) > 8 for t in X.INDUCTION_TEXTS)


@pytest.mark.parametrize(
    "bad",
    [
        dict(page="tour"),
        dict(prompt=" "),
        dict(score=float("nan")),
        dict(settings={"layer": True}),
        dict(settings={1: 2}),
    ],
)
def test_example_refuses_bad_values(bad):
    good = dict(page="attention", prompt="a b a b", settings={"layer": 0}, label="x", why="y", score=0.5)
    X.Example(**good)
    with pytest.raises(ValueError):
        X.Example(**{**good, **bad})
    with pytest.raises(ValueError, match="has no examples"):
        X.for_page(None, "tour")


@pytest.mark.slow
def test_smollm2_examples():
    """The real model: its induction example's head scores at least 0.5 on the later copies,
    every page offers examples, and their numbers equal recomputations."""
    lm = tfm.load("smollm2", device="cpu")
    fs = FT.bundled(lm, "smollm2")
    offers = {page: X.for_page(lm, page, fs) for page in X.PAGES}
    assert all(o.examples for o in offers.values())
    assert offers["attention"].examples[0].score >= 0.5
    check_induction(lm, offers["attention"])
    check_ioi(lm, offers["why"])
    check_lens(lm, offers["logit_lens"])
    check_features(lm, fs, offers["features"])
