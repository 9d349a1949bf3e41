"""Several prompts prefilled in one forward, for the batcher's joining rows.

Prompts are right-padded to the longest: the pads come after each prompt, so causal attention
keeps them out of every real position, and each row's logits are read at its own last token.
The pads' keys and values land in the cache past that row's length, where the batcher's
`RaggedKVCache` masks them and the row's next tokens overwrite them. A class of students who
start at once costs one forward of G x T tokens instead of G forwards of T: the weights are
read once (what bounds a small prefill on CPU), not G times.
"""
from __future__ import annotations

import torch

from ..core.cache import KVCache
from ..core.functional import unembed
from ..loaders.loading import LM

__all__ = ["padded_prefill"]


@torch.no_grad()
def padded_prefill(lm: LM, prompts: list[list[int]], max_len: int) -> tuple[torch.Tensor, KVCache]:
    """(G, V) float32 next-token logits, one row per prompt, and the (G-row) KVCache with room
    for `max_len` positions that holds their keys (row g valid up to len(prompts[g]))."""
    param = next(lm.model.parameters())
    lengths = torch.tensor([len(p) for p in prompts], device=param.device)            # (G,)
    idx = torch.zeros(len(prompts), int(lengths.max()), dtype=torch.long, device=param.device)  # (G, T), pad id 0
    for g, p in enumerate(prompts):
        idx[g, :len(p)] = torch.tensor(p, dtype=torch.long)
    cache = KVCache(lm.config, len(prompts), max_len, param.device, param.dtype)
    h = lm.model.hidden(idx, cache)                                                    # (G, T, D)
    last = h[torch.arange(len(prompts), device=param.device), lengths - 1]             # (G, D)
    return unembed(last[:, None], lm.model.unembed.weight)[:, 0].float(), cache         # (G, V)
