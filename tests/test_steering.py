"""Steering (tfm.core.edits.Steer, tfm.analysis.steering.vectors): strength 0 is bit-identical to no
edit, a steer equals writing the steered stream in by hand (Patch), positions are absolute
across KV-cached generation steps, steered generation is reproducible per seed, the batched
sweep equals one forward per strength, the shared model's weights never change, and bad input
gets one clear message."""

from __future__ import annotations

import hashlib
import math

import pytest
import torch

import tfm
from tfm.analysis.steering import calibrate as calib
from tfm.analysis.steering import vectors as steering
from tfm.analysis.dictionaries.sae import stream_at
from tfm.core import edits as E

pytestmark = pytest.mark.usefixtures("one_thread")
IDS = torch.tensor([[3, 17, 200, 5, 99, 17, 200, 41, 7, 3]])


@pytest.fixture
def model(make_model):
    return make_model("tiny", n_layer=3, n_head=4, d_model=16)


@pytest.fixture(scope="module")
def lm():
    return tfm.load("default", device="cpu")


def _logits(model, edits=None, ids=IDS):
    with torch.no_grad():
        return model(ids, edits=edits).logits


def _weights_hash(model) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def test_strength_zero_is_bit_identical(model):
    v = torch.randn(16)
    for point in ("resid_pre", "resid_post"):
        assert torch.equal(_logits(model, [E.Steer(1, v, 0.0, point=point)]), _logits(model))
    assert not torch.equal(_logits(model, [E.Steer(1, v, 0.5)]), _logits(model))


def test_steer_equals_patching_the_steered_stream(model):
    v, s = torch.randn(16), 2.5
    with torch.no_grad():
        x = stream_at(model, IDS, 2)[0]  # (T, D) entering block 2
    want = x.clone()
    want[4:7] += s * v
    got = _logits(model, [E.Steer(2, v, s, start=4, stop=7)])
    assert torch.allclose(got, _logits(model, [E.Patch("blocks.2.resid_pre", want)]), atol=1e-6)
    # resid_post of block 1 is resid_pre of block 2
    assert torch.allclose(got, _logits(model, [E.Steer(1, v, s, start=4, stop=7, point="resid_post")]), atol=1e-6)


def test_steer_composes_with_ablation_and_rows(model):
    v = torch.randn(16)
    both = _logits(model, [E.Steer(0, v, 1.0), E.AblateHead(1, 2)])
    assert not torch.allclose(both, _logits(model, [E.AblateHead(1, 2)]), atol=1e-4)
    batch = IDS.repeat(2, 1)
    out = _logits(model, [E.Steer(0, v, 1.0, row=1)], batch)
    assert torch.equal(out[0], _logits(model)[0])
    assert torch.allclose(out[1], _logits(model, [E.Steer(0, v, 1.0)])[0], atol=1e-6)


def test_steer_skips_positions_as_patching_them_would(model):
    v, s = torch.randn(16), 1.5
    with torch.no_grad():
        x = stream_at(model, IDS, 1)[0]
    want = x.clone()
    for p in (1, 2, 4, 6, 7, 8, 9):  # 3 and 5 skipped, 0 before start
        want[p] += s * v
    got = _logits(model, [E.Steer(1, v, s, start=1, skip=(5, 3, 5))])
    assert torch.allclose(got, _logits(model, [E.Patch("blocks.1.resid_pre", want)]), atol=1e-6)
    assert E.Steer(1, v, s, skip=(5, 3, 5)).skip == (3, 5)
    assert E.Steer(0, v, s, start=2, stop=3, skip=(2,)).window(0, 10) is None  # nothing left to steer
    with pytest.raises(ValueError, match="skip must be integers"):
        E.Steer(0, v, s, skip=(-1,))


