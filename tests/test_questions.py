"""Class questions (tfm/teach/questions.py) against the engine: each truth is recomputed here
from the model's logits and head patterns with torch, and grading follows from it."""

from __future__ import annotations

import pytest
import torch

import tfm
from tfm.analysis import head_table
from tfm.teach import questions as Q

PROMPT = "Once upon a time, there was a little girl named Lily. She"


@pytest.fixture(scope="module")
def lm():
    return tfm.load("default")


@pytest.fixture(scope="module")
def logits(lm):
    ids = lm.tokenizer.prompt_ids(PROMPT)
    with torch.no_grad():
        return lm.model(torch.tensor([ids])).logits[0, -1]


def reference_probs(lm, logits):
    n = min(lm.tokenizer.vocab_size, lm.config.vocab_size)
    return torch.softmax(logits[:n].double(), -1)


def test_next_token_truth_is_the_models_top_tokens_and_options_include_its_top_choices(lm, logits):
    q, truth = Q.ask_next_token(lm, logits, typed=False)
    probs = reference_probs(lm, logits)
    want = torch.argsort(probs, descending=True)[: Q.TOP]
    assert [t[0] for t in truth.top] == [lm.tokenizer.display_piece(int(i)) for i in want]
    assert [t[2] for t in truth.top] == pytest.approx(probs[want].tolist(), abs=1e-6)
    top3 = {t[0] for t in truth.top[:3]}
    assert top3 <= set(q.options) and len(q.options) == 4 and list(q.options) == sorted(q.options)
    assert Q.ask_next_token(lm, logits, typed=True)[0].options == ()
    best = truth.top[0]
    right = Q.grade(q, truth, Q.parse_answer(q, best[0]))
    assert right.correct and right.closeness == 1.0 and f"{best[2]:.3f}" in right.text
    second = Q.grade(q, truth, truth.top[1][0])
    assert not second.correct and second.closeness == pytest.approx(truth.top[1][2] / best[2])
    with pytest.raises(ValueError, match="options"):
        Q.parse_answer(q, "not an option")


def test_a_typed_token_matches_without_its_space_or_case_and_a_stranger_gets_the_bound(lm, logits):
    q, truth = Q.ask_next_token(lm, logits, typed=True)
    shown, raw, p = truth.top[0]
    typed = raw.strip().upper() if raw.strip() else shown
    g = Q.grade(q, truth, Q.parse_answer(q, typed))
    assert g.correct and f"{p:.3f}" in g.text
    g = Q.grade(q, truth, "zzqx-not-a-token")
    assert not g.correct and g.closeness == 0 and f"{truth.top[-1][2]:.4f}" in g.text


def test_head_question_is_graded_by_every_heads_score(lm):
    table = head_table(lm)
    q, truth = Q.ask_head(table, "repeat_induction")
    scores = table.scores["repeat_induction"]
    layer, head = divmod(int(scores.argmax()), scores.shape[1])
    assert (q.n_layer, q.n_head) == tuple(scores.shape) and torch.tensor(truth.scores).equal(scores)
    g = Q.grade(q, truth, Q.parse_answer(q, f"l{layer}.h{head}"))
    assert g.correct and g.closeness == 1.0
    worst = divmod(int(scores.argmin()), scores.shape[1])
    g = Q.grade(q, truth, Q.parse_answer(q, f"L{worst[0]} H{worst[1]}"))
    assert not g.correct and f"rank {int((scores > scores.min()).sum()) + 1} of {scores.numel()}" in g.text
    assert g.closeness == pytest.approx(float(scores.min() / scores.max()))
    for bad in ("L99 H0", "L0 H99", "head three", "-1 2"):
        with pytest.raises(ValueError):
            Q.parse_answer(q, bad)


@pytest.mark.parametrize("temperature, top_p", [(0.5, 1.0), (2.0, 1.0), (1.0, 0.9), (0.7, 0.5)])
def test_sampling_truths_follow_temperature_and_top_p(lm, logits, temperature, top_p):
    probs_t = torch.softmax(logits[: min(lm.tokenizer.vocab_size, lm.config.vocab_size)].double() / temperature, -1)
    order = torch.sort(probs_t, descending=True).values
    before = torch.cumsum(order, 0) - order
    kept = int((before < top_p).sum()) if top_p < 1 else order.numel()
    top_prob = float(order[0] / order[:kept].sum())
    q, truth = Q.ask_sampling(lm, logits, temperature, top_p, "kept")
    assert truth.value == kept
    assert Q.grade(q, truth, Q.parse_answer(q, str(kept))).correct
    assert not Q.grade(q, truth, Q.parse_answer(q, str(kept * 2 + 2))).correct
    q, truth = Q.ask_sampling(lm, logits, temperature, top_p, "top_prob")
    assert truth.value == pytest.approx(top_prob, abs=1e-5)
    assert Q.grade(q, truth, Q.parse_answer(q, f"{100 * top_prob:.2f}%")).correct


def odds(p: float) -> float:
    return p / (1 - p)


def with_odds(p: float, factor: float) -> float:
    """The probability whose odds are `factor` times p's."""
    o = odds(p) * factor
    return o / (1 + o)


