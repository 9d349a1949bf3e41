"""tfm.analysis: head scores with TransformerLens `detect_head` semantics on hand-built patterns
whose answer is known, the detection patterns against TransformerLens's own definitions,
entropy, rollout, logit lens, parameter counts, residual norms and the induction probe."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from tfm import analysis as A
from tfm.analysis.lens import logit
from tfm.core.config import ModelConfig
from tfm.core.model import GPT
from tfm.core.trace import Trace

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread


def fake_trace(patterns: torch.Tensor) -> Trace:
    """A Trace holding only attention patterns: (L, H, T, T) -> blocks.{l}.attn.pattern (1, H, T, T)."""
    return Trace({f"blocks.{l}.attn.pattern": p[None] for l, p in enumerate(patterns)}, ())


def random_causal_pattern(h: int, t: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(h, t, t, generator=g) * 2
    return scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)


# ---- TransformerLens's definitions (transformer_lens/head_detector.py), as the oracle ------------


def tl_previous_token(tokens: torch.Tensor) -> torch.Tensor:
    n = tokens.shape[-1]
    det = torch.zeros(n, n)
    det[1:, :-1] = torch.eye(n - 1)
    return torch.tril(det)


def tl_duplicate_token(tokens: torch.Tensor) -> torch.Tensor:
    token_pattern = tokens.repeat(tokens.shape[-1], 1).numpy()
    eq_mask = np.equal(token_pattern, token_pattern.T).astype(int)
    np.fill_diagonal(eq_mask, 0)
    return torch.tril(torch.as_tensor(eq_mask).float())


def tl_induction(tokens: torch.Tensor) -> torch.Tensor:
    dup = tl_duplicate_token(tokens)
    shifted = torch.roll(dup, shifts=1, dims=1)
    return torch.tril(torch.cat((torch.zeros(dup.shape[0], 1), shifted[:, 1:]), dim=1))


def tl_score_mul(pattern: torch.Tensor, detection: torch.Tensor) -> float:
    return ((pattern * detection).sum() / pattern.sum()).item()


@pytest.mark.parametrize("seed", range(4))
def test_detection_patterns_equal_transformerlens(seed):
    tokens = torch.randint(0, 5, (23,), generator=torch.Generator().manual_seed(seed))  # many repeats
    t = tokens.shape[0]
    assert torch.equal(A.previous_token_detection(t), tl_previous_token(tokens))
    assert torch.equal(A.duplicate_token_detection(tokens), tl_duplicate_token(tokens))
    assert torch.equal(A.induction_detection(tokens), tl_induction(tokens))
    first = torch.zeros(t, t)
    first[:, 0] = 1
    assert torch.equal(A.first_token_detection(t), first)
    pats = random_causal_pattern(3, t, seed)
    for det in (tl_previous_token(tokens), tl_duplicate_token(tokens), tl_induction(tokens)):
        got = A.detection_score(pats, det)
        assert got.shape == (3,)
        for h in range(3):
            assert got[h].item() == pytest.approx(tl_score_mul(pats[h], det), abs=1e-6)


def test_perfect_previous_token_head_scores_t_minus_1_over_t():
    t = 10
    prev = torch.zeros(t, t)
    prev[0, 0] = 1
    prev[torch.arange(1, t), torch.arange(0, t - 1)] = 1
    sink = torch.zeros(t, t)
    sink[:, 0] = 1
    pats = torch.stack([prev, sink, torch.eye(t)])[None]  # (1, 3, T, T)
    scores = A.head_scores(fake_trace(pats), torch.arange(t))
    assert scores["previous_token"][0].tolist() == pytest.approx([(t - 1) / t, 1 / t, 0.0])
    assert scores["first_token"][0].tolist() == pytest.approx([2 / t, 1.0, 1 / t])  # rows 0 and 1 of prev hit column 0
    assert scores["duplicate_token"][0].tolist() == [0.0, 0.0, 0.0]  # no repeated tokens
    assert scores["entropy"][0].tolist() == [0.0, 0.0, 0.0]  # one-hot rows, no NaN
    for v in scores.values():
        assert v.shape == (1, 3)


def test_induction_head_on_a_repeated_sequence():
    n, reps = 6, 5
    half = torch.randperm(50, generator=torch.Generator().manual_seed(0))[:n]
    tokens = half.repeat(reps)  # T = 30, period 6
    t = tokens.shape[0]
    ind = torch.zeros(t, t)
    dup = torch.zeros(t, t)
    for q in range(t):
        if q < n:
            ind[q, 0] = dup[q, 0] = 1  # first copy: nothing to look back at, rest on position 0
        else:
            ind[q, q - n + 1] = 1  # the token after the previous copy of the current token
            dup[q, q - n] = 1  # the previous copy of the current token
    scores = A.head_scores(fake_trace(torch.stack([ind, dup])[None]), tokens)
    # TransformerLens "mul": mass on predicted keys / all mass. Every row after the first copy is
    # fully induction-like, so the score is (T - n) / T (-> 1 as the sequence repeats more).
    assert scores["induction"][0, 0].item() == pytest.approx((t - n) / t)
    assert scores["duplicate_token"][0, 1].item() == pytest.approx((t - n) / t)
    assert scores["induction"][0, 1].item() == pytest.approx(0.0)
    assert scores["duplicate_token"][0, 0].item() == pytest.approx(0.0)
    # induction rows are shifted duplicate rows
    assert scores["previous_token"][0].tolist() == pytest.approx([1 / t, 1 / t])  # only row 1 -> 0


def test_entropy_of_uniform_rows_is_log_n():
    t = 7
    uniform = torch.tril(torch.ones(t, t))
    uniform = uniform / uniform.sum(-1, keepdim=True)  # row q: 1/(q+1) each
    got = A.entropy(uniform)
    torch.testing.assert_close(got, torch.log(torch.arange(1, t + 1, dtype=torch.float32)), atol=1e-6, rtol=0)
    full = torch.full((3, 5), 0.2)
    torch.testing.assert_close(A.entropy(full), torch.full((3,), math.log(5)), atol=1e-6, rtol=0)
    scores = A.head_scores(fake_trace(uniform[None, None]), torch.arange(t))
    assert scores["entropy"][0, 0].item() == pytest.approx(sum(math.log(q + 1) for q in range(t)) / t, abs=1e-6)


def traced(model: GPT, n: int = 12, seed: int = 0):
    idx = torch.randint(0, model.config.vocab_size, (1, n), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        out = model(idx, trace=True)
    return idx, out


@pytest.mark.parametrize("reduce", ["mean", "max"])
def test_rollout_is_the_product_of_residual_averaged_layers(reduce, make_model):
    model = make_model("tiny", n_layer=3, n_head=4, d_model=32)
    _, out = traced(model)
    roll = A.rollout(out.trace, head_reduce=reduce)
    assert roll.shape == (3, 12, 12)
    torch.testing.assert_close(roll.sum(-1), torch.ones(3, 12), atol=1e-5, rtol=0)
    assert torch.all(roll.triu(1) == 0)
    mats = []
    for l in range(3):
        p = out.trace[f"blocks.{l}.attn.pattern"][0]
        a = p.mean(0) if reduce == "mean" else p.max(0).values
        a = 0.5 * a + 0.5 * torch.eye(12)
        mats.append(a / a.sum(-1, keepdim=True))
    torch.testing.assert_close(roll[0], mats[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(roll[1], mats[1] @ mats[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(roll[2], mats[2] @ mats[1] @ mats[0], atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="head_reduce='sum': choose 'mean' or 'max'"):
        A.rollout(out.trace, head_reduce="sum")


@pytest.mark.parametrize(
    "overrides",
    [dict(), dict(norm="rmsnorm", pos_encoding="rope"), dict(norm_placement="post")],
    ids=["pre", "pre-rms-rope", "post"],
)
def test_logit_lens_last_row_is_the_models_prediction(overrides, make_model):
    model = make_model("tiny", **overrides)
    _, out = traced(model)
    lens = logit.logit_lens(model, out.trace, k=4)
    assert lens.labels == ["embed", "block 0", "block 1"]
    assert lens.probs.shape == (3, 12, 257) and lens.top_ids.shape == lens.top_probs.shape == (3, 12, 4)
    torch.testing.assert_close(lens.probs[-1], out.logits[0].softmax(-1), atol=1e-6, rtol=0)
    torch.testing.assert_close(lens.probs.sum(-1), torch.ones(3, 12), atol=1e-5, rtol=0)
    torch.testing.assert_close(lens.top_probs, lens.probs.gather(-1, lens.top_ids), atol=0, rtol=0)
    assert torch.all(lens.top_probs[..., :-1] >= lens.top_probs[..., 1:])
    # the first row decodes the embedding stream through the same final norm and unembedding
    x = out.trace["blocks.0.resid_pre"][0]
    with torch.no_grad():
        first = model.unembed(model.ln_final(x) if model.ln_final is not None else x).softmax(-1)
    torch.testing.assert_close(lens.probs[0], first, atol=1e-6, rtol=0)


def test_logit_lens_window_without_probs_equals_the_full_lens(make_model):
    model = make_model("tiny")
    _, out = traced(model)
    full = logit.logit_lens(model, out.trace, k=3)
    win = logit.logit_lens(model, out.trace, k=3, positions=slice(4, 9), keep_probs=False)
    assert win.probs is None and win.top_ids.shape == (3, 5, 3)
    assert torch.equal(win.top_ids, full.top_ids[:, 4:9])
    torch.testing.assert_close(win.top_probs, full.top_probs[:, 4:9], atol=1e-6, rtol=0)
    # decode_streams on stored streams (what the generation page keeps per step) agrees too
    streams = logit.residual_streams(out.trace)[:, -1:]  # (L+1, 1, D)
    last = logit.decode_streams(model, streams, k=3)
    torch.testing.assert_close(last.probs, full.probs[:, -1:], atol=1e-6, rtol=0)


@pytest.mark.parametrize("chunk", [5, 12, 1000])  # boundaries inside a layer, at a layer's end, one product
def test_logit_lens_in_row_chunks_equals_each_layer_decoded_alone(chunk, make_model, monkeypatch):
    """decode_streams reads LENS_ROWS (layer, position) rows per unembedding product: chunks that
    cut a layer, or hold several, give each layer's own decoding (the oracle: one layer at a time)."""
    model = make_model("tiny", norm="rmsnorm")
    _, out = traced(model)
    streams = logit.residual_streams(out.trace)  # (L+1, 12, D)
    monkeypatch.setattr(logit, "LENS_ROWS", chunk)
    lens = logit.decode_streams(model, streams, k=4, n_words=250)
    small = logit.decode_streams(model, streams, k=4, keep_probs=False, n_words=250)
    with torch.no_grad():
        want = torch.stack([model.unembed(model.ln_final(x))[..., :250].softmax(-1) for x in streams])
    assert lens.probs.shape == want.shape == (3, 12, 250)
    torch.testing.assert_close(lens.probs, want, atol=1e-6, rtol=0)
    assert torch.equal(lens.top_ids, want.topk(4, dim=-1).indices)
    assert torch.equal(small.top_ids, lens.top_ids) and torch.equal(small.top_probs, lens.top_probs)