def test_sweep_equals_one_forward_per_strength(lm):
    ids = lm.tokenizer.prompt_ids("Once upon a time there was a little")
    vec = steering.pair_vector(lm, "happy happy joy", "sad and angry", 3)
    tokens = [lm.tokenizer.encode(w)[0] for w in (" girl", " happy", " sad")]
    strengths = [-1.0, 0.0, 0.5, 1.5]
    got = steering.sweep_tokens(lm, ids, vec, strengths, tokens)
    first = steering.sweep_tokens(lm, ids, vec, strengths, tokens, include_first=True)
    for s, p, q in zip(strengths, got, first):
        with torch.no_grad():
            probs = lm.model(torch.tensor([ids]), edits=[vec.edit(s, start=1)]).logits[0, -1].softmax(-1)
            with_first = lm.model(torch.tensor([ids]), edits=[vec.edit(s)]).logits[0, -1].softmax(-1)
        torch.testing.assert_close(p, probs[tokens], rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(q, with_first[tokens], rtol=1e-4, atol=1e-7)
    assert len(set(round(float(p), 6) for p in got[:, 0])) == 4 and not torch.allclose(got[0], first[0])
    torch.testing.assert_close(steering.sweep(lm, ids, vec, strengths, tokens[1]), got[:, 1])


def test_steered_generation_reproducible_cached_and_model_unchanged(lm):
    before = _weights_hash(lm.model)
    vec = steering.pair_vector(lm, "The dog ran to the park", "The cat sat", 2, how="mean")
    n = len(lm.tokenizer.prompt_ids("Once upon a time"))
    edits = [vec.edit(6.0, start=n)]  # the generated tokens only

    def text(use_cache=True, edits=edits):
        g = tfm.generate(lm, "Once upon a time", 12, temperature=1.0, seed=7, use_cache=use_cache, edits=edits)
        return [s.token_id for s in g]

    a = text()
    assert a == text()  # same seed, same steered tokens
    assert a == text(use_cache=False)  # absolute positions across cached steps
    assert a != text(edits=())  # and the steering did something
    plain, steered = steering.steered_pair(lm, "Once upon a time", vec, 0.0, seed=3, max_new_tokens=10)
    assert plain == steered  # strength 0: the same text
    steering.sweep(lm, lm.tokenizer.prompt_ids("Hi"), vec, [1.0, 5.0], 5)
    assert _weights_hash(lm.model) == before


@pytest.mark.parametrize("strength", [math.nan, math.inf, -math.inf, 1e6, True, "3"])
def test_bad_strengths_refused(strength):
    with pytest.raises(ValueError, match="strength"):
        E.Steer(0, torch.ones(4), strength)


def test_bad_vectors_layers_and_prompts(lm, model):
    with pytest.raises(ValueError, match="NaN or infinite"):
        E.Steer(0, torch.tensor([1.0, math.nan]), 1.0)
    with pytest.raises(ValueError, match="residual stream has 16"):
        _logits(model, [E.Steer(0, torch.ones(5), 1.0)])
    with pytest.raises(ValueError, match="layer 3 does not exist"):
        _logits(model, [E.Steer(3, torch.ones(16), 1.0)])
    with pytest.raises(ValueError, match="layer"):
        steering.pair_vector(lm, "a", "b", lm.config.n_layer)
    with pytest.raises(ValueError, match="negative prompt is empty"):
        steering.pair_vector(lm, "a", "", 1)
    with pytest.raises(ValueError, match="positive prompt is empty"):
        steering.pair_vector(lm, "", "a", 1)
    with pytest.raises(ValueError, match="reads at most"):
        steering.pair_vector(lm, "a " * 400, "b", 1)
    with pytest.raises(ValueError, match="start < stop"):
        E.Steer(0, torch.ones(4), 1.0, start=5, stop=5)
    with pytest.raises(ValueError, match="strength"):
        tfm.generate(lm, "Hi", 3, edits=[E.Steer(0, torch.ones(lm.config.d_model), math.nan)])
    with pytest.raises(ValueError, match="strengths"):
        steering.sweep(lm, [1, 2], steering.pair_vector(lm, "a", "b", 1), [], 3)


def _read(lm, text: str, layer: int) -> torch.Tensor:
    """A prompt's own tokens after the prefix, by hand: (n, D) entering `layer`."""
    prefix = lm.tokenizer.encode(steering.NEUTRAL_PREFIX)
    ids = prefix + lm.tokenizer.prompt_ids(text)
    with torch.no_grad():
        return stream_at(lm.model, torch.tensor([ids]), layer)[0, len(prefix) :]


def test_pairs_of_any_lengths_are_read_after_a_prefix_and_scaled_to_the_stream(lm):
    short, long = "Yes", "She was very very happy and smiled all day long in the sun"
    norms = steering.stream_norms(lm)
    v_last = steering.pair_vector(lm, long, short, 3, how="last")
    v_mean = steering.pair_vector(lm, long, short, 3)
    want_last = _read(lm, long, 3)[-1] - _read(lm, short, 3)[-1]
    want_mean = _read(lm, long, 3).mean(0) - _read(lm, short, 3).mean(0)  # "Yes" is one token, read at position 1
    for v, want in ((v_last, want_last), (v_mean, want_mean)):
        assert math.isclose(v.raw_length, float(want.norm()), rel_tol=1e-5)
        torch.testing.assert_close(v.vector, want / want.norm() * norms[3], rtol=1e-5, atol=1e-6)
        assert math.isclose(float(v.vector.norm()), norms[3], rel_tol=1e-5)  # strength 1: one typical stream
    with pytest.raises(ValueError, match="same stream"):
        steering.pair_vector(lm, "happy", "happy", 2)


def test_a_pair_ending_alike_has_no_last_token_direction_entering_block_0_and_says_why(lm):
    """Entering block 0 a position holds only its token (and its place): two prompts of one length
    that end in the same token give the same last stream there. A message says why and what to
    change (the Steer page shows it as a warning); read elsewhere, the pair has a direction."""
    pos, neg = "The cat sat.", "The dog sat."
    ids = [lm.tokenizer.prompt_ids(t) for t in (pos, neg)]
    assert len(ids[0]) == len(ids[1]) and ids[0][-1] == ids[1][-1] and ids[0] != ids[1]
    with pytest.raises(steering.SameStream, match="entering block 0 a position holds only its own token"):
        steering.pair_vector(lm, pos, neg, 0, how="last")
    assert steering.pair_vector(lm, pos, neg, 0).raw_length > 0  # over every token they differ
    assert steering.pair_vector(lm, pos, neg, 1, how="last").raw_length > 0  # a block in, the last token read the rest
    with pytest.raises(steering.SameStream, match="same stream entering block 0: make them differ"):
        steering.pair_vector(lm, pos, pos, 0, how="last")


def test_stream_norms_are_each_layers_median_off_the_sink(lm):
    ids, read = steering.reading_ids(lm, steering.NEUTRAL_TEXT, "neutral")
    assert read == list(range(1, len(ids))) and ids[0] == lm.tokenizer.encode(steering.NEUTRAL_PREFIX)[0]
    with torch.no_grad():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    streams = trace.residual_streams()  # entering block 0, leaving every block
    want = [float(x[1:].norm(dim=-1).median()) for _, x in streams[: lm.config.n_layer]]
    assert steering.stream_norms(lm) == pytest.approx(want, rel=1e-5)


def test_love_hate_is_a_stream_sized_direction_at_every_layer_and_steers(lm):
    """Read at position 0, a one-token pair's "direction" is the sink's outsized stream (on SmolLM2
    168x the stream's median): read after the prefix it is stream-sized, and it moves the next token
    toward " Love" (two tokens here: its first is followed) and " love", away from " Hate"."""
    norms = steering.stream_norms(lm)
    for layer in range(lm.config.n_layer):
        v = steering.pair_vector(lm, " Love", " Hate", layer, norms=norms)
        assert 0 < v.raw_length < 3 * norms[layer], (layer, v.raw_length, norms[layer])
    v = steering.pair_vector(lm, " Love", " Hate", 3, norms=norms)
    ids = lm.tokenizer.prompt_ids("I looked at him and felt")
    tokens = [lm.tokenizer.encode(w)[0] for w in (" Love", " Hate", " love")]
    (l_away, h_away, love_away), (l0, h0, love0), (l_to, h_to, love_to) = steering.sweep_tokens(
        lm, ids, v, [-0.6, 0.0, 0.6], tokens
    ).tolist()
    assert l_to > 3 * l0 > 3 * l_away and h_away > 3 * h0 > 3 * h_to and love_to > 1.5 * love0 > 1.5 * love_away
    for seed in range(3):
        _, text = steering.steered_pair(lm, "I looked at him and felt", v, 0.6, seed, 30, 0.8)
        ids = lm.tokenizer.encode(text)
        assert calib.longest_run(ids) < len(ids) // 2 and calib.distinct_ratio(text) > 0.5, text


def test_steering_skips_the_sink_and_special_tokens_unless_asked(lm):
    tok = lm.tokenizer
    ids = tok.prompt_ids("Once upon a time") + [tok.eot_id] + tok.prompt_ids(" there")
    eot_at = ids.index(tok.eot_id)
    assert steering.steer_span(tok, ids) == (1, None, (eot_at,))
    assert steering.steer_span(tok, ids, "prompt") == (1, len(ids), (eot_at,))
    assert steering.steer_span(tok, ids, "all", include_first=True) == (0, None, ())
    assert steering.steer_span(tok, ids, "generated") == (len(ids), None, ())
    vec = steering.pair_vector(lm, "happy", "sad", 2)

    def tokens(edits):
        return [s.token_id for s in tfm.generate(lm, "Once upon a time", 8, 1.0, seed=4, edits=edits)]

    plain, steered = steering.steered_pair(lm, "Once upon a time", vec, 0.8, seed=4, max_new_tokens=8)
    assert steered == tok.decode(tokens([vec.edit(0.8, start=1)])) != plain
    _, first = steering.steered_pair(lm, "Once upon a time", vec, 0.8, seed=4, max_new_tokens=8, include_first=True)
    assert first == tok.decode(tokens([vec.edit(0.8)]))
    with pytest.raises(ValueError, match="where="):
        steering.steer_span(tok, ids, "middle")


def test_read_out_is_the_unembedding_through_the_final_gain(lm):
    v = steering.pair_vector(lm, "She was very happy", "Yes", 3, how="last")
    up, up_s, down, down_s = steering.read_out(lm, v.vector, 5)
    g, u = lm.model.ln_final.weight, lm.model.unembed.weight
    d = v.vector * g
    scores = u @ (d - d.mean())
    assert up == scores.topk(5).indices.tolist() and down == (-scores).topk(5).indices.tolist()
    assert up_s[0] >= up_s[-1] and down_s[0] <= down_s[-1]


# ---- calibration (tfm.analysis.steering.calibrate) ------------------------------------------------


@pytest.fixture(scope="module")
def calibration(lm):
    return calib.calibrate(lm)


def test_batched_rows_draw_what_tfm_generate_draws(lm):
    ids = lm.tokenizer.prompt_ids(calib.OPEN_PROMPTS[0])
    vec = steering.pair_vector(lm, *calib.PAIR, 2)
    seeds, edits = [3, 3, 8], [vec.edit(0.6, start=1, row=1), vec.edit(-0.6, start=1, row=2)]
    lex = [calib.lexicon_ids(lm.tokenizer, calib.POSITIVE), calib.lexicon_ids(lm.tokenizer, calib.NEGATIVE)]
    rows, mass = calib.generate_rows(lm, ids, edits, seeds, 12, 0.8, lex)
    eot = lm.tokenizer.eot_id
    for r, (seed, edit) in enumerate(zip(seeds, [None, vec.edit(0.6, start=1), vec.edit(-0.6, start=1)])):
        steps = list(tfm.generate(lm, ids, 12, 0.8, seed=seed, edits=[edit] if edit else []))
        assert rows[r] == [s.token_id for s in steps if s.token_id != eot]
        if len(steps) == 12:  # no end of text: the mean over all 12 steps
            want = [sum(float(s.breakdown.probs[lx].sum()) for s in steps) / 12 for lx in lex]
            assert mass[r].tolist() == pytest.approx(want, rel=1e-4)
    assert rows[0] != rows[1] != rows[2]


def test_damage_is_the_extra_loss_on_neutral_text(lm):
    vec = steering.pair_vector(lm, *calib.PAIR, 2)
    ids, _ = steering.reading_ids(lm, steering.NEUTRAL_TEXT, "neutral")

    def loss(edits):
        with torch.no_grad():
            logits = lm.model(torch.tensor([ids]), edits=edits).logits[0, 1:-1]
        return float(torch.nn.functional.cross_entropy(logits, torch.tensor(ids[2:])))

    got = calib.damage(lm, [vec], [0.3, 0.9])
    for s, d in zip([0.3, 0.9], got[0]):
        want = max(loss([vec.edit(s, start=1)]), loss([vec.edit(-s, start=1)])) - loss([])
        assert math.isclose(float(d), want, rel_tol=1e-3, abs_tol=1e-4)
    assert 0 < got[0, 0] < got[0, 1]


def test_damage_holds_a_chunk_of_logit_rows_and_equals_the_whole(lm, monkeypatch):
    """Gemma 3's 262,144-token vocabulary: the damage forward's 1 + 2 x 2 rows of neutral text are read a
    chunk of logit rows at a time (3 here; the old code held every row's and token's log-softmax),
    equal to one chunk of all of them (the test above: equal to the model's own logits)."""
    from tests.logit_rows import WidestLogits
    from tfm.core import encoder

    vec = steering.pair_vector(lm, *calib.PAIR, 2)
    whole = calib.damage(lm, [vec], [0.3, 0.9])
    monkeypatch.setattr(encoder, "LOGIT_CHUNK_BYTES", 3 * 4 * lm.config.vocab_size)
    calib.damage(lm, [vec], [0.3, 0.9])  # (tfm.core.kernels times a new product shape on 8 rows, once)
    with WidestLogits(lm.config.vocab_size) as seen:
        chunked = calib.damage(lm, [vec], [0.3, 0.9])
    assert 1 <= seen.rows <= 3
    torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-6)


