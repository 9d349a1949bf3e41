"""The 2017 Transformer: an encoder-decoder, written bottom-up from the engine's parts.

Encoder block: bidirectional self-attention, then MLP. Decoder block: masked (causal)
self-attention, then cross-attention (queries from the decoder, keys and values from the
encoder output, the "memory"), then MLP. `Norm`, `MLP`, `attend`, `sinusoidal_table` are
the same code the GPT uses. Trace names (see `tfm.trace` for the axes):

    enc.embed, enc.pos_embed              (B, S, D), (S, D)  source tokens (x sqrt(D)) and positions
    enc.blocks.{i}.attn.q|k|v|scores|pattern|z   as in the GPT, over source positions, no causal mask
    enc.blocks.{i}.{resid_pre,attn_out,resid_mid,mlp_out,resid_post}, .ln1.*, .ln2.*, .mlp.*
    memory                                (B, S, D)    encoder output read by every cross-attention
    dec.embed, dec.pos_embed              (B, T, D), (T, D)
    dec.blocks.{i}.self.q|k|v|scores|pattern|z    masked self-attention (B, H, T, T)
    dec.blocks.{i}.cross.q                (B, H, T, hd)  queries from the decoder
    dec.blocks.{i}.cross.k|v              (B, H, S, hd)  keys, values from the memory
    dec.blocks.{i}.cross.scores|pattern   (B, H, T, S)   padded source positions get exactly 0
    dec.blocks.{i}.{resid_pre,self_out,resid_mid,cross_out,resid_cross,mlp_out,resid_post}
    dec.blocks.{i}.ln1|ln2|ln3.*, .mlp.*  norms before/after self, cross, MLP; the MLP
    dec.ln_final.*, logits                (B, T, V_tgt)  (ln_final only with pre-norm)

Padding: `src_pad_mask` (B, S) is True at padded source positions (torch.nn.Transformer's
convention); they are masked as keys in encoder self-attention and in cross-attention.
Target padding sits at the end of each sequence, so the causal mask already keeps real
queries from seeing it, and the loss ignores those positions.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch
import torch.nn as nn
from safetensors.torch import save_file

from ..core.config import Activation, JsonConfig, NormPlacement, NormType, _check_choice
from ..core.model import MLP, Norm, attend, sinusoidal_table
from ..core.trace import Recorder, Trace
from ..core.validate import check_int, check_number
from ..loaders.weights import FolderFormat, check_state, checked_config, read_folder

EncDecPos = Literal["sinusoidal", "learned"]
FORMAT, VERSION = "tfm-encdec", 1


@dataclass(frozen=True, kw_only=True)
class EncDecConfig(JsonConfig):
    """Sizes and variants of an encoder-decoder. Defaults follow the 2017 paper (post-norm,
    ReLU, sinusoidal positions); `Norm` and `MLP` read the same field names as ModelConfig."""

    _kind = "an encoder-decoder config"

    src_vocab_size: int
    tgt_vocab_size: int
    src_context_length: int
    tgt_context_length: int
    d_model: int
    n_enc_layer: int
    n_dec_layer: int
    n_head: int
    d_ff: int
    pos_encoding: EncDecPos = "sinusoidal"
    norm: NormType = "layernorm"
    norm_placement: NormPlacement = "post"
    activation: Activation = "relu"
    bias: bool = True
    norm_eps: float = 1e-5
    dropout: float = 0.0

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size"):
            check_int(name, getattr(self, name), 2, 1_000_000)
        for name in ("src_context_length", "tgt_context_length"):
            check_int(name, getattr(self, name), 1, 100_000)
        check_int("d_model", self.d_model, 1, 16_384)
        check_int("n_enc_layer", self.n_enc_layer, 1, 100)
        check_int("n_dec_layer", self.n_dec_layer, 1, 100)
        check_int("n_head", self.n_head, 1, 1_024)
        check_int("d_ff", self.d_ff, 1, 1_000_000)
        if self.d_model % self.n_head:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_head={self.n_head}; "
                "pick n_head among the divisors of d_model"
            )
        _check_choice("pos_encoding", self.pos_encoding, EncDecPos)
        _check_choice("norm", self.norm, NormType)
        _check_choice("norm_placement", self.norm_placement, NormPlacement)
        _check_choice("activation", self.activation, Activation)
        if self.pos_encoding == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"sinusoidal encodings pair sin/cos: d_model={self.d_model} must be even")
        if not isinstance(self.bias, bool):
            raise ValueError(f"bias must be true or false, got {self.bias!r}")
        for name in ("norm_eps", "dropout"):
            check_number(name, getattr(self, name))
        if not (0 < self.norm_eps < 1):
            raise ValueError(f"norm_eps={self.norm_eps} must be a small positive number such as 1e-5")
        if not (0 <= self.dropout < 1):
            raise ValueError(f"dropout={self.dropout} must be in [0, 1)")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head


class EncDecOutput(NamedTuple):
    logits: torch.Tensor  # (B, T, V_tgt)
    trace: Trace | None


class MultiHeadAttention(nn.Module):
    """Attention with separate q, k, v projections, so queries and keys may come from
    different sequences (self-attention passes the same x twice)."""

    def __init__(self, cfg: EncDecConfig) -> None:
        super().__init__()
        self.n_head, self.d_head = cfg.n_head, cfg.d_head
        self.dropout = cfg.dropout
        d = cfg.d_model
        self.q, self.k, self.v = (nn.Linear(d, d, bias=cfg.bias) for _ in range(3))
        self.proj = nn.Linear(d, d, bias=cfg.bias)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_head, self.d_head).transpose(1, 2)  # (B, T, D) -> (B, H, T, hd)

    def forward(self, x_q, x_kv, mask, rec: Recorder | None) -> torch.Tensor:
        q = self.split_heads(self.q(x_q))  # (B, H, T, hd)
        k = self.split_heads(self.k(x_kv))  # (B, H, S, hd)
        v = self.split_heads(self.v(x_kv))  # (B, H, S, hd)
        if rec is not None:
            for name, t in (("q", q), ("k", k), ("v", v)):
                rec.add(name, t)
        z = attend(q, k, v, mask, rec, self.dropout if self.training else 0.0)  # (B, H, T, hd)
        merged = z.transpose(1, 2).reshape(x_q.shape)  # (B, H, T, hd) -> (B, T, D)
        if rec is not None:
            rec.shape_only("z_merged", merged)
        return self.proj(merged)


def _sub(rec: Recorder | None):
    return (lambda name: rec.scoped(name)) if rec is not None else (lambda name: None)


def _add(rec: Recorder | None, name: str, t: torch.Tensor) -> None:
    if rec is not None:
        rec.add(name, t)


class ResidualBlock(nn.Module):
    """Shared by both blocks: one residual sublayer, with the norm before or after the sum."""

    def __init__(self, cfg: EncDecConfig) -> None:
        super().__init__()
        self.pre = cfg.norm_placement == "pre"
        self.drop = nn.Dropout(cfg.dropout)

    def sublayer(self, x, norm: Norm, norm_name: str, fn, out_name: str, resid_name: str, rec):
        """pre-norm: x + fn(norm(x)); post-norm (2017): norm(x + fn(x)). Records fn's output
        as `out_name` and the new residual stream as `resid_name`."""
        sub = _sub(rec)
        out = self.drop(fn(norm(x, sub(norm_name)) if self.pre else x))
        _add(rec, out_name, out)
        x = x + out if self.pre else norm(x + out, sub(norm_name))
        _add(rec, resid_name, x)
        return x


class EncoderBlock(ResidualBlock):
    """Bidirectional self-attention (padding keys masked), then MLP."""

    def __init__(self, cfg: EncDecConfig) -> None:
        super().__init__(cfg)
        self.ln1, self.attn, self.ln2, self.mlp = Norm(cfg), MultiHeadAttention(cfg), Norm(cfg), MLP(cfg)

    def forward(self, x, keep, rec: Recorder | None):
        sub = _sub(rec)
        _add(rec, "resid_pre", x)
        x = self.sublayer(
            x, self.ln1, "ln1", lambda h: self.attn(h, h, keep, sub("attn")), "attn_out", "resid_mid", rec
        )
        return self.sublayer(x, self.ln2, "ln2", lambda h: self.mlp(h, sub("mlp")), "mlp_out", "resid_post", rec)


class DecoderBlock(ResidualBlock):
    """Masked self-attention, cross-attention over the memory, MLP; each with a residual."""

    def __init__(self, cfg: EncDecConfig) -> None:
        super().__init__(cfg)
        self.ln1, self.self_attn = Norm(cfg), MultiHeadAttention(cfg)
        self.ln2, self.cross_attn = Norm(cfg), MultiHeadAttention(cfg)
        self.ln3, self.mlp = Norm(cfg), MLP(cfg)

    def forward(self, x, memory, keep_src, rec: Recorder | None):
        sub = _sub(rec)
        _add(rec, "resid_pre", x)
        x = self.sublayer(
            x, self.ln1, "ln1", lambda h: self.self_attn(h, h, "causal", sub("self")), "self_out", "resid_mid", rec
        )
        # queries from the decoder stream, keys and values from the encoder's memory
        x = self.sublayer(
            x,
            self.ln2,
            "ln2",
            lambda h: self.cross_attn(h, memory, keep_src, sub("cross")),
            "cross_out",
            "resid_cross",
            rec,
        )
        return self.sublayer(x, self.ln3, "ln3", lambda h: self.mlp(h, sub("mlp")), "mlp_out", "resid_post", rec)


class Embedding(nn.Module):
    """Token embedding x sqrt(d_model) (the paper's scaling) plus positions."""

    def __init__(self, vocab: int, length: int, cfg: EncDecConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, cfg.d_model)
        self.scale = math.sqrt(cfg.d_model)
        self.pos = nn.Embedding(length, cfg.d_model) if cfg.pos_encoding == "learned" else None
        if self.pos is None:
            self.register_buffer("table", sinusoidal_table(length, cfg.d_model), persistent=False)

    def forward(self, idx: torch.Tensor, rec: Recorder | None) -> torch.Tensor:
        x = self.tok(idx) * self.scale  # (B, T, D)
        t = idx.shape[1]
        pos = self.pos.weight[:t] if self.pos is not None else self.table[:t]  # (T, D)
        if rec is not None:
            rec.add("embed", x)
            rec.add("pos_embed", pos)
        return x + pos


class EncoderDecoder(nn.Module):
    """Source embedding -> encoder blocks -> memory; target embedding -> decoder blocks -> logits."""

    def __init__(self, cfg: EncDecConfig) -> None:
        super().__init__()
        self.config = cfg
        self.src_emb = Embedding(cfg.src_vocab_size, cfg.src_context_length, cfg)
        self.tgt_emb = Embedding(cfg.tgt_vocab_size, cfg.tgt_context_length, cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.enc_blocks = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.n_enc_layer))
        self.dec_blocks = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.n_dec_layer))
        # Post-norm blocks already end normalised (the 2017 design); pre-norm needs a last norm.
        pre = cfg.norm_placement == "pre"
        self.enc_ln_final = Norm(cfg) if pre else None
        self.dec_ln_final = Norm(cfg) if pre else None
        self.unembed = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Xavier-uniform matrices (as the reference implementation), zero biases, unit gains.
        A seeded generator gives a reproducible model without touching the global RNG."""
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif p.dim() == 1:
                p.fill_(1.0)
            elif name.endswith("tok.weight"):
                p.normal_(0.0, self.config.d_model**-0.5, generator=generator)  # x sqrt(D) -> unit scale
            else:
                bound = math.sqrt(6.0 / (p.shape[0] + p.shape[1]))
                p.uniform_(-bound, bound, generator=generator)

    def _check(self, ids: torch.Tensor, vocab: int, length: int, what: str) -> None:
        if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32) or ids.dim() != 2:
            raise ValueError(f"{what} ids must be an integer tensor of shape (batch, seq)")
        if ids.shape[0] == 0 or ids.shape[1] == 0:
            raise ValueError(f"the {what} batch {tuple(ids.shape)} is empty")
        if ids.shape[1] > length:
            raise ValueError(f"{what} length {ids.shape[1]} exceeds the model's {what} context of {length}")
        if int(ids.min()) < 0 or int(ids.max()) >= vocab:
            raise ValueError(f"{what} ids must be in [0, {vocab}), got {int(ids.min())}..{int(ids.max())}")

    @staticmethod
    def key_mask(src_shape: tuple[int, ...], src_pad_mask: torch.Tensor | None):
        """(B, 1, 1, S) bool, True = may attend; None when nothing is padded."""
        if src_pad_mask is None:
            return None
        if tuple(src_pad_mask.shape) != tuple(src_shape) or src_pad_mask.dtype != torch.bool:
            raise ValueError(
                f"src_pad_mask must be a bool tensor shaped like src {tuple(src_shape)}, "
                f"got {src_pad_mask.dtype} {tuple(src_pad_mask.shape)}"
            )
        if bool(src_pad_mask.all(-1).any()):
            raise ValueError("a source sequence is all padding: every source needs at least one real token")
        return ~src_pad_mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S)

    def encode(self, src, src_pad_mask=None, rec: Recorder | None = None) -> torch.Tensor:
        """Source ids (B, S) -> memory (B, S, D)."""
        self._check(src, self.config.src_vocab_size, self.config.src_context_length, "source")
        keep = self.key_mask(src.shape, src_pad_mask)
        x = self.drop(self.src_emb(src, rec.scoped("enc") if rec else None))
        for i, block in enumerate(self.enc_blocks):
            x = block(x, keep, rec.scoped(f"enc.blocks.{i}") if rec else None)
        if self.enc_ln_final is not None:
            x = self.enc_ln_final(x, rec.scoped("enc.ln_final") if rec else None)
        if rec is not None:
            rec.add("memory", x)
        return x

    def decode(self, tgt, memory, src_pad_mask=None, rec: Recorder | None = None) -> torch.Tensor:
        """Target ids (B, T) and memory (B, S, D) -> logits (B, T, V_tgt)."""
        self._check(tgt, self.config.tgt_vocab_size, self.config.tgt_context_length, "target")
        keep = self.key_mask(memory.shape[:2], src_pad_mask)
        x = self.drop(self.tgt_emb(tgt, rec.scoped("dec") if rec else None))
        for i, block in enumerate(self.dec_blocks):
            x = block(x, memory, keep, rec.scoped(f"dec.blocks.{i}") if rec else None)
        if self.dec_ln_final is not None:
            x = self.dec_ln_final(x, rec.scoped("dec.ln_final") if rec else None)
        logits = self.unembed(x)  # (B, T, V_tgt)
        if rec is not None:
            rec.add("logits", logits)
        return logits

    def forward(self, src, tgt, src_pad_mask=None, trace: bool = False) -> EncDecOutput:
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"source batch {src.shape[0]} and target batch {tgt.shape[0]} differ")
        rec = Recorder() if trace else None
        memory = self.encode(src, src_pad_mask, rec)
        logits = self.decode(tgt, memory, src_pad_mask, rec)
        return EncDecOutput(logits, rec.finish() if rec else None)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


@torch.no_grad()
def greedy_decode(
    model: EncoderDecoder, src, src_pad_mask=None, *, bos_id: int, eos_id: int, max_len: int | None = None
) -> torch.Tensor:
    """Encode once, then append the argmax token until every row has emitted `eos_id`.

    Returns (B, 1 + n) ids starting with `bos_id`; after a row's EOS it continues with EOS.
    """
    limit = model.config.tgt_context_length if max_len is None else min(max_len, model.config.tgt_context_length)
    memory = model.encode(src, src_pad_mask)
    out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    while out.shape[1] < limit and not bool(done.all()):
        nxt = model.decode(out, memory, src_pad_mask)[:, -1].argmax(-1)  # (B,)
        nxt = torch.where(done, torch.full_like(nxt, eos_id), nxt)
        out = torch.cat([out, nxt[:, None]], dim=1)
        done |= nxt == eos_id
    return out


def save_encdec(folder: str | Path, model: EncoderDecoder, meta: dict | None = None) -> Path:
    """Write config.json (format, config, meta) and model.safetensors into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": FORMAT})
    data = {"format": FORMAT, "version": VERSION, "model": model.config.to_dict(), "meta": meta or {}}
    (folder / "config.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return folder


ENCDEC_FOLDER = FolderFormat(FORMAT, VERSION, "an encoder-decoder", EncDecConfig.from_dict)


def model_from_parts(data: Any, state: dict[str, torch.Tensor], source: str) -> tuple[EncoderDecoder, dict]:
    """Build a model from parsed config.json data and a state dict, checking every key and shape."""
    cfg = checked_config(data, ENCDEC_FOLDER, f"{source}'s config.json")
    return _build(cfg, data, state, source)


def _build(cfg: EncDecConfig, data: dict, state: dict[str, torch.Tensor], source: str) -> tuple[EncoderDecoder, dict]:
    model = EncoderDecoder(cfg)
    check_state(model.state_dict(), state, source)
    model.load_state_dict(state)
    meta = data.get("meta") or {}
    return model.eval(), meta if isinstance(meta, dict) else {}


def load_encdec(folder: str | Path, max_weight_bytes: int | None = None) -> tuple[EncoderDecoder, dict]:
    """Read a folder written by `save_encdec` (tfm.loaders.weights.read_folder: checked, bounded when
    `max_weight_bytes` is given); returns (eval-mode model, meta)."""
    data, cfg, state = read_folder(folder, ENCDEC_FOLDER, max_weight_bytes)
    return _build(cfg, data, state, str(folder))
