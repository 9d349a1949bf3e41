"""The attention and unembedding arithmetic the model and its lazy trace share, as plain
functions (as torch.nn.functional is to torch.nn): nothing here holds parameters."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .kernels import linear
from .trace import Recorder


def causal_mask(t: int, s: int, device: torch.device) -> torch.Tensor:
    """Boolean (T, S) mask, True where allowed; queries are the last T of S positions."""
    q_pos = torch.arange(s - t, s, device=device)[:, None]
    return torch.arange(s, device=device)[None, :] <= q_pos


def expand_kv(x: torch.Tensor, group: int) -> torch.Tensor:
    """(..., Hkv, S, hd) -> (..., Hkv * group, S, hd): each KV head repeated for its query heads
    (query head h reads KV head h // group, `ModelConfig.kv_head`; heads are the third axis from
    the end, so a trace's (B, Hkv, S, hd) and one row's (Hkv, S, hd) both work). The copy is small
    next to the (T, S) products, which run faster per head than grouped."""
    if group == 1:
        return x
    *lead, hkv, s, hd = x.shape
    return x.unsqueeze(-3).expand(*lead, hkv, group, s, hd).reshape(*lead, hkv * group, s, hd)


def _scaled(scores: torch.Tensor, hd: int, scale: float | None) -> torch.Tensor:
    """In place: scores / sqrt(hd), or times `scale` (a config's attn_scalar ** -0.5, as transformers)."""
    return scores.div_(math.sqrt(hd)) if scale is None else scores.mul_(scale)


def attention_scores(q: torch.Tensor, k: torch.Tensor, mask, scale: float | None = None) -> torch.Tensor:
    """q k^T / sqrt(hd) (or times `scale`), -inf where `mask` (as in `attend`) forbids. (B, H, T, S); k may
    have fewer heads than q (grouped-query attention): query head h reads key head h // (H / Hkv)."""
    t, hd = q.shape[-2:]
    (b, h), group = q.shape[:2], q.shape[1] // k.shape[1]
    if group > 1 and t == 1:  # a decode step: each key head meets its query heads as rows, no copy of every key
        scores = (q.reshape(b, k.shape[1], group, hd) @ k.transpose(-2, -1)).view(b, h, 1, -1)  # (B, H, 1, S)
        _scaled(scores, hd, scale)
    else:
        k = expand_kv(k, group)  # (B, H, S, hd)
        scores = _scaled(q @ k.transpose(-2, -1), hd, scale)  # (B, H, T, S), a new tensor: in place
    if isinstance(mask, str):  # "causal", T = S: adding 0 / -inf is far faster on CPU than masked_fill with a bool mask
        return scores.add_(torch.full((t, t), float("-inf"), dtype=scores.dtype, device=q.device).triu(1))
    return scores if mask is None else scores.masked_fill_(~mask, float("-inf"))


def attend(q, k, v, mask, rec: Recorder | None, dropout_p: float = 0.0, scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(hd) + mask) v, always by the fused kernel: a trace observes the
    forward and never changes its numbers (a traced forward's stream and logits are the plain
    forward's, bit for bit). A recorder that stores the scores or the pattern gets them computed
    explicitly beside the kernel (equal to what it used to ~1e-7); one that does not (a lazy
    trace's first pass) only lists them, and pays for the fused kernel alone.

    `mask` is a bool tensor broadcastable to (B, H, T, S), True = may attend, or the string
    "causal" for the plain square causal case, or None for no mask. k and v may have fewer
    heads than q (grouped-query attention): query head h reads key/value head h // (H / Hkv).
    `scale` replaces 1/sqrt(hd) (Gemma's query_pre_attn_scalar).
    """
    gqa = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}
    gqa = gqa | ({"scale": scale} if scale is not None else {})
    if isinstance(mask, str):
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p, **gqa)
    else:
        z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, **gqa)
    if rec is None:
        return z  # (B, H, T, hd)
    shape = (*q.shape[:-1], k.shape[-2])  # (B, H, T, S)
    if rec.stores("scores") or rec.stores("pattern"):
        scores = attention_scores(q, k, mask, scale)  # (B, H, T, S)
        rec.add("scores", scores)
        rec.add("pattern", scores.softmax(dim=-1))  # undropped: rows sum to 1
    else:
        rec.add_lazy("scores", shape, q.dtype)
        rec.add_lazy("pattern", shape, q.dtype)
    rec.add("z", z)
    return z


def head_results(z: torch.Tensor, w_out: torch.Tensor, n_head: int):
    """Each head's output through its slice of W_O, (B, H, T, D), computed when first read: 12x
    the size of the attention output, and only some readers want it. proj(merged) is exactly
    these summed over heads (+ bias). Refuses if W_O changed in place since the forward."""
    z, w_out, version = z.detach(), w_out.detach(), w_out._version

    def compute() -> torch.Tensor:
        if w_out._version != version:
            raise RuntimeError(
                "the model's weights changed after this trace was recorded; "
                "run the forward again to trace the new weights"
            )
        w_o = w_out.view(w_out.shape[0], n_head, -1)  # (D, H, hd)
        return torch.einsum("bhtd,ehd->bhte", z, w_o)  # (B, H, T, D)

    return compute


def unembed(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ W_U^T, (B, T, V), one product (tfm.core.kernels.linear: for a vocabulary-sized (out, in)
    matrix, oneDNN on one row as on many)."""
    return linear(x, weight)