def expected_counts(cfg: ModelConfig) -> dict[str, int]:
    d, f, v, L, b = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_layer, cfg.bias
    attention = 4 * d * d + (4 * d if b else 0)
    if cfg.activation == "swiglu":
        mlp = 3 * d * f + ((2 * f + d) if b else 0)
    else:
        mlp = 2 * d * f + ((f + d) if b else 0)
    norm = d + (d if (b and cfg.norm == "layernorm") else 0)
    n_norms = 2 * L + (1 if cfg.norm_placement == "pre" else 0)
    return {
        "embeddings": v * d + (cfg.context_length * d if cfg.pos_encoding == "learned" else 0),
        "attention": L * attention,
        "mlp": L * mlp,
        "norms": n_norms * norm,
        "unembedding": 0 if cfg.tied_embeddings else v * d,
    }


def test_param_counts_match_the_formulas_for_every_variant():
    for pos, norm, place, act, bias, tied in itertools.product(
        ("learned", "sinusoidal", "rope", "none"),
        ("layernorm", "rmsnorm"),
        ("pre", "post"),
        ("gelu", "gelu_tanh", "relu", "swiglu"),
        (True, False),
        (True, False),
    ):
        cfg = ModelConfig(
            vocab_size=50,
            context_length=12,
            d_model=8,
            n_layer=2,
            n_head=2,
            d_ff=24,
            pos_encoding=pos,
            norm=norm,
            norm_placement=place,
            activation=act,
            bias=bias,
            tied_embeddings=tied,
        )
        model = GPT(cfg)
        counts = A.param_counts(model)
        assert counts == expected_counts(cfg), cfg
        assert sum(counts.values()) == model.num_params() == sum(p.numel() for p in set(model.parameters()))


