"""The frozen replacement model of one prompt: the model made linear between feature activations.

From one traced forward of the real model: every attention pattern, every norm's scale (LayerNorm's
std, RMSNorm's rms) and every transcoder activation is held at its value; each MLP is replaced by
its transcoder's decode of those activations plus an error term (the real mlp_out minus that
decode), also held. What is left is affine in the sources (token and position embeddings, each
active feature's activation, each error vector):

    x0 = embed + pos
    block l:  x += attn_l(norm1_l(x))          pattern and scale frozen: linear in x (+ biases)
              m_in_l = norm2_l(x)              (x before attention for a parallel block)
              x += sum_f act_f W_dec[f] + b_dec + error_l
    logit    = norm_final(x) . (W_U[token] - W_U[versus])

A feature's pre-activation is m_in_l W_enc[:, f] + b_enc[f]. `backward` runs the transpose of this
map for a batch of gradient seeds at once (no autograd): the gradient of a node's pre-activation
with respect to the stream after every block, read against each source's vector, gives each
source's direct effect. The MLP path carries no gradient (activations are inputs, not functions of
the stream: each edge is direct), so only attention and the norms move the gradient between layers.
Only pre-norm models: with post-norm every norm rescales the whole running sum.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...core.model import GPT


@dataclass(frozen=True, eq=False)
class LayerConsts:
    """One block's frozen pieces, (T, ...) for this prompt, in the working dtype."""

    scale1: torch.Tensor  # (T,) ln1's std or rms
    scale2: torch.Tensor  # (T,) ln2's
    pattern: torch.Tensor  # (H, T, T)
    w_v: torch.Tensor  # (Hkv*hd, D) value rows of the fused projection
    b_v: torch.Tensor | None
    w_o: torch.Tensor  # (D, H*hd)
    b_o: torch.Tensor | None
    w_enc: torch.Tensor  # (D, F)
    b_enc: torch.Tensor  # (F,)
    w_dec: torch.Tensor  # (F, D)
    b_dec: torch.Tensor  # (D,)


