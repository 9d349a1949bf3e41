"""The neuron view (BertViz's, for every model here): how one attention score is made, dimension by
dimension. For one head, a query position and a key position: the query and key vectors as the
forward used them (after RoPE where the model has it; the key/value head the query head shares
under grouped-query attention), their element-wise products sorted, the sum (the dot product),
the scaling by 1/sqrt(d_head), and the softmax that turns the whole row of scores into the pattern.

Computed from the trace's own q and k, so `score` and `pattern_row` equal the trace's scores and
pattern (tests/test_neuron_view.py); nothing is run again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.config import ModelConfig
from ..core.trace import Trace
from ..core.trace_read import head_qkv
from ..core.validate import check_int


@dataclass(frozen=True)
class NeuronView:
    """`q`, `k` (d_head,) the vectors; `products` q * k per dimension; `order` the dimensions by
    product, largest first; `dot` their sum; `scale` 1/sqrt(d_head); `score` dot * scale;
    `scores_row` (S,) every key's score for this query (-inf where the mask forbids); `pattern_row`
    its softmax; `visible` whether the key may be attended at all; `kv_head` the key head read."""

    layer: int
    head: int
    kv_head: int
    query: int
    key: int
    q: torch.Tensor
    k: torch.Tensor
    products: torch.Tensor
    order: torch.Tensor
    dot: float
    scale: float
    score: float
    scores_row: torch.Tensor
    pattern_row: torch.Tensor
    visible: bool

    @property
    def weight(self) -> float:
        """The pattern entry for (query, key): the share of the query's attention on this key."""
        return float(self.pattern_row[self.key])


def neuron_view(trace: Trace, config: ModelConfig, layer: int, head: int, query: int, key: int) -> NeuronView:
    """The neuron view of one head at (query, key) of batch row 0 (module doc)."""
    check_int("layer", layer, 0, config.n_layer - 1)
    check_int("head", head, 0, config.n_head - 1)
    q_all, k_all, _ = head_qkv(trace, config, layer, head)  # (T, hd), (S, hd)
    t, s = q_all.shape[0], k_all.shape[0]
    check_int("query position", query, 0, t - 1)
    check_int("key position", key, 0, s - 1)
    q, k = q_all[query].double(), k_all[key].double()
    products = q * k  # (hd,)
    scale = 1.0 / math.sqrt(config.d_head)
    row = (k_all.double() @ q) * scale  # (S,)
    if config.causal:  # the query sits at the last t of s positions; later keys are masked
        row = row.masked_fill(torch.arange(s) > query + (s - t), float("-inf"))
    return NeuronView(
        layer,
        head,
        config.kv_head(head),
        query,
        key,
        q,
        k,
        products,
        torch.argsort(products, descending=True),
        float(products.sum()),
        scale,
        float(row[key]),
        row,
        row.softmax(-1),
        bool(torch.isfinite(row[key])),
    )
