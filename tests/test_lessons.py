"""Induction-head lesson: the data, the bounds, and the head actually forming on a fixed seed."""

from __future__ import annotations

import math

import pytest
import torch

from tfm import analysis
from tfm.teach.lessons import MAX_STEPS, AttnOnly, LessonSettings, pairs_batch, probe_tokens, train


def test_pairs_batch_grades_exactly_the_partners_of_repeated_triggers():
    s = LessonSettings()
    tokens, mask = pairs_batch(s, 64, torch.Generator().manual_seed(3))
    assert tokens.shape == (64, s.seq_len) and mask.shape == (64, s.seq_len - 1)
    for row in range(64):
        seq, graded = tokens[row].tolist(), set(mask[row].nonzero().flatten().tolist())
        counts = {t: seq.count(t) for t in seq}
        triggers = {seq[p] for p in graded}
        assert len(triggers) == s.pairs and all(counts[t] == s.repeats for t in triggers)
        for p, tok in enumerate(seq[:-1]):
            earlier = [q for q in range(p) if seq[q] == tok]
            if tok in triggers:  # every appearance but the first is graded; the partner never changes
                assert (p in graded) == bool(earlier) and all(seq[q + 1] == seq[p + 1] for q in earlier)
            else:
                assert p not in graded


def test_settings_are_bounded():
    with pytest.raises(ValueError, match="steps"):
        LessonSettings(steps=MAX_STEPS + 1)
    with pytest.raises(ValueError, match="divisible"):
        LessonSettings(d_model=30, n_head=4)
    with pytest.raises(ValueError, match="must fit"):
        LessonSettings(pairs=8, repeats=3)  # 48 pair tokens in 40 positions


def test_traced_attention_only_model_matches_its_untraced_forward_and_analysis_reads_it():
    s = LessonSettings()
    model = AttnOnly(s.model_config())
    tok = probe_tokens(s)
    with torch.no_grad():
        out, plain = model(tok[None], trace=True), model(tok[None])
    torch.testing.assert_close(out.logits, plain.logits, rtol=1e-5, atol=1e-5)
    assert analysis.head_scores(out.trace, tok)["induction"].shape == (2, s.n_head)


@pytest.mark.slow  # a whole training run: CI only
def test_an_induction_head_forms_after_the_plateau_within_the_default_steps_on_a_fixed_seed():
    s = LessonSettings(seed=0)
    res = train(s)
    assert len(res.losses) == s.steps and [x.step for x in res.snapshots][-1] == s.steps
    tok = probe_tokens(s)
    half = len(tok) // 2
    assert len(set(tok[:half].tolist())) == half and torch.equal(tok[:half], tok[half:])
    for snap in res.snapshots:  # stored scores = attention from second-copy query q to key q - half + 1
        stripe = snap.patterns[..., torch.arange(half, 2 * half), torch.arange(1, half + 1)]  # (L, H, half)
        torch.testing.assert_close(snap.induction, stripe.mean(-1))
        below = snap.patterns[..., torch.arange(1, 2 * half), torch.arange(2 * half - 1)]  # q looks at q - 1
        torch.testing.assert_close(snap.previous, below.sum(-1) / (2 * half))
    formed = res.formed_at()
    assert formed is not None, [round(float(x.induction.max()), 2) for x in res.snapshots]
    step, layer, head = formed
    assert layer == 1 and float(res.snapshots[0].induction[1].max()) < s.threshold  # below it at step 0
    assert float(next(x for x in res.snapshots if x.step == step).induction[1, head]) >= s.threshold
    end, level = res.plateau()
    assert end >= 150 and level > 0.85 * math.log(s.vocab)  # a long plateau near chance first
    assert max(float(x.induction[1].max()) for x in res.snapshots if x.step <= end - 40) < s.threshold
    assert end < step <= end + 100, (end, step)  # the head forms as the plateau ends
    assert sum(res.losses[-20:]) / 20 < 0.1 * level  # and the copied tokens are then predicted
    assert res.snapshots[-1].repeat_loss < 0.1 * res.snapshots[0].repeat_loss  # also on the fixed probe
    assert float(res.snapshots[-1].previous[0].max()) > 0.5  # fed by a layer-0 previous-token head


def test_a_seed_gives_the_same_run_whatever_the_global_random_state():
    s = LessonSettings(steps=30, snapshot_every=10)
    torch.manual_seed(1)
    a = train(s)
    torch.manual_seed(2)  # nn.Linear's default bias init reads the global RNG: train must not depend on it
    b = train(s)
    assert a.losses == b.losses and torch.equal(a.snapshots[-1].patterns, b.snapshots[-1].patterns)