def test_an_estimate_is_graded_on_log_odds_against_the_models_probability(lm, logits):
    probs = reference_probs(lm, logits)
    order = torch.argsort(probs, descending=True)
    for rank in (0, 2, 9):
        token = int(order[rank])
        p = float(probs[token])
        q, truth = Q.ask_estimate(lm, logits, token)
        assert truth.value == pytest.approx(p, abs=1e-6)
        for factor, right in ((1.4, True), (1 / 1.4, True), (1.7, False), (1 / 1.7, False)):
            answer = Q.parse_answer(q, f"{with_odds(p, factor):.6f}")
            g = Q.grade(q, truth, answer)
            shown = odds(p) / odds(float(answer))
            assert g.correct is right and f"the model: {p:.3g}" in g.text, (rank, factor, g)
            assert f"odds {max(shown, 1 / shown):,.1f}× too {'high' if factor > 1 else 'low'}" in g.text
        assert not Q.grade(q, truth, "0").correct and f"off by {p:.3g}" in Q.grade(q, truth, "0").text
    # The case: p(' Rome') = 0.038 answered 0 was right under a flat ±0.05; not any more.
    est = Q.Estimate(1, "␣Rome")
    truth = Q.Truth("", value=0.038)
    assert not Q.grade(est, truth, "0").correct and Q.grade(est, truth, "0.03").correct
    assert not Q.grade(est, truth, "0.1").correct
    for bad in ("1.5", "-0.1", "nan", "inf", "lots", "200%"):
        with pytest.raises(ValueError):
            Q.parse_answer(q, bad)


def test_every_kind_is_graded_on_its_own_scale_against_the_engine(lm, logits):
    """One right and one wrong answer per question kind, each from the engine's own numbers."""
    probs = reference_probs(lm, logits)
    order = torch.argsort(probs, descending=True)
    tok = lm.tokenizer
    for typed in (False, True):
        q, truth = Q.ask_next_token(lm, logits, typed)
        top, second = tok.display_piece(int(order[0])), tok.display_piece(int(order[1]))
        assert Q.grade(q, truth, Q.parse_answer(q, top)).correct
        g = Q.grade(q, truth, Q.parse_answer(q, second))
        assert not g.correct and g.closeness == pytest.approx(float(probs[order[1]] / probs[order[0]]), abs=1e-5)
    table = head_table(lm)
    scores = table.scores["repeat_induction"]
    q, truth = Q.ask_head(table, "repeat_induction")
    best, worst = divmod(int(scores.argmax()), scores.shape[1]), divmod(int(scores.argmin()), scores.shape[1])
    assert (
        Q.grade(q, truth, f"L{best[0]} H{best[1]}").correct
        and not Q.grade(q, truth, f"L{worst[0]} H{worst[1]}").correct
    )
    final = torch.softmax(logits[: probs.numel()].double() / 0.5, -1).max().item()
    q, truth = Q.ask_sampling(lm, logits, 0.5, 1.0, "top_prob")
    assert Q.grade(q, truth, f"{with_odds(final, 1.3):.6f}").correct
    assert not Q.grade(q, truth, f"{with_odds(final, 2.0):.6f}").correct
    q, truth = Q.ask_sampling(lm, logits, 1.0, 0.9, "kept")
    kept = int(truth.value)
    assert Q.grade(q, truth, str(kept)).correct and "exactly" in Q.grade(q, truth, str(kept)).text
    assert not Q.grade(q, truth, str(kept * 3)).correct and "3.0× too many" in Q.grade(q, truth, str(kept * 3)).text
    q, truth = Q.ask_estimate(lm, logits, int(order[1]))
    assert Q.grade(q, truth, f"{float(probs[order[1]]):.6f}").correct
    assert not Q.grade(q, truth, f"{with_odds(float(probs[order[1]]), 3):.6f}").correct


def test_answers_fall_in_histogram_bins():
    est = Q.Estimate(3, "x")
    assert Q.bucket(est, "0.35") == "0.3–0.4" and Q.bucket(est, "1") == "0.9–1.0" and Q.bucket(est, "0") == "0.0–0.1"
    kept = Q.Sampling(1.0, 0.9, "kept")
    assert Q.bucket(kept, "1") == "1–9" and Q.bucket(kept, "250") == "100–999"
    assert Q.bucket(Q.NextToken(), "␣Paris ") == Q.bucket(Q.NextToken(), " paris") == "paris"
    assert Q.bucket(Q.NextToken(("␣Paris", "␣the")), "␣Paris") == "␣Paris"
    assert Q.bucket_order(kept, ["100–999", "1–9", "10–99"]) == ["1–9", "10–99", "100–999"]
    assert len(Q.bucket_order(est, [])) == 10 and Q.bucket_order(Q.NextToken(), ["a"]) is None


def test_the_models_answer_falls_in_its_own_bar(lm, logits):
    for typed in (False, True):
        q, truth = Q.ask_next_token(lm, logits, typed)
        best = truth.top[0]
        assert Q.model_bucket(q, truth) == Q.bucket(q, Q.parse_answer(q, best[0]))
    q, truth = Q.ask_estimate(lm, logits, 7)
    assert Q.model_bucket(q, truth) == Q.bucket(q, Q.parse_answer(q, f"{truth.value:.6f}"))
    q, truth = Q.ask_head(head_table(lm), "repeat_induction")
    assert Q.grade(q, truth, Q.model_bucket(q, truth)).correct


def test_questions_and_truths_round_trip_through_json_and_bad_ones_are_refused(lm, logits):
    for q, truth in (
        Q.ask_next_token(lm, logits, False),
        Q.ask_head(head_table(lm), "repeat_previous_token"),
        Q.ask_sampling(lm, logits, 0.5, 0.9, "kept"),
        Q.ask_estimate(lm, logits, 5),
    ):
        assert Q.from_json(Q.to_json(q)) == q
        assert Q.truth_from_json(Q.truth_to_json(truth)) == truth
    for bad in (
        {"kind": "exec"},
        {"kind": "which_head", "score": "x", "n_layer": 2, "n_head": 2},
        {"kind": "sampling", "temperature": -1, "top_p": 1, "measure": "kept"},
        {"kind": "estimate", "token": 1, "shown": "a", "extra": 1},
        [],
        None,
    ):
        with pytest.raises(ValueError):
            Q.from_json(bad)
