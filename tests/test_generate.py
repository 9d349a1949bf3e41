"""Tests for tfm.generate: reproducibility, cache equivalence, thread safety, the shared model untouched
(stop rules, prompts and streamed text: test_generate_stops.py)."""

from __future__ import annotations

import threading

import pytest
import torch

import tfm
from tfm import LM, ModelConfig, random_model
from tfm.generation.generate import Step, prepare_prompt
from tfm.loaders.loading import bytes_tokenizer
from tfm.generation.sampling import SamplingSettings, breakdown, sample

VARIANTS = {
    "learned": dict(pos_encoding="learned"),
    "sinusoidal": dict(pos_encoding="sinusoidal"),
    "rope": dict(pos_encoding="rope"),
    "none": dict(pos_encoding="none"),
    "post-norm": dict(norm_placement="post", activation="relu"),
    "llama-style": dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False, tied_embeddings=False),
}


@pytest.fixture(scope="module")
def lm():
    return random_model("tiny", seed=0)


def run(lm, prompt="Hello", **kw):
    return list(tfm.generate(lm, prompt, **kw))


def ids(steps):
    return [s.token_id for s in steps]


def full_logits(lm, prompt_ids, steps):
    """Last-position logits of one uncached forward over prompt + generated, per step."""
    seq = list(prompt_ids) + ids(steps)
    with torch.no_grad():
        logits = lm.model(torch.tensor([seq])).logits[0]  # (T, V)
    n = len(prompt_ids)
    return logits[n - 1 : n - 1 + len(steps)]  # (steps, V)


# ---- reproducibility ----------------------------------------------------------------


def test_same_seed_same_tokens_and_different_seeds_differ(lm):
    a = run(lm, seed=1, max_new_tokens=20, stop_at_eot=False)
    b = run(lm, seed=1, max_new_tokens=20, stop_at_eot=False)
    c = run(lm, seed=2, max_new_tokens=20, stop_at_eot=False)
    assert ids(a) == ids(b)
    assert [s.prob for s in a] == [s.prob for s in b]
    assert ids(a) != ids(c)  # ~uniform over 257 tokens: 20 equal draws is impossible in practice


def test_tokens_equal_sampling_sample_with_the_same_generator(lm):
    """generate draws exactly what tfm.sampling.sample draws, step by step."""
    settings = SamplingSettings(0.9, 50, 0.8)
    steps = run(lm, temperature=0.9, top_k=50, top_p=0.8, seed=7, max_new_tokens=12, stop_at_eot=False)
    gen = torch.Generator().manual_seed(7)
    prompt = lm.tokenizer.encode("Hello")
    for step, row in zip(steps, full_logits(lm, prompt, steps)):
        assert step.token_id == sample(row, settings, gen)


def test_trace_and_cache_do_not_change_tokens(lm):
    kw = dict(seed=5, max_new_tokens=15, top_p=0.9, stop_at_eot=False)
    base = run(lm, **kw)
    for use_cache in (True, False):
        for trace in (True, False):  # traced steps use the model's unembedding, others a (D, V) copy
            steps = run(lm, use_cache=use_cache, trace=trace, **kw)
            assert ids(steps) == ids(base)
            torch.testing.assert_close(
                torch.stack([s.logits for s in steps]), torch.stack([s.logits for s in base]), atol=1e-5, rtol=1e-5
            )


def sharp_lm(make_model, **overrides):
    """A tiny LM with large random weights (conftest's make_model): far-from-uniform attention
    and logits, so cache/no-cache equality is tested on a model that really uses its context."""
    model = make_model("tiny", seed=1, **overrides)
    return LM(model, bytes_tokenizer(), model.config, torch.device("cpu"), "test", {})


@pytest.mark.parametrize("name", list(VARIANTS))
def test_cached_equals_uncached_tokens_and_logits(name, make_model):
    lm = sharp_lm(make_model, **VARIANTS[name])
    kw = dict(seed=3, max_new_tokens=20, stop_at_eot=False)
    cached, plain = run(lm, "The cat", use_cache=True, **kw), run(lm, "The cat", use_cache=False, **kw)
    assert ids(cached) == ids(plain)
    for a, b in zip(cached, plain):
        torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=1e-5)
    # and both equal one full forward over the final sequence
    ref = full_logits(lm, lm.tokenizer.encode("The cat"), cached)
    torch.testing.assert_close(torch.stack([s.logits for s in cached]), ref, atol=1e-5, rtol=1e-5)


