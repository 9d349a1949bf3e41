"""Counting the logits a computation makes: `WidestLogits(V)` watches every tensor torch's ops
produce (a dispatch mode), and `.rows` is the most rows of V numbers any one of them held (views
of another tensor, such as a weight's transpose, are not new memory and are left out)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class WidestLogits(TorchDispatchMode):
    def __init__(self, vocab: int):
        super().__init__()
        self.vocab, self.rows = vocab, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] == self.vocab and t.is_floating_point():
                    self.rows = max(self.rows, t.numel() // self.vocab)
        return out
