"""What a BERT-style encoder adds to `GPT` (`ModelConfig.causal=False` and friends): segment
(token-type) embeddings, the LayerNorm over the summed embeddings, the padding mask, and the
masked-language-model head. The model calls these few functions; nothing else changes: the
blocks are the post-norm blocks of the 2017 paper, attention without a causal mask.

Segments come from the ids themselves ([CLS] A [SEP] B [SEP]: every position after the first
[SEP] is segment 1, as Hugging Face's pair template gives them), so a cache keyed by the ids
stays right; `token_types` passed explicitly win (library users, padded batches).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig
from .functional import unembed
from .kernels import Linear
from .trace import Recorder


def add_encoder_parts(model: nn.Module, cfg: ModelConfig, norm: type[nn.Module]) -> None:
    """type_emb (segments, else None), ln_embed (embedding norm, else None) and mlm (the masked-LM
    head, else None), on `model`. `norm` is the model's Norm class (passed in: no import cycle)."""
    model.type_emb = nn.Embedding(cfg.type_vocab_size, cfg.d_model) if cfg.type_vocab_size else None
    model.ln_embed = norm(cfg) if cfg.embed_norm else None
    model.mlm = MaskedLMHead(cfg, norm(cfg)) if cfg.lm_head == "masked" else None


def head_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The final hidden states (B, T, D) -> logits (B, T, V): the unembedding, after the masked-LM
    transform and plus its bias where the model has one."""
    if model.mlm is None:
        return unembed(x, model.unembed.weight)
    return unembed(model.mlm.transform(x), model.unembed.weight) + model.mlm.bias


# (T, V) logits a caller does not show are computed this many bytes of rows at a time: 1,024 tokens of
# Gemma 3's 262,144-token vocabulary are 1 GB at once, 64 rows 64 MB
LOGIT_CHUNK_BYTES = 64 << 20


def final_name(model: nn.Module) -> str:
    """The trace entry `head_logits` reads: the final norm's output (a post-norm model: the last block's)."""
    return "ln_final.output" if model.ln_final is not None else f"blocks.{model.config.n_layer - 1}.resid_post"


def logit_chunks(model: nn.Module, x: torch.Tensor) -> list[slice]:
    """Row slices of the final hidden states `x` (T, D) whose logits fit `LOGIT_CHUNK_BYTES` in float32
    (at least one row each): loop over them instead of holding every position's logits."""
    rows = max(1, LOGIT_CHUNK_BYTES // (4 * model.unembed.weight.shape[0]))
    return [slice(a, min(a + rows, x.shape[0])) for a in range(0, x.shape[0], rows)]


def token_nll(model: nn.Module, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(N,) -log p(target) under each row's next-token distribution: final hidden states `x` (N, D),
    `targets` (N,) ids; float32, the logits a chunk of rows at a time (`logit_chunks`)."""
    out = []
    for rows in logit_chunks(model, x):
        logits = head_logits(model, x[rows]).float()  # (rows, V)
        out.append(logits.logsumexp(-1) - logits.gather(-1, targets[rows, None])[:, 0])
    return torch.cat(out)


def head_parameters(model: nn.Module) -> list[torch.Tensor]:
    """Every parameter `head_logits` reads (a lazy trace checks they did not change)."""
    return [model.unembed.weight] + (list(model.mlm.parameters()) if model.mlm is not None else [])


def segment_ids(idx: torch.Tensor, sep_id: int) -> torch.Tensor:
    """(B, T) segment of each position: 0 up to and including the first `sep_id`, 1 after it."""
    is_sep = (idx == sep_id).to(torch.int64)
    before = is_sep.cumsum(-1) - is_sep  # [SEP]s strictly before each position
    return (before > 0).to(torch.int64)  # (B, T)


def check_token_types(cfg: ModelConfig, idx: torch.Tensor, token_types) -> torch.Tensor | None:
    """The (B, T) token types to embed: the given ones (checked), else derived from the ids."""
    if token_types is None:
        return segment_ids(idx, cfg.sep_token_id) if cfg.segments else None
    if not cfg.type_vocab_size:
        raise ValueError("token_types were given, but this model has no token-type embeddings (type_vocab_size=0)")
    if not isinstance(token_types, torch.Tensor) or tuple(token_types.shape) != tuple(idx.shape):
        raise ValueError(f"token_types must be a tensor shaped like the ids {tuple(idx.shape)}")
    if token_types.numel() and (int(token_types.min()) < 0 or int(token_types.max()) >= cfg.type_vocab_size):
        raise ValueError(f"token_types must be in [0, {cfg.type_vocab_size})")
    return token_types.to(torch.int64)


def key_mask(cfg: ModelConfig, attention_mask, idx: torch.Tensor, cache=None) -> torch.Tensor | None:
    """A (B, T) padding mask (1/True = a real token) -> bool (B, 1, 1, T), True = may be attended.
    An encoder reads its whole input at once: no KV cache."""
    if not cfg.causal and cache is not None:
        raise ValueError("a bidirectional encoder reads its whole input in one forward: it takes no KV cache")
    if attention_mask is None:
        return None
    if cfg.causal:
        raise ValueError(
            "attention_mask is an encoder's padding mask; a causal model pads on the right "
            "without one (its queries never see later keys)"
        )
    if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != tuple(idx.shape):
        raise ValueError(
            f"attention_mask must be a tensor shaped like the ids {tuple(idx.shape)} (1 = token, 0 = padding)"
        )
    mask = attention_mask.to(device=idx.device, dtype=torch.bool)
    if not bool(mask.any(-1).all()):
        raise ValueError("attention_mask hides every token of a row: each row needs at least one real token")
    return mask[:, None, None, :]


def embed_extras(model: nn.Module, x: torch.Tensor, types: torch.Tensor | None, rec: Recorder | None) -> torch.Tensor:
    """Token + position embeddings `x` -> plus the type embeddings, then the embedding norm."""
    if types is not None and model.type_emb is not None:
        t = model.type_emb(types)  # (B, T, D)
        if rec is not None:
            rec.add("type_embed", t)
        x = x + t
    if model.ln_embed is not None:
        x = model.ln_embed(x, rec.scoped("ln_embed") if rec is not None else None)
    return x


class MaskedLMHead(nn.Module):
    """BERT's `cls.predictions`: dense -> activation -> LayerNorm, then the (tied) embedding and a
    per-token bias: logits = LN(act(x W + b)) E^T + bias."""

    def __init__(self, cfg: ModelConfig, norm: nn.Module) -> None:
        super().__init__()
        self.activation = cfg.activation
        self.dense = Linear(cfg.d_model, cfg.d_model, bias=True)
        self.norm = norm
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dense(x)  # (B, T, D)
        h = {"gelu": F.gelu, "relu": F.relu}.get(self.activation, lambda v: F.gelu(v, approximate="tanh"))(h)
        return self.norm(h)