def test_param_counts_gpt2_small_is_124m():
    with torch.device("meta"):
        model = GPT(ModelConfig.preset("gpt2"))
    counts = A.param_counts(model)
    assert sum(counts.values()) == 124_439_808  # GPT-2 small, tied embeddings
    assert counts["attention"] == 12 * (4 * 768 * 768 + 4 * 768)


def test_residual_norms_and_norm_stats(make_model):
    model = make_model("tiny", n_layer=3)
    _, out = traced(model, n=9)
    tr = out.trace
    norms = A.residual_norms(tr)
    assert norms["resid"].shape == (4, 9) and norms["attn_out"].shape == norms["mlp_out"].shape == (3, 9)
    torch.testing.assert_close(norms["resid"][0], tr["blocks.0.resid_pre"][0].norm(dim=-1), atol=0, rtol=0)
    for l in range(3):
        torch.testing.assert_close(norms["resid"][l + 1], tr[f"blocks.{l}.resid_post"][0].norm(dim=-1), atol=0, rtol=0)
        torch.testing.assert_close(norms["attn_out"][l], tr[f"blocks.{l}.attn_out"][0].norm(dim=-1), atol=0, rtol=0)
        torch.testing.assert_close(norms["mlp_out"][l], tr[f"blocks.{l}.mlp_out"][0].norm(dim=-1), atol=0, rtol=0)
    stats = A.norm_stats(tr)
    assert set(stats) == {
        f"{n}.{s}"
        for n in ("ln1", "ln2")
        for s in ("input_mean", "input_std", "output_mean", "output_std", "input_norm")
    }
    x = tr["blocks.2.ln2.input"][0]
    torch.testing.assert_close(stats["ln2.input_mean"][2], x.mean(-1), atol=1e-6, rtol=0)
    torch.testing.assert_close(stats["ln2.input_norm"][2], x.norm(dim=-1), atol=1e-6, rtol=0)
    torch.testing.assert_close(
        stats["ln1.output_std"][1], tr["blocks.1.ln1.output"][0].std(-1, unbiased=False), atol=1e-6, rtol=0
    )
    _, out_rms = traced(make_model("tiny", norm="rmsnorm"))
    assert "ln1.input_rms" in A.norm_stats(out_rms.trace) and "ln1.input_std" not in A.norm_stats(out_rms.trace)


