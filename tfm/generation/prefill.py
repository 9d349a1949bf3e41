"""Several prompts prefilled in one forward, for the batcher's joining rows.

Prompts are right-padded to the longest: the pads come after each prompt, so causal attention
keeps them out of every real position. The pads' keys and values land in the cache past that row's length, where the batcher's
`RaggedKVCache` masks them and the row's next tokens overwrite them. A class of students who
start at once costs one forward of G x T tokens instead of G forwards of T: the weights are
read once (what bounds a small prefill on CPU), not G times.
"""

from __future__ import annotations

import torch

from ..core.kv_cache import KVCache
from ..loaders.loading import LM

__all__ = ["prefill_keys"]


@torch.no_grad()
def prefill_keys(lm: LM, prompts: list[list[int]], max_len: int) -> KVCache:
    """The (G-row) KVCache, with room for `max_len` positions, holding the keys and values of
    `prompts` (row g valid up to len(prompts[g]); a prompt may be empty). No logits: each row's
    next token comes from the batcher's next decode step, which feeds the token that follows."""
    param = next(lm.model.parameters())
    cache = KVCache(lm.config, len(prompts), max_len, param.device, param.dtype)
    longest = max(len(p) for p in prompts)
    if longest == 0:
        return cache
    idx = torch.zeros(len(prompts), longest, dtype=torch.long, device=param.device)  # (G, T), pad id 0
    for g, p in enumerate(prompts):
        idx[g, : len(p)] = torch.tensor(p, dtype=torch.long)
    lm.model.hidden(idx, cache)  # fills the cache
    return cache