@dataclass(frozen=True, eq=False)
class Frozen:
    """The replacement model of one prompt: weights (views of the model's, cast) and constants."""

    layernorm: bool
    parallel: bool
    n_head: int
    n_kv_head: int
    d_head: int
    gains: tuple  # per block (ln1 (w, b), ln2 (w, b)); b None for RMSNorm or no bias
    final: tuple  # (w, b) of the final norm
    final_scale: torch.Tensor  # (T,)
    layers: tuple[LayerConsts, ...]
    dtype: torch.dtype

    @property
    def n_layer(self) -> int:
        return len(self.layers)

    def norm(self, x: torch.Tensor, scale: torch.Tensor, wb: tuple) -> torch.Tensor:
        """The norm with its scale frozen: affine in x. x (..., T, D), scale (T,)."""
        w, b = wb
        if self.layernorm:
            x = x - x.mean(-1, keepdim=True)
        y = x / scale[:, None] * w
        return y if b is None else y + b

    def norm_t(self, g: torch.Tensor, scale: torch.Tensor, wb: tuple) -> torch.Tensor:
        """The transpose of the norm's linear part (the bias carries no gradient): (..., T, D)."""
        g = g * wb[0] / scale[:, None]
        return g - g.mean(-1, keepdim=True) if self.layernorm else g

    def attention(self, x: torch.Tensor, c: LayerConsts) -> torch.Tensor:
        """attn(x) for one sequence (T, D), pattern frozen."""
        t = x.shape[0]
        v = x @ c.w_v.T + (c.b_v if c.b_v is not None else 0)  # (T, Hkv*hd)
        v = v.view(t, self.n_kv_head, self.d_head).transpose(0, 1)  # (Hkv, T, hd)
        v = v.repeat_interleave(self.n_head // self.n_kv_head, dim=0)  # (H, T, hd): head h reads h // group
        z = c.pattern @ v  # (H, T, hd)
        out = z.transpose(0, 1).reshape(t, -1) @ c.w_o.T  # (T, D)
        return out if c.b_o is None else out + c.b_o

    def attention_t(self, g: torch.Tensor, c: LayerConsts) -> torch.Tensor:
        """The transpose of attn's linear part for a batch of gradients g (R, T', D), T' <= T
        (a row's gradient is zero after its own position: causal)."""
        r, t, _ = g.shape
        dz = (g @ c.w_o).view(r, t, self.n_head, self.d_head).transpose(1, 2)  # (R, H, T', hd)
        h, hd = self.n_head, self.d_head  # rows folded into columns: H products
        dv = c.pattern[:, :t, :t].transpose(-1, -2) @ dz.permute(1, 2, 0, 3).reshape(h, t, r * hd)
        dv = dv.view(h, t, r, hd).permute(2, 0, 1, 3)  # (R, H, T', hd)
        group = self.n_head // self.n_kv_head
        if group > 1:
            dv = dv.view(r, self.n_kv_head, group, t, self.d_head).sum(2)  # (R, Hkv, T', hd)
        return dv.transpose(1, 2).reshape(r, t, -1) @ c.w_v  # (R, T', D)


def _cast(t: torch.Tensor | None, dtype) -> torch.Tensor | None:
    return None if t is None else t.detach().to("cpu", dtype)


def check_model(model: GPT) -> None:
    if model.config.norm_placement != "pre":
        raise ValueError(
            "attribution graphs need a pre-norm model: with post-norm every block's norm rescales "
            "the whole running sum, so nothing is linear between features"
        )


def freeze(model: GPT, trace, transcoders, dtype=torch.float32) -> Frozen:
    """The replacement model of the prompt `trace` recorded (batch row 0)."""
    check_model(model)
    cfg = model.config
    stat = "std" if cfg.norm == "layernorm" else "rms"
    d, kv = cfg.d_model, cfg.n_kv_head * cfg.d_head
    layers, gains = [], []
    for i, block in enumerate(model.blocks):
        tc, w = transcoders.layers[i], block.attn.qkv.weight
        b = block.attn.qkv.bias
        layers.append(
            LayerConsts(
                _cast(trace[f"blocks.{i}.ln1.{stat}"][0], dtype),
                _cast(trace[f"blocks.{i}.ln2.{stat}"][0], dtype),
                _cast(trace.pattern(i), dtype),
                _cast(w[d + kv : d + 2 * kv], dtype),
                _cast(b[d + kv : d + 2 * kv] if b is not None else None, dtype),
                _cast(block.attn.proj.weight, dtype),
                _cast(block.attn.proj.bias, dtype),
                _cast(tc.W_enc, dtype),
                _cast(tc.b_enc, dtype),
                _cast(tc.W_dec, dtype),
                _cast(tc.b_dec, dtype),
            )
        )
        gains.append(tuple((_cast(n.weight, dtype), _cast(n.bias, dtype)) for n in (block.ln1, block.ln2)))
    fin = model.ln_final
    return Frozen(
        cfg.norm == "layernorm",
        cfg.parallel_block,
        cfg.n_head,
        cfg.n_kv_head,
        cfg.d_head,
        tuple(gains),
        (_cast(fin.weight, dtype), _cast(fin.bias, dtype)),
        _cast(trace[f"ln_final.{stat}"][0], dtype),
        tuple(layers),
        dtype,
    )


def forward(fz: Frozen, stream0: torch.Tensor, writes: list[torch.Tensor], u: torch.Tensor):
    """The frozen model on sources: stream0 (T, D) the embeddings' sum, writes[l] (T, D) what the
    features and the error write at block l (without b_dec). Returns (every block's MLP input,
    (L, T, D); the target logit at every position (T,)). With every source zero it gives the biases."""
    x, m_ins = stream0, []
    for i, c in enumerate(fz.layers):
        g1, g2 = fz.gains[i]
        a = fz.attention(fz.norm(x, c.scale1, g1), c)
        if fz.parallel:
            m_ins.append(fz.norm(x, c.scale2, g2))
            x = x + a
        else:
            x = x + a
            m_ins.append(fz.norm(x, c.scale2, g2))
        x = x + writes[i] + c.b_dec
    return torch.stack(m_ins), fz.norm(x, fz.final_scale, fz.final) @ u
