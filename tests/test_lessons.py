"""Induction-head lesson: the data, the bounds, and the head actually forming on a fixed seed."""
from __future__ import annotations

import math

import pytest
import torch

from tfm import analysis
from tfm.lessons import MAX_STEPS, AttnOnly, LessonSettings, probe_tokens, repeated_batch, train


def test_repeated_batch_marks_exactly_the_copied_targets():
    s = LessonSettings()
    tokens, mask = repeated_batch(s, 64, torch.Generator().manual_seed(3))
    assert tokens.shape == (64, s.seq_len) and mask.shape == (64, s.seq_len - 1)
    for row in range(64):
        targets = mask[row].nonzero().flatten() + 1                  # positions of the predicted tokens
        n = len(targets) + 1                                          # the copy's length
        assert s.seq_len // 6 <= n <= s.seq_len // 2
        assert torch.equal(tokens[row, targets], tokens[row, targets - n])   # each is a copy from n back
        assert int(targets.max()) - int(targets.min()) == n - 2      # one contiguous copy


def test_settings_are_bounded():
    with pytest.raises(ValueError, match="steps"):
        LessonSettings(steps=MAX_STEPS + 1)
    with pytest.raises(ValueError, match="divisible"):
        LessonSettings(d_model=30, n_head=4)


def test_traced_attention_only_model_matches_its_untraced_forward_and_analysis_reads_it():
    s = LessonSettings()
    model = AttnOnly(s.model_config())
    tok = probe_tokens(s)
    with torch.no_grad():
        out, plain = model(tok[None], trace=True), model(tok[None])
    torch.testing.assert_close(out.logits, plain.logits, rtol=1e-5, atol=1e-5)
    assert analysis.head_scores(out.trace, tok)["induction"].shape == (2, s.n_head)


def test_the_copying_loss_drops_within_the_default_steps_on_a_fixed_seed():
    s = LessonSettings(seed=0)
    res = train(s)
    assert len(res.losses) == s.steps and [x.step for x in res.snapshots][-1] == s.steps
    drop = res.dropped_at()
    assert drop is not None and drop <= s.steps, res.losses[::50]   # the plateau ends inside the run
    start, end = sum(res.losses[:20]) / 20, sum(res.losses[-20:]) / 20
    assert start > 0.9 * math.log(s.vocab) and end < 0.5 * start        # from chance to copying
    assert res.snapshots[-1].repeat_loss < 0.5 * res.snapshots[0].repeat_loss   # also on the fixed probe
    # Every stored score is TransformerLens's, recomputed here from the stored pattern.
    det = analysis.induction_detection(probe_tokens(s))
    for snap in res.snapshots[:: 10]:
        torch.testing.assert_close(analysis.detection_score(snap.patterns, det), snap.induction)
    formed = res.formed_at()
    if formed is not None:  # when a head crosses the threshold, the sentence's step is that snapshot's
        step, layer, head = formed
        assert float(next(x for x in res.snapshots if x.step == step).induction[layer, head]) >= s.threshold