def test_induction_probe_on_a_random_model():
    model = GPT(ModelConfig.preset("tiny", n_layer=3, context_length=64)).eval()
    model.reset_parameters(torch.Generator().manual_seed(0))
    scores = A.induction_probe(model, seq_len=20, seed=1)
    tokens = scores.pop("tokens")
    assert tokens.shape == (40,) and torch.equal(tokens[:20], tokens[20:])
    assert set(scores) == {"previous_token", "first_token", "duplicate_token", "induction", "entropy"}
    for name, v in scores.items():
        assert v.shape == (3, 2), name
        assert torch.all(torch.isfinite(v)), name
    for name in ("previous_token", "first_token", "duplicate_token", "induction"):
        assert torch.all((scores[name] >= 0) & (scores[name] <= 1)), name
    again = A.induction_probe(model, seq_len=20, seed=1)
    assert torch.equal(again["induction"], scores["induction"])
    with_bos = A.induction_probe(model, seq_len=20, seed=1, bos=256)
    assert with_bos["tokens"].shape == (41,) and with_bos["tokens"][0] == 256
    with pytest.raises(ValueError, match="seq_len=40 twice does not fit the context length 64"):
        A.induction_probe(model, seq_len=40)


def test_head_table_is_the_prompt_scores_and_the_probe_with_its_own_settings():
    """head_table = head_scores on the prompt + induction_probe at PROBE_LEN (seed PROBE_SEED,
    after the end-of-text token): the one place the pages and the model card get them from."""
    import tfm

    lm = tfm.random_model(ModelConfig.preset("tiny", n_layer=3, context_length=128), seed=2)
    ids = lm.tokenizer.encode("abcab abcab xyz abc")
    trace = lm.model(torch.tensor([ids]), trace=True).trace
    calls = []
    heads = A.head_table(lm, trace, ids, progress=lambda done, total: calls.append((done, total)))
    assert heads.probe == A.ProbeSettings(A.PROBE_LEN, A.PROBE_SEED, lm.tokenizer.eot_id) and heads.n_tokens == len(ids)
    assert list(heads.scores) == [*A.PROMPT_SCORES, *A.PROBE_SCORES] and list(heads.help()) == list(heads.scores)
    want = A.head_scores(trace, ids)
    probe = A.induction_probe(lm.model, A.PROBE_LEN, A.PROBE_SEED, bos=lm.tokenizer.eot_id)
    for name in A.PROMPT_SCORES:
        assert torch.equal(heads.scores[name], want[name]), name
    assert torch.equal(heads.scores["repeat_induction"], probe["induction"])
    assert torch.equal(heads.scores["repeat_previous_token"], probe["previous_token"])
    assert calls == [(i, 6) for i in range(1, 7)]  # both loops, one count
    alone = A.head_table(lm)  # probe only (the home page)
    assert set(alone.scores) == set(A.PROBE_SCORES) and alone.n_tokens == 0
    assert torch.equal(alone.scores["repeat_induction"], probe["induction"])


