"""tfm.core.stats.entropy: the one entropy of attention rows, experiments and sampling."""

import math

import pytest
import torch

from tfm.core.stats import entropy


def test_entropy_equals_torch_categorical_from_probs_and_from_log_probs():
    logits = torch.randn(4, 7, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 5
    want = torch.distributions.Categorical(logits=logits).entropy()  # (4, 7)
    torch.testing.assert_close(entropy(logits.softmax(-1)), want)
    torch.testing.assert_close(entropy(log_probs=logits.log_softmax(-1)), want)


def test_zero_probabilities_count_zero_and_keep_gradients_finite():
    p = torch.tensor([[0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]], requires_grad=True)
    h = entropy(p)
    torch.testing.assert_close(h.detach(), torch.tensor([math.log(2), 0.0]))
    h.sum().backward()
    assert torch.isfinite(p.grad).all()
    log_p = torch.tensor([0.0, -math.inf, -math.inf])  # a one-hot distribution
    assert entropy(log_probs=log_p).item() == 0.0


def test_entropy_needs_exactly_one_input():
    with pytest.raises(ValueError, match="exactly one"):
        entropy()
    with pytest.raises(ValueError, match="exactly one"):
        entropy(torch.ones(2) / 2, log_probs=torch.zeros(2))