def test_affordable_strength_interpolates_to_the_budget():
    assert calib.affordable([0.2, 0.4, 0.8], [0.1, 0.3, 0.9], 0.6) == (0.6, pytest.approx(0.6))
    assert calib.affordable([0.2, 0.4], [0.1, 0.3], 0.6) == (0.4, 0.3)  # never reached: the largest
    s, d = calib.affordable([0.5], [1.0], 0.6)
    assert s == 0.3 and d == pytest.approx(0.6)  # from 0 at strength 0
    s, d = calib.affordable([0.2, 0.4], [0.1, 0.37], 0.3)
    assert s == 0.34 and d <= 0.3  # cut down to a STEP


def test_affordable_strengths_equal_the_whole_grids_and_probe_past_no_crossing(lm, monkeypatch):
    """Probed PROBE_ROUND strengths at a time, each layer only until its damage reaches the budget:
    the same (strength, damage) as `affordable` over every strength's damage, from fewer rows."""
    strengths = list(calib.STRENGTHS)
    vectors = [steering.pair_vector(lm, *calib.PAIR, layer) for layer in (1, 2, 3)]
    grid = calib.damage(lm, vectors, strengths)  # (3, 6)
    budget = float(grid[:, 1].min() + grid[:, 1].max()) / 2  # some layers cross in the first round, some later
    want = [calib.affordable(strengths, row.tolist(), budget) for row in grid]
    probed, real = [], calib.damage
    monkeypatch.setattr(calib, "damage", lambda lm, v, s, stop=None: probed.append(len(v) * len(s)) or real(lm, v, s))
    got = calib.affordable_strengths(lm, vectors, strengths, budget)
    for (s, d), (ws, wd) in zip(got, want):
        assert s == ws and d == pytest.approx(wd, rel=1e-5, abs=1e-6)
    crossed = [next((i for i, d in enumerate(row) if d >= budget), len(row)) for row in grid.tolist()]
    rounds = [min(c // calib.PROBE_ROUND + 1, -(-len(strengths) // calib.PROBE_ROUND)) for c in crossed]
    assert probed == [calib.PROBE_ROUND * sum(r > k for r in rounds) for k in range(max(rounds))]
    assert sum(probed) < grid.numel() and len(set(rounds)) > 1


def test_calibration_stays_within_budget_and_picks_the_best_moving_trial(lm, calibration):
    cal = calibration
    layers = calib.candidate_layers(lm.config.n_layer)
    assert {(t.prompt, t.layer) for t in cal.trials} == {(p, layer) for p in calib.OPEN_PROMPTS for layer in layers}
    assert cal.moves and cal.chosen.moves and cal.chosen == max(cal.trials, key=calib.Trial.rank)
    vec = steering.pair_vector(lm, *cal.pair, cal.layer)
    at, above = calib.damage(lm, [vec], [cal.strength, cal.strength + 0.05])[0].tolist()
    assert at <= calib.MAX_DAMAGE + 0.02 < above  # as strong as the budget allows
    assert cal.strength == round(cal.strength, 2) and 0 < cal.strength < 2


@pytest.mark.slow  # generated text with and without steering: CI only
def test_calibrated_defaults_move_the_mood_of_generated_text(lm, calibration):
    """The Steer page's defaults on the bundled model, six seeds: steered texts carry clearly more
    words of the positive mood than plain ones, negated clearly more of the negative, and none of
    them degenerates (no token repeated through it, distinct words like ordinary text)."""
    cal = calibration
    vec = steering.pair_vector(lm, *cal.pair, cal.layer)
    words = {"plain": [0, 0, 0], "toward": [0, 0, 0], "away": [0, 0, 0]}
    for seed in range(6):
        for name, strength in (("toward", cal.strength), ("away", -cal.strength)):
            plain, steered = steering.steered_pair(lm, cal.prompt, vec, strength, seed, 40, 0.8)
            for key, text in (("plain", plain), (name, steered)):
                if key == "plain" and name == "away":
                    continue
                pos, neg = calib.mood_counts(text)
                ids = lm.tokenizer.encode(text)
                assert calib.longest_run(ids) < max(4, len(ids) // 2) and calib.distinct_ratio(text) > 0.4, text
                words[key] = [a + b for a, b in zip(words[key], (pos, neg, len(calib.words(text))))]
    (p_pos, p_neg, _), (t_pos, t_neg, _), (a_pos, a_neg, _) = words["plain"], words["toward"], words["away"]
    assert t_pos >= 2 * p_pos + 4 and t_pos > 3 * t_neg, words
    assert a_neg >= 2 * p_neg + 4 and a_neg > 3 * a_pos, words


def test_calibration_refuses_what_it_cannot_bound(lm):
    with pytest.raises(ValueError, match="layers to try"):
        calib.calibrate(lm, layers=list(range(9)))
    with pytest.raises(ValueError, match="positive and increasing"):
        calib.calibrate(lm, strengths=[0.5, 0.2])
    with pytest.raises(ValueError, match="seeds"):
        calib.calibrate(lm, seeds=list(range(9)))
    with pytest.raises(ValueError, match="new_tokens"):
        calib.calibrate(lm, new_tokens=1000)
    with pytest.raises(ValueError, match="prompts to try"):
        calib.calibrate(lm, prompts=())
    with pytest.raises(ValueError, match="calibration prompt needs"):
        calib.calibrate(lm, prompts=("a " * 300,))
