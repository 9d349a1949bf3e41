"""Continuous batching (tfm.generation.batcher): concurrent requests with different prompts,
settings, seeds and lengths give what each gives alone through tfm.generate (the oracle); Stop
ends one row; requests join between steps; one owner cannot take every row."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import tfm
from tfm import ModelConfig, random_model
from tfm.core.kv_cache import KVCache, RaggedKVCache
from tfm.generation.batcher import BatchConfig, Batcher
from tfm.generation.timeline import step_record

VARIANTS = {
    "learned": dict(pos_encoding="learned"),
    "sinusoidal": dict(pos_encoding="sinusoidal"),
    "rope-gqa": dict(
        pos_encoding="rope",
        norm="rmsnorm",
        activation="swiglu",
        bias=False,
        n_head=4,
        n_kv_head=2,
        tied_embeddings=False,
    ),
}
REQUESTS = [  # prompt, max_new, temperature, top_k, top_p, seed
    ("Hello", 12, 0.8, 0, 1.0, 1),
    ("Once upon a time there was a fox", 7, 0.0, 0, 1.0, 2),
    ("ab", 15, 1.3, 20, 0.9, 3),
    ("The quick brown fox jumps over", 10, 1.0, 0, 0.5, 4),
]


def make_lm(variant: str):
    cfg = ModelConfig.preset("tiny").replace(**VARIANTS[variant])
    return random_model(cfg, seed=5)


def solo(lm, req, trace=False):
    p, n, t, k, tp, seed = req
    return list(tfm.generate(lm, p, n, t, k, tp, seed=seed, trace=trace, stop_at_eot=False))


def batched(batcher, reqs, trace=False):
    """Every request submitted at once, consumed by its own thread (as sessions do)."""
    gens = [
        batcher.submit(p, n, t, k, tp, seed=s, trace=trace, stop_at_eot=False, owner=f"s{i}")
        for i, (p, n, t, k, tp, s) in enumerate(reqs)
    ]
    out = [None] * len(gens)

    def consume(i):
        out[i] = list(gens[i])

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(len(gens))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    return out


def assert_same(a_steps, b_steps, tol=1e-5):
    assert [s.token_id for s in a_steps] == [s.token_id for s in b_steps]
    assert [s.stop_reason for s in a_steps] == [s.stop_reason for s in b_steps]
    assert a_steps[-1].text_so_far == b_steps[-1].text_so_far
    for a, b in zip(a_steps, b_steps):
        assert a.index == b.index and a.position == b.position and a.rank == b.rank and a.n_kept == b.n_kept
        assert a.prob == pytest.approx(b.prob, abs=tol) and a.prob_original == pytest.approx(b.prob_original, abs=tol)
        torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("variant", VARIANTS)
def test_concurrent_rows_equal_solo_runs(variant):
    lm = make_lm(variant)
    b = Batcher(lm, BatchConfig(max_rows=8, per_owner=2))
    got = batched(b, REQUESTS)
    for req, steps in zip(REQUESTS, got):
        assert_same(steps, solo(lm, req))
    assert b.widest >= 2 and b.load() == (0, 0)  # rows really shared a step, and all left


def test_rows_drawing_ahead_equal_solo_runs(monkeypatch):
    """Six rows with the same settings (one breakdown, six draws) whose noise is drawn on the
    thread pool while the forward runs, as a large vocabulary's is: each from its own generator,
    so each gives its solo tokens."""
    import tfm.generation.choice as choice

    monkeypatch.setattr(choice, "AHEAD_VOCAB", 1)
    pooled = []
    real_pool = choice.draw_pool()
    monkeypatch.setattr(choice, "draw_pool", lambda: pooled.append(1) or real_pool)
    lm = make_lm("rope-gqa")
    reqs = [("Once upon a time", 9, 0.9, 0, 1.0, seed) for seed in range(6)]
    got = batched(Batcher(lm, BatchConfig(max_rows=8, per_owner=2)), reqs)
    for req, steps in zip(reqs, got):
        assert_same(steps, solo(lm, req))
    assert pooled and len({tuple(s.token_id for s in steps) for steps in got}) > 1  # the pool drew; seeds differ


def test_traced_rows_give_the_solo_timeline_records():
    lm = make_lm("rope-gqa")
    got = batched(Batcher(lm), REQUESTS[:3], trace=True)
    for req, steps in zip(REQUESTS[:3], got):
        ref = solo(lm, req, trace=True)
        assert_same(steps, ref)
        for a, r in zip(steps, ref):
            ra, rr = step_record(a), step_record(r)
            assert ra.attn.shape == rr.attn.shape  # the row's own keys only, no padding
            torch.testing.assert_close(ra.attn, rr.attn, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(ra.resid, rr.resid, atol=1e-4, rtol=1e-4)


def test_stop_ends_only_that_row_and_a_late_request_joins():
    lm = make_lm("learned")
    b = Batcher(lm, BatchConfig(max_rows=4))
    long_req, late_req = ("Hello there", 18, 0.9, 0, 1.0, 8), REQUESTS[2]
    keep = b.submit(*long_req[:1], long_req[1], *long_req[2:5], seed=long_req[5], stop_at_eot=False, owner="a")
    stop = b.submit("Stop me", 18, 1.0, seed=9, stop_at_eot=False, owner="b")
    first = [next(keep) for _ in range(5)]
    made = [next(stop) for _ in range(3)]
    stop.close()  # Stop: this row leaves at the next step
    p, n, t, k, tp, s = late_req
    late = list(b.submit(p, n, t, k, tp, seed=s, stop_at_eot=False, owner="c"))
    rest = list(keep)
    assert_same(first + rest, solo(lm, long_req))
    assert_same(late, solo(lm, late_req))
    assert_same(made, list(tfm.generate(lm, "Stop me", 18, 1.0, seed=9, stop_at_eot=False))[:3])
    assert b.load() == (0, 0)


def test_one_owner_cannot_take_every_row():
    lm = make_lm("learned")
    b = Batcher(lm, BatchConfig(max_rows=2, per_owner=1))
    gate, decode = threading.Semaphore(0), b._decode
    b._decode = lambda: (gate.acquire(), decode())  # the test says when each batched step runs
    with b._cond:  # (reentrant) every request is queued before the worker admits any
        hog = [b.submit("a", 20, seed=i, stop_at_eot=False, owner="hog") for i in range(3)]
        other = b.submit("b", 20, seed=7, stop_at_eot=False, owner="other")
    try:
        gate.release()  # the first step: each row's first token
        assert next(other).index == 0 and next(hog[0]).index == 0  # both joined: one row each
        assert b.queued(hog[1]._row) == 1 and b.queued(hog[2]._row) == 2  # the hog's others wait in line
        assert b.load() == (2, 2)
        hog[0].close()  # its Stop frees its row
        gate.release()  # one step: then hog[1] joins
        assert next(other).index == 1  # the other row went on
        gate.release()  # hog[1]'s first step
        assert hog[1].poll(30).index == 0 and b.queued(hog[2]._row) == 1
    finally:
        for g in (other, *hog):
            g.close()
        for _ in range(60):
            gate.release()


def test_bad_requests_are_refused_when_submitted_and_the_batcher_goes_on():
    lm = make_lm("learned")
    b = Batcher(lm)
    with pytest.raises(ValueError, match="max_new_tokens"):
        b.submit("x", 0)
    with pytest.raises(ValueError, match="temperature"):
        b.submit("x", 3, temperature=-1)
    alone, ref = (
        list(b.submit("Hi", 5, seed=3, stop_at_eot=False)),
        list(tfm.generate(lm, "Hi", 5, seed=3, stop_at_eot=False)),
    )
    assert_same(alone, ref)


def test_one_token_prompts_and_long_ones_join_together_traced():
    """A one-token prompt has nothing to prefill (its token is fed by the shared step); traced
    rows join in one prefill with the others, each giving its solo timeline records."""
    lm = make_lm("learned")
    reqs = [("a", 6, 0.9, 0, 1.0, 11), REQUESTS[1], REQUESTS[3]]
    assert len(lm.tokenizer.encode("a")) == 1
    b = Batcher(lm, BatchConfig(max_rows=4, per_owner=4))
    with b._cond:  # (reentrant) every request is queued before the worker admits any
        gens = [
            b.submit(p, n, t, k, tp, seed=s, trace=True, stop_at_eot=False, owner="class") for p, n, t, k, tp, s in reqs
        ]
    got = [list(g) for g in gens]
    assert b.prefills == 1  # traced requests share one prefill
    for req, steps in zip(reqs, got):
        ref = solo(lm, req, trace=True)
        assert_same(steps, ref)
        for a, r in zip(steps, ref):
            ra, rr = step_record(a), step_record(r)
            assert ra.attn.shape == rr.attn.shape
            torch.testing.assert_close(ra.attn, rr.attn, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(ra.resid, rr.resid, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("budget", [1024, 64])
def test_requests_arriving_together_share_one_padded_prefill(variant, budget):
    """A class pressing Generate at once: prompts of different lengths, right-padded into one
    forward (or as many as the token budget needs), each row still equal to its solo run."""
    lm = make_lm(variant)
    b = Batcher(lm, BatchConfig(max_rows=8, per_owner=8, prefill_tokens=budget))
    lengths = [len(lm.tokenizer.encode(p)) for p, *_ in REQUESTS]
    assert lengths == [5, 32, 2, 30]  # padding really happens
    with b._cond:  # (reentrant) every request is queued before the worker admits any
        gens = [b.submit(p, n, t, k, tp, seed=s, stop_at_eot=False, owner="class") for p, n, t, k, tp, s in REQUESTS]
    got = [list(g) for g in gens]
    for req, steps in zip(REQUESTS, got):
        assert_same(steps, solo(lm, req))
    assert b.prefills == (1 if budget == 1024 else 2)  # 64: [5, 32] and [2, 30], 2 x 32 and 2 x 30 padded tokens


@pytest.mark.parametrize("variant", VARIANTS)
def test_ragged_step_equals_each_rows_own_cached_step(variant):
    """The model with a RaggedKVCache: rows at lengths 3, 7, 5 each get their solo logits."""
    lm = make_lm(variant)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 200, (n,), generator=g) for n in (3, 7, 5)]
    ragged = RaggedKVCache(lm.config, 4, 8)
    with torch.no_grad():
        solo_logits = []
        for b, s in enumerate(seqs):
            c = KVCache(lm.config, 1, len(s))
            lm.model(s[None, :-1], cache=c)
            ragged.put(b, c)
            solo_logits.append(lm.model(s[None, -1:], cache=c).logits[0, -1])
        ragged.rows = 3
        out = lm.model(torch.stack([s[-1:] for s in seqs]), cache=ragged).logits[:, -1]
    torch.testing.assert_close(out, torch.stack(solo_logits), atol=1e-5, rtol=1e-5)
    assert ragged.lengths[:3].tolist() == [3, 7, 5]
    with pytest.raises(ValueError, match="one token per row"):
        lm.model(torch.zeros(3, 2, dtype=torch.long), cache=ragged)


EXIT_MID_GENERATION = """
import tfm
from tfm.generation.batcher import Batcher
b = Batcher(tfm.load("default"))
gens = [b.submit("Once upon a time", 200, seed=i, owner=str(i)) for i in range(8)]
next(iter(gens[0]))
print("exiting with 8 rows generating")
"""


def test_the_interpreter_exits_cleanly_while_rows_generate():
    """A script (a notebook kernel, a bench) that ends with rows still decoding: the batcher's
    thread is stopped before torch tears down. Without it the process aborted with "terminate
    called without an active exception" (exit 134) on every try."""
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    done = subprocess.run(
        [sys.executable, "-c", EXIT_MID_GENERATION],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "exiting with 8 rows generating" in done.stdout and "terminate" not in done.stderr


def test_stop_cancels_every_row_and_ends_the_thread():
    b = Batcher(tfm.load("default"), BatchConfig(max_rows=2, per_owner=2))
    gens = [b.submit("Once upon a time", 100, seed=i, owner="a") for i in range(3)]  # 2 rows, 1 waiting
    next(iter(gens[0]))
    b.stop(timeout=10.0)
    assert not b._thread.is_alive()
    for g in gens:  # each consumer is told
        with pytest.raises(RuntimeError, match="batcher was shut down"):
            list(g)
    with pytest.raises(ValueError, match="shut down"):
        b.submit("more", 3)
