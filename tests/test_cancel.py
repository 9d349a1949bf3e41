"""Stopping what nobody waits for (tfm.core.cancel): twelve clicks along the Steer page's slider
kept twelve generations running to their ends. Each long loop asks its `should_stop` between
steps and raises Cancelled at the first yes; what it made before equals the uninterrupted run,
and a "no" changes nothing. In the shared batch, a row whose page left is dropped and every
other row still equals its solo run."""

from __future__ import annotations

import threading

import pytest
import torch

import tfm
from tfm.analysis import heads
from tfm.analysis.lens import logit as lens
from tfm.analysis.steering import vectors as steering
from tfm.core.cancel import Cancelled
from tfm.generation.batcher import BatchConfig, Batcher

from tests.test_batcher import assert_same, make_lm, solo

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = "Once upon a time there was a little"


class Flip:
    """A should_stop that says no `n` times, then yes; counts how often it was asked."""

    def __init__(self, n: int) -> None:
        self.n, self.asked = n, 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.asked > self.n


@pytest.fixture(scope="module")
def lm():
    return tfm.load("default", device="cpu")


@pytest.fixture(scope="module")
def vec(lm):
    return steering.pair_vector(lm, " happy and kind", " sad and angry", lm.config.n_layer // 2, "mean")


def test_a_generation_nobody_waits_for_stops_before_its_next_token(lm):
    full = list(tfm.generate(lm, PROMPT, 12, 0.8, seed=3, stop_at_eot=False))
    flip, made = Flip(5), []
    with pytest.raises(Cancelled):
        for step in tfm.generate(lm, PROMPT, 12, 0.8, seed=3, stop_at_eot=False, should_stop=flip):
            made.append(step)
    assert flip.asked == 6  # asked before every token, stopped at the first yes
    assert_same(made, full[:5])
    assert_same(list(tfm.generate(lm, PROMPT, 12, 0.8, seed=3, stop_at_eot=False, should_stop=lambda: False)), full)


def test_a_steered_pair_stops_inside_either_of_its_generations(lm, vec):
    want = steering.steered_pair(lm, PROMPT, vec, 3.0, 1, 10, 0.8)
    assert steering.steered_pair(lm, PROMPT, vec, 3.0, 1, 10, 0.8, should_stop=lambda: False) == want
    for n in (4, 10 + 3):  # inside the plain text, then inside the steered one
        flip = Flip(n)
        with pytest.raises(Cancelled):
            steering.steered_pair(lm, PROMPT, vec, 3.0, 1, 10, 0.8, should_stop=flip)
        assert flip.asked == n + 1


def test_a_sweep_stops_between_blocks(lm, vec):
    ids, token = lm.tokenizer.prompt_ids(PROMPT), lm.tokenizer.encode(" girl")[0]
    flip = Flip(2)
    with pytest.raises(Cancelled):
        steering.sweep(lm, ids, vec, [-4.0, 0.0, 4.0], token, should_stop=flip)
    assert flip.asked == 3 < lm.config.n_layer


def test_a_long_prompts_sweep_runs_in_bounded_batches_each_row_as_one_forward(lm, vec, monkeypatch):
    """Rows x prompt length over SWEEP_TOKENS split the sweep into batches (memory stays bounded
    and a stop lands within one block of one of them): each row still equals its own forward."""
    ids, token = lm.tokenizer.prompt_ids(PROMPT), lm.tokenizer.encode(" girl")[0]
    strengths = [-6.0, -2.0, 0.0, 2.0, 6.0]
    monkeypatch.setattr(steering, "SWEEP_TOKENS", 2 * len(ids))  # batches of 2, 2 and 1 rows
    flip = Flip(10**6)
    got = steering.sweep(lm, ids, vec, strengths, token, should_stop=flip)
    assert flip.asked == 3 * lm.config.n_layer  # three batched forwards ran
    for s, p in zip(strengths, got):
        with torch.no_grad():
            logits = lm.model(torch.tensor([ids]), edits=[vec.edit(s, start=1)]).logits[0, -1]  # the sink left alone
        assert float(p) == pytest.approx(float(logits.softmax(-1)[token]), rel=1e-4, abs=1e-7)


def test_the_head_table_stops_between_layers_of_the_prompt_or_the_probe(lm):
    ids = tuple(lm.tokenizer.prompt_ids(PROMPT))
    with torch.inference_mode():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    n = lm.config.n_layer
    for stop_after in (1, n + 1):
        flip = Flip(stop_after)
        with pytest.raises(Cancelled):
            heads.head_table(lm, trace, ids, should_stop=flip)
        assert flip.asked == stop_after + 1
    full = heads.head_table(lm, trace, ids)
    same = heads.head_table(lm, trace, ids, should_stop=lambda: False)
    assert all(torch.equal(full.scores[k], same.scores[k]) for k in full.scores)


def test_the_logit_lens_stops_between_chunks(lm, monkeypatch):
    ids = lm.tokenizer.prompt_ids(PROMPT)
    with torch.inference_mode():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    full = lens.logit_lens(lm.model, trace, k=3)
    monkeypatch.setattr(lens, "LENS_ROWS", 8)
    flip = Flip(1)
    with pytest.raises(Cancelled):
        lens.logit_lens(lm.model, trace, k=3, should_stop=flip)
    assert flip.asked == 2
    chunked = lens.logit_lens(lm.model, trace, k=3, should_stop=lambda: False)
    assert torch.equal(chunked.top_ids, full.top_ids)


def test_a_batched_row_whose_page_left_is_dropped_and_the_other_rows_equal_their_solo_runs():
    lm = make_lm("rope-gqa")
    b = Batcher(lm, BatchConfig(max_rows=4))
    # first in, so it is in every batched step from the first: it has made 4 tokens when asked at step 4
    left = b.submit("Stop me", 14, 1.0, seed=9, stop_at_eot=False, owner="gone", should_stop=lambda: b.steps >= 4)
    keep = [("Hello there", 14, 0.9, 0, 1.0, 8), ("ab", 12, 1.2, 20, 0.9, 3)]
    gens = [
        b.submit(p, n, t, k, tp, seed=s, stop_at_eot=False, owner=f"s{i}") for i, (p, n, t, k, tp, s) in enumerate(keep)
    ]
    got, made, errors = [None, None], [], []

    def consume(i):
        got[i] = list(gens[i])

    def consume_left():
        try:
            made.extend(left)
        except Cancelled as e:
            errors.append(e)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(2)] + [threading.Thread(target=consume_left)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for req, steps in zip(keep, got):
        assert_same(steps, solo(lm, req))
    assert len(errors) == 1 and len(made) == 4  # dropped after 4 of its 14 tokens
    assert_same(made, list(tfm.generate(lm, "Stop me", 14, 1.0, seed=9, stop_at_eot=False))[: len(made)])
    assert b.load() == (0, 0) and b.steps >= 14