def test_head_table_fits_the_probe_to_the_context():
    import tfm

    short = tfm.random_model(ModelConfig.preset("tiny", context_length=21))
    assert A.probe_settings(short) == A.ProbeSettings(10, A.PROBE_SEED, 256)  # 1 + 2 * 10 tokens fit
    assert A.head_table(short).scores["repeat_induction"].shape == (2, 2)
    none = tfm.random_model(ModelConfig.preset("tiny", context_length=4))
    assert A.probe_settings(none) is None
    assert A.head_table(none).scores == {} and A.head_table(none).probe is None
    tok = tfm.loaders.loading.bytes_tokenizer()
    small = tfm.random_model(ModelConfig.preset("tiny", vocab_size=256, context_length=64), tokenizer=tok)
    assert A.probe_settings(small).bos is None  # the end-of-text id has no row in this model


def test_logit_lens_leaves_out_padded_vocabulary_rows():
    """A model whose vocabulary has more rows than its tokenizer has words: the lens must never
    name a row that is no token, and must renormalise over the real words (as sampling does)."""
    torch.manual_seed(0)
    model = GPT(ModelConfig.preset("tiny")).eval()
    out = model(torch.randint(0, 50, (1, 9)), trace=True)
    n_words = 60
    lens = logit.logit_lens(model, out.trace, k=4, n_words=n_words)
    assert int(lens.top_ids.max()) < n_words
    streams = logit.residual_streams(out.trace)
    want = model.unembed(model.ln_final(streams))[..., :n_words].softmax(-1)
    torch.testing.assert_close(lens.probs, want)
    torch.testing.assert_close(lens.top_probs, want.topk(4, dim=-1).values)
