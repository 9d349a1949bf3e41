"""Sentence similarity with an encoder: the embeddings sentence-transformers makes (mean of the
last hidden states over the padding mask, then L2-normalised), their cosine matrix, and how
much each token pair contributes to one pair's similarity.

With u = m / |m| and m = (1/n) sum_i h_i, cos(a, b) = u_a . u_b = sum_i sum_j c_ij where
c_ij = (h_i . h_j) / (n_a n_b |m_a| |m_b|): the (T_a, T_b) contribution matrix sums exactly to the
cosine, its row sums are each token of a's share, its column sums each token of b's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...core.encoder import segment_ids
from ...core.validate import check_int

MAX_SENTENCES = 16


@dataclass(frozen=True)
class Embeddings:
    """`ids[k]` each sentence's token ids ([CLS] ... [SEP]); `hidden[k]` its last hidden states
    (T_k, D); `vectors` (N, D) the normalised sentence embeddings; `cosine` (N, N)."""

    ids: tuple[tuple[int, ...], ...]
    hidden: tuple[torch.Tensor, ...]
    vectors: torch.Tensor
    cosine: torch.Tensor

    def contributions(self, a: int, b: int) -> torch.Tensor:
        """(T_a, T_b): token i of sentence a with token j of sentence b's share of cos(a, b); sums to it."""
        n = len(self.ids)
        a, b = check_int("sentence a", a, 0, n - 1), check_int("sentence b", b, 0, n - 1)
        ha, hb = self.hidden[a].double(), self.hidden[b].double()
        ma, mb = ha.mean(0), hb.mean(0)
        return (ha @ hb.T) / (len(ha) * len(hb) * ma.norm() * mb.norm())


def padded_batch(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (N, T) and the attention mask (N, T), 1 = token."""
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(rows), width), dtype=torch.int64)
    for k, row in enumerate(rows):
        ids[k, : len(row)], mask[k, : len(row)] = torch.tensor(row), 1
    return ids, mask


def sentence_embeddings(model, tokenizer, texts: list[str], max_tokens: int = 256) -> Embeddings:
    """Every text's embedding in one padded forward (each text cut to `max_tokens` pieces, as
    sentence-transformers' max_seq_length cuts it; at most the model's context)."""
    if model.config.causal:
        raise ValueError("sentence embeddings need an encoder (every token sees every token); pick one such as minilm")
    if not texts or len(texts) > MAX_SENTENCES:
        raise ValueError(f"give between 1 and {MAX_SENTENCES} sentences, got {len(texts)}")
    max_tokens = min(check_int("max_tokens", max_tokens, 2), model.config.context_length)
    rows = [_cut(tokenizer.prompt_ids(t), max_tokens) for t in texts]
    pad = getattr(tokenizer, "pad_id", None) or 0
    ids, mask = padded_batch(rows, pad)
    dev = model.tok_emb.weight.device
    types = None
    if model.config.segments:  # a pair's segments as the model derives them; padding is segment 0, as HF pads
        types = (segment_ids(ids, model.config.sep_token_id) * mask).to(dev)
    with torch.no_grad():
        hidden = model.hidden(ids.to(dev), attention_mask=mask.to(dev), token_types=types)
    hidden = hidden.float().cpu()  # (N, T, D)
    m = mask[..., None].to(hidden.dtype)
    means = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)  # (N, D)
    vectors = torch.nn.functional.normalize(means, p=2, dim=1)
    per = tuple(hidden[k, : len(r)].clone() for k, r in enumerate(rows))
    return Embeddings(tuple(map(tuple, rows)), per, vectors, vectors @ vectors.T)


def _cut(ids: list[int], n: int) -> list[int]:
    """At most n ids, keeping the closing [SEP] (as a tokenizer's truncation does)."""
    return ids if len(ids) <= n else ids[: n - 1] + ids[-1:]
