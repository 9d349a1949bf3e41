"""A transformer, written bottom-up: Norm, Attention, MLP, Block, GPT. Causal (a decoder) or,
with `ModelConfig.causal=False`, a BERT-style encoder (its extra parts: `tfm.core.encoder`).

Every variant of `ModelConfig` (positional encoding, norm type and placement, activation,
bias, tied embeddings) is one code path with small switches. `forward(idx, trace=True)`
records named intermediates into a per-call `Recorder` (see `tfm.trace`), so the module is
never mutated: no hooks, no caches installed on it.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .kv_cache import KVCache
from . import cancel
from .config import ModelConfig
from .kernels import Linear
from .norm import Norm
from . import lazy as lazy_trace
from .edits import Edits
from . import encoder
from .functional import attend, attention_scores, causal_mask, expand_kv, head_results, unembed  # noqa: F401 (re-exported)
from .positions import add_embeddings, local_angles, position_inputs, sinusoidal_table  # noqa: F401 (re-exported: encdec, tests)
from .rope import apply_rope, rope_angles  # noqa: F401 (rope_angles re-exported)
from .window import layer_mask, layer_window
from .trace import ModelOutput, Recorder, Trace  # noqa: F401 (ModelOutput re-exported)


class Attention(nn.Module):
    """Self-attention (causal unless `cfg.causal` is false: an encoder) with a fused qkv projection
    (as GPT-2 stores it): n_head query heads and n_kv_head key/value heads (fewer for grouped-query
    attention), rows [q | k | v]. A local layer (`window`) reads only its window of keys
    (`tfm.core.window`); `qk_norm` normalises each head's query and key before RoPE (Gemma 3, Qwen3)."""

    def __init__(self, cfg: ModelConfig, window: int | None = None) -> None:
        super().__init__()
        self.n_head, self.d_head, self.dropout, self.window = cfg.n_head, cfg.d_head, cfg.dropout, window
        self.causal = cfg.causal
        self.kv_dim, self.scale = cfg.n_kv_head * cfg.d_head, cfg.attn_scalar and cfg.attn_scalar**-0.5
        self.qkv = Linear(cfg.d_model, cfg.d_attn + 2 * self.kv_dim, bias=cfg.bias or cfg.qkv_bias)
        self.proj = Linear(cfg.d_attn, cfg.d_model, bias=cfg.bias)
        self.q_norm, self.k_norm = (Norm(cfg, cfg.d_head), Norm(cfg, cfg.d_head)) if cfg.qk_norm else (None, None)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, width = x.shape
        return x.view(b, t, width // self.d_head, self.d_head).transpose(1, 2)  # (B, H or Hkv, T, hd)

    def split_qkv(self, qkv: torch.Tensor, angles: torch.Tensor | None):
        """The fused projection's output -> q (B, H, T, hd), k and v (B, Hkv, T, hd), RoPE applied."""
        h, qk_width = self.n_head, self.n_head * self.d_head + self.kv_dim
        if self.q_norm is not None:  # QK-norm: each head's q and k normalised before RoPE
            q, k, v = qkv.split([h * self.d_head, self.kv_dim, self.kv_dim], dim=-1)
            q, k = self.q_norm(self.split_heads(q)), self.k_norm(self.split_heads(k))
            return *(
                (apply_rope(q, angles), apply_rope(k, angles)) if angles is not None else (q, k)
            ), self.split_heads(v)
        if angles is not None:  # q and k rotated together: one pass of RoPE's elementwise ops
            qk = apply_rope(self.split_heads(qkv[..., :qk_width]), angles)  # (B, H + Hkv, T, hd)
            return qk[:, :h], qk[:, h:], self.split_heads(qkv[..., qk_width:])
        return tuple(self.split_heads(part) for part in qkv.split([h * self.d_head, self.kv_dim, self.kv_dim], dim=-1))

    def forward(
        self, x, rec: Recorder | None, angles=None, cache=None, layer=0, edits=None, causal=True, key_mask=None
    ):
        """`causal=False`: no mask at all, the bare self-attention (tfm.analysis.positions' permutation check).
        An encoder (`cfg.causal` false) masks only `key_mask`'s padding, (B, 1, 1, S) bool."""
        qkv = self.qkv(x)  # (B, T, H hd + 2 Hkv hd)
        if rec is not None:
            rec.shape_only("qkv", qkv)
        q, k, v = self.split_qkv(qkv, angles)  # (B, H, T, hd), k, v (B, Hkv, T, hd)
        if cache is not None:
            k, v = cache.update(layer, k, v)  # (B, Hkv, S, hd), S = cached + T
        if rec is not None:
            for name, t in (("q", q), ("k", k), ("v", v)):
                rec.add(name, t)
        mask = layer_mask(cache, q.shape[-2], k.shape[-2], self.window, x.device, causal, self.causal, key_mask)
        z = attend(q, k, v, mask, rec, self.dropout if self.training else 0.0, self.scale)
        if edits is not None:  # per-call interventions (tfm.core.edits); the trace's "z" is the unedited one
            z = edits.apply("attn.z", z)
        merged = z.transpose(1, 2).reshape(*x.shape[:-1], -1)  # (B, T, H hd)
        if rec is not None:
            rec.shape_only("z_merged", merged)
            b, h, t, _ = z.shape
            rec.add_deferred("result", (b, h, t, x.shape[-1]), z.dtype, head_results(z, self.proj.weight, self.n_head))
        return self.proj(merged)


class MLP(nn.Module):
    """Position-wise feed-forward: fc -> activation -> proj (SwiGLU adds a gate matrix)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.activation = cfg.activation
        self.fc = Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.gate = Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias) if cfg.activation in ("swiglu", "geglu") else None
        self.proj = Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor, rec: Recorder | None, edits=None) -> torch.Tensor:
        if self.gate is not None:
            pre, up = self.gate(x), self.fc(x)  # (B, T, F) each
            post = (F.silu(pre) if self.activation == "swiglu" else F.gelu(pre, approximate="tanh")) * up
        else:
            pre, up = self.fc(x), None  # (B, T, F)
            post = {"gelu": F.gelu, "relu": F.relu}.get(self.activation, lambda h: F.gelu(h, approximate="tanh"))(pre)
        if edits is not None:
            post = edits.apply("mlp.post", post)
        if rec is not None:
            rec.add("pre", pre)
            if up is not None:
                rec.add("up", up)
            rec.add("post", post)
        return self.proj(post)


class Block(nn.Module):
    """One transformer layer: attention then MLP, each wrapped in a residual connection.

    pre-norm:  x = x + attn(ln1(x));  x = x + mlp(ln2(x))
    post-norm: x = ln1(x + attn(x));  x = ln2(x + mlp(x))
    parallel:  x = x + attn(ln1(x)) + mlp(ln2(x))   (GPT-NeoX; resid_mid is then x + attn only)
    post_norms: x = x + ln1_post(attn(ln1(x)));  x = x + ln2_post(mlp(ln2(x)))   (Gemma)
    """

    def __init__(self, cfg: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        self.pre, self.parallel = cfg.norm_placement == "pre", cfg.parallel_block
        self.ln1, self.attn = Norm(cfg), Attention(cfg, layer_window(cfg, layer))
        self.ln2, self.mlp = Norm(cfg), MLP(cfg)
        self.ln1_post, self.ln2_post = (Norm(cfg), Norm(cfg)) if cfg.post_norms else (None, None)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, rec: Recorder | None, angles=None, cache=None, layer: int = 0, edits=None, key_mask=None):
        sub = (lambda name: rec.scoped(name)) if rec is not None else (lambda name: None)
        # `edits`: a tfm.core.edits.Edits scoped to this block
        ed = (lambda name, t: t) if edits is None else edits.apply
        x = ed("resid_pre", x)
        if rec is not None:
            rec.add("resid_pre", x)
        a_in = self.ln1(x, sub("ln1")) if self.pre else x
        a = self.attn(a_in, sub("attn"), angles, cache, layer, edits, key_mask=key_mask)
        a = ed("attn_out", self.drop(a if self.ln1_post is None else self.ln1_post(a, sub("ln1_post"))))
        if rec is not None:  # recorded before a post-norm's ln1 runs: the trace is in execution order
            rec.add("attn_out", a)
        mid = x + a if self.pre else self.ln1(x + a, sub("ln1"))
        if rec is not None:
            rec.add("resid_mid", mid)
        m_in = x if self.parallel else mid  # the parallel block's MLP reads the block input too
        m = self.mlp(self.ln2(m_in, sub("ln2")) if self.pre else m_in, sub("mlp"), edits)
        m = ed("mlp_out", self.drop(m if self.ln2_post is None else self.ln2_post(m, sub("ln2_post"))))
        if rec is not None:
            rec.add("mlp_out", m)
        x = ed("resid_post", mid + m if self.pre else self.ln2(mid + m, sub("ln2")))
        if rec is not None:
            rec.add("resid_post", x)
        return x


class GPT(nn.Module):
    """Token (+ positional) embedding, n_layer blocks, final norm, unembedding."""

    def __init__(self, cfg: ModelConfig, generator: torch.Generator | None = None) -> None:
        """`generator`: draws the weights (`reset_parameters`); without one, the global RNG does."""
        super().__init__()
        self.config = cfg
        add_embeddings(self, cfg)
        encoder.add_encoder_parts(self, cfg, Norm)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        # Post-norm blocks already end normalised; the 2017 design has no final norm.
        self.ln_final = Norm(cfg) if cfg.norm_placement == "pre" else None
        self.unembed = Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tied_embeddings:
            self.unembed.weight = self.tok_emb.weight
        self._input_major_weights()
        self.reset_parameters(generator)

    def _input_major_weights(self) -> None:
        """Keep each block matrix's (out, in) shape but store it (in, out) in memory, as GPT-2's
        Conv1D does. A decode step multiplies one vector by every matrix, reading each once
        from memory; on a CPU that product streams the (in, out) layout faster
        (bench/bench_generate.py, docs/benchmarks.md). Shapes, names, files and results are unchanged.

        The unembedding (and the embedding tied to it) stays (out, in), as Hugging Face's
        lm_head: on several rows oneDNN reads that layout faster for SmolLM2's 49152
        x 576 (its (in, out) rows, 3 x 2^16 bytes apart, collide in the caches) and no slower
        for GPT-2's; one row costs a little more (bench/bench_kernels.py, docs/benchmarks.md)."""
        for module in self.blocks.modules():
            if isinstance(module, nn.Linear):
                module.weight = nn.Parameter(module.weight.detach().t().contiguous().t())

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """GPT-2 initialisation, N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer).

        Pass a seeded generator for a reproducible random model without touching the global RNG.
        A model built on the meta device (for a loader to fill) has no values to draw.
        """
        if self.tok_emb.weight.is_meta:
            return
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif p.dim() == 1:  # norm gains
                p.fill_(1.0)
            else:  # drawn in logical order, so values do not depend on the memory layout
                std = 0.02 / math.sqrt(2 * self.config.n_layer) if name.endswith("proj.weight") else 0.02
                p.copy_(torch.empty(p.shape, dtype=p.dtype, device=p.device).normal_(0.0, std, generator=generator))

    def _check_input(self, idx: torch.Tensor, cache: KVCache | None) -> int:
        """The ids' first position (the cache's length, or 0), after checking them against the model and the cache."""
        start = cache.length if cache is not None else 0
        if not isinstance(idx, torch.Tensor):
            raise ValueError(f"token ids must be a torch tensor of shape (batch, seq), got {type(idx).__name__}")
        if idx.dtype not in (torch.int64, torch.int32) or idx.dim() != 2:
            raise ValueError(
                f"token ids must be an integer tensor of shape (batch, seq), got {idx.dtype} {tuple(idx.shape)}"
            )
        if idx.shape[1] == 0 or idx.shape[0] == 0:
            raise ValueError(f"the token batch {tuple(idx.shape)} is empty: give at least one sequence of one token")
        if start + idx.shape[1] > self.config.context_length:
            raise ValueError(
                f"{start + idx.shape[1]} positions exceed the context length "
                f"{self.config.context_length}; cut the prompt from the left"
            )
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.config.vocab_size):
            raise ValueError(
                f"token ids must be in [0, {self.config.vocab_size}), got {int(idx.min())}..{int(idx.max())}"
            )
        if cache is not None and idx.shape[0] != cache.batch_size():
            raise ValueError(
                f"the KV cache was made for batch {cache.batch_size()}, the tokens have batch {idx.shape[0]}"
            )
        return start

    def positions(self, start, length: int):
        """(added position vectors (T, D) or None, RoPE angles (T, rotary_dim/2) or None); with a
        (B,) tensor of starts, one row each: (B, T, D) and (B, 1, T, rotary_dim/2)."""
        return position_inputs(self, start, length)

    def embed(self, idx: torch.Tensor, start: int, rec: Recorder | None, token_types=None):
        """Token embedding plus additive positions (and an encoder's segments and embedding norm);
        returns (x, rope angles or None)."""
        x = self.tok_emb(idx)  # (B, T, D)
        if self.config.scale_embeddings:  # Gemma: times sqrt(d_model), rounded to the embedding's dtype first
            x = x * torch.tensor(self.config.d_model**0.5).to(x.dtype)
        pos, angles = self.positions(start, idx.shape[1])
        if rec is not None:
            rec.add("embed", x)
        if rec is not None and not isinstance(start, torch.Tensor):  # a ragged batch's are per row: not traced
            if pos is not None:
                rec.add("pos_embed", pos)
            if angles is not None:
                rec.add("rope.angles", angles)
        x = x + pos if pos is not None else x
        types = encoder.check_token_types(self.config, idx, token_types)
        return (
            encoder.embed_extras(self, x, types, rec) if types is not None or self.ln_embed is not None else x
        ), angles

    def forward(
        self,
        idx: torch.Tensor,
        trace: bool = False,
        cache: KVCache | None = None,
        last_only: bool = False,
        lazy: bool | None = None,
        edits=None,
        keep: tuple[str, ...] = (),
        attention_mask=None,
        token_types=None,
    ) -> ModelOutput:
        """Logits (B, T, V), or (B, 1, V) for the last position only with `last_only` (what
        generation needs: a prefill skips T-1 vocabulary-sized products). The trace always
        covers every position up to the final norm; its "logits" entry matches `logits`
        (a lazy trace's: every position's, computed when read).

        `lazy` (default: without a KV cache, in eval mode, autograd off) keeps only the stream
        between blocks and computes a block's entries when first read: see `tfm.core.lazy`; `keep`
        names block entries it stores in the forward too (`("pattern",)`: every pattern, no recomputation).
        `edits`: interventions for this call only (a list of tfm.core.edits edits, see there); an
        edited forward's trace is eager (a lazy one would recompute blocks without the edits).
        An encoder's batch: `attention_mask` (B, T), 1 = token, 0 = padding; `token_types` (B, T)
        segments (default: from the ids, `tfm.core.encoder`); a masked batch is traced eagerly."""
        if lazy_trace.wanted(self, trace, lazy, keep, cache, edits, attention_mask):
            return lazy_trace.traced_forward(self, idx, last_only, keep, token_types)
        rec = Recorder() if trace else None
        x = self.hidden(idx, cache, rec, edits, attention_mask=attention_mask, token_types=token_types)
        logits = encoder.head_logits(self, x[:, -1:] if last_only else x)  # (B, T or 1, V)
        if rec is not None:
            rec.add("logits", logits)
        return ModelOutput(logits, rec.finish() if rec else None)

    def hidden(
        self,
        idx: torch.Tensor,
        cache: KVCache | None = None,
        rec: Recorder | None = None,
        edits=None,
        should_stop: cancel.ShouldStop = None,
        attention_mask=None,
        token_types=None,
    ) -> torch.Tensor:
        """The residual stream after the final norm, (B, T, D): what the unembedding reads.
        Advances `cache` by T. `edits` as in `forward`. `should_stop` is asked before each block
        (`tfm.core.cancel`: a long batched forward stops within a block; `cache` is then unusable)."""
        start = self._check_input(idx, cache)
        starts = cache.starts if cache is not None else 0
        x, angles = self.embed(idx, starts, rec, token_types)  # per row for a RaggedKVCache
        local = local_angles(self, starts, idx.shape[1], rec)  # local layers' own RoPE base, or None
        mask = encoder.key_mask(self.config, attention_mask, idx, cache)
        x, edits = self.drop(x), Edits.of(edits, self.config, idx.shape, start) if edits is not None else None
        for i, block in enumerate(self.blocks):
            cancel.check(should_stop, "the forward")
            rope = local if local is not None and block.attn.window is not None else angles
            block_edits = edits.scoped(i) if edits is not None else None
            x = block(x, rec.scoped(f"blocks.{i}") if rec else None, rope, cache, i, block_edits, mask)
        if self.ln_final is not None:
            x = self.ln_final(x, rec.scoped("ln_final") if rec else None)
        if cache is not None:
            cache.advance(idx.shape[1])
        return x

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # tied weights counted once