def test_greedy_is_argmax_of_full_forward_and_breakdown_matches(make_model):
    lm = sharp_lm(make_model)
    steps = run(lm, "Once upon", temperature=0, max_new_tokens=20, stop_at_eot=False)
    ref = full_logits(lm, lm.tokenizer.encode("Once upon"), steps)
    assert ids(steps) == ref.argmax(-1).tolist()
    for step, row in zip(steps, ref):
        want = breakdown(row, temperature=0)
        for field in ("probs", "probs_t", "final"):
            torch.testing.assert_close(getattr(step.breakdown, field), getattr(want, field), atol=1e-5, rtol=1e-4)
        assert torch.equal(step.breakdown.kept, want.kept)
        assert (step.prob, step.rank, step.n_kept) == (1.0, 0, 1)


def test_breakdown_and_step_numbers_match_the_full_forward(lm):
    steps = run(lm, "Hi", temperature=0.7, top_k=40, top_p=0.9, seed=2, max_new_tokens=10, stop_at_eot=False)
    ref = full_logits(lm, lm.tokenizer.encode("Hi"), steps)
    for step, row in zip(steps, ref):
        want = breakdown(row, 0.7, 40, 0.9)
        torch.testing.assert_close(step.breakdown.final, want.final, atol=1e-5, rtol=1e-4)
        assert torch.equal(step.breakdown.kept, want.kept)
        t = step.token_id
        assert step.n_kept == int(want.n_kept) and bool(want.kept[t])
        assert step.prob == pytest.approx(float(want.final[t]), rel=1e-4)
        assert step.prob_original == pytest.approx(float(want.probs[t]), rel=1e-4)
        assert step.rank == int((want.final > want.final[t]).sum())
        assert step.rank_original == int((row > row[t]).sum())


def test_trace_with_cache_covers_only_the_new_position(lm):
    steps = run(lm, "Hello", trace=True, max_new_tokens=3, stop_at_eot=False)
    assert steps[0].trace["blocks.0.attn.pattern"].shape[-2:] == (5, 5)  # prefill: whole prompt
    assert steps[2].trace["blocks.0.attn.pattern"].shape[-2:] == (1, 7)  # one query, all keys
    uncached = run(lm, "Hello", trace=True, use_cache=False, max_new_tokens=3, stop_at_eot=False)
    torch.testing.assert_close(
        steps[2].trace["blocks.1.attn.pattern"][..., -1:, :],
        uncached[2].trace["blocks.1.attn.pattern"][..., -1:, :],
        atol=1e-6,
        rtol=1e-5,
    )
    assert run(lm, "Hello", max_new_tokens=1)[0].trace is None


def test_a_grouped_query_decode_step_traces_the_patterns_a_full_forward_does():
    """A cached decode step of a GQA model computes its scores per key head (no copy of every
    key); each pattern row equals the one a forward over the whole prefix computes."""
    cfg = tfm.ModelConfig.preset("tiny").replace(
        pos_encoding="rope",
        norm="rmsnorm",
        activation="swiglu",
        bias=False,
        n_head=4,
        n_kv_head=2,
        tied_embeddings=False,
    )
    assert cfg.n_head // cfg.n_kv_head == 2  # two query heads per key head
    lm = tfm.random_model(cfg, seed=5)
    kw = dict(seed=1, trace=True, stop_at_eot=False)
    cached = list(tfm.generate(lm, "Once upon a time", 5, 0.8, use_cache=True, **kw))
    full = list(tfm.generate(lm, "Once upon a time", 5, 0.8, use_cache=False, **kw))
    assert [s.token_id for s in cached] == [s.token_id for s in full]
    for a, b in zip(cached[1:], full[1:]):
        assert a.trace.pattern(0).shape[-2] == 1  # a decode step: one query
        for layer in range(cfg.n_layer):
            torch.testing.assert_close(
                a.trace.pattern(layer)[:, -1], b.trace.pattern(layer)[:, -1], atol=1e-6, rtol=1e-5
            )


# ---- the shared model is never touched ------------------------------------------------


def test_global_rng_untouched(lm):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    run(lm, seed=4, max_new_tokens=10, top_p=0.9, stop_at_eot=False)
    assert torch.equal(torch.get_rng_state(), before)


def test_threads_match_serial(lm):
    settings = [
        dict(seed=s, temperature=0.8 + 0.1 * s, top_k=10 * s, max_new_tokens=15, stop_at_eot=False) for s in range(4)
    ]
    serial = [ids(run(lm, f"p{i}", **kw)) for i, kw in enumerate(settings)]
    results = [None] * len(settings)

    def work(i):
        results[i] = ids(run(lm, f"p{i}", trace=i % 2 == 0, **settings[i]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(settings))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == serial


def _hook_count(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules())


def test_model_state_and_hooks_unchanged(lm):
    state = {k: v.clone() for k, v in lm.model.state_dict().items()}
    attrs, hooks, training = set(vars(lm.model)), _hook_count(lm.model), lm.model.training
    run(lm, trace=True, max_new_tokens=4, stop_at_eot=False)
    run(lm, use_cache=False, max_new_tokens=4, stop_at_eot=False)
    after = lm.model.state_dict()
    assert state.keys() == after.keys() and all(torch.equal(state[k], after[k]) for k in state)
    assert set(vars(lm.model)) == attrs and _hook_count(lm.model) == hooks and lm.model.training == training


def test_step_is_frozen_and_summary_is_plain(lm):
    step = run(lm, max_new_tokens=1)[0]
    assert isinstance(step, Step)
    with pytest.raises(AttributeError):
        step.token_id = 3
    summary = step.summary()
    assert summary["token_id"] == step.token_id
    assert not any(isinstance(v, torch.Tensor) for v in summary.values())
    assert step.elapsed_s >= step.step_s > 0


def test_training_mode_model_with_dropout_is_refused():
    lm = random_model(ModelConfig.preset("tiny", dropout=0.1))
    lm.model.train()
    try:
        with pytest.raises(ValueError, match="training mode"):
            tfm.generate(lm, "hi")
    finally:
        lm.model.eval()
    assert len(run(lm, max_new_tokens=2, stop_at_eot=False)) == 2


def test_padded_vocabulary_rows_are_never_drawn():
    """Model rows beyond the tokenizer (e.g. nanoGPT's 50304 vs 50257) are masked to -inf."""
    lm = random_model(ModelConfig.preset("tiny", vocab_size=1000), tokenizer=bytes_tokenizer(), seed=2)
    steps = run(lm, "a", max_new_tokens=30, temperature=5.0, stop_at_eot=False)  # hot: near uniform
    assert len(steps) == 30 and all(s.token_id < 257 for s in steps)
    assert all(torch.isinf(s.logits[257:]).all() and s.breakdown.final[257:].sum() == 0 for s in steps)
    assert torch.isfinite(steps[0].logits[:257]).all()


# ---- the timeline's record of a step ----------------------------------------------------


def test_step_record_keeps_the_predicting_rows_of_a_full_forward(lm):
    from tfm.generation.timeline import step_record

    steps = list(tfm.generate(lm, "Hello there", max_new_tokens=3, seed=4, trace=True, stop_at_eot=False))
    for step in steps:
        rec = step_record(step)
        assert (rec.token_id, rec.prob, rec.rank, rec.stop_reason) == (
            step.token_id,
            step.prob,
            step.rank,
            step.stop_reason,
        )
        assert rec.entropy_after == float(step.breakdown.entropy_after) and torch.equal(rec.logits, step.logits)
        seq = list(prepare_prompt(lm, "Hello there").ids) + [s.token_id for s in steps[: step.index]]  # fed so far
        with torch.no_grad():
            full = lm.model(torch.tensor([seq]), trace=True, lazy=False).trace  # oracle: no cache
        for layer in range(lm.config.n_layer):
            torch.testing.assert_close(rec.attn[layer], full.pattern(layer, 0)[:, -1, :], atol=1e-5, rtol=1e-5)
        want = torch.stack([s[-1] for _, s in full.residual_streams(0)])
        torch.testing.assert_close(rec.resid, want, atol=1e-5, rtol=1e-5)
        assert rec.nbytes == sum(t.numel() * 4 for t in (rec.logits, rec.attn, rec.resid))
    bare = step_record(steps[0], keep_tensors=False)
    assert bare.logits is None and bare.attn is None and bare.nbytes == 0
