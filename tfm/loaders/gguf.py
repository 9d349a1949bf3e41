"""GGUF model files (llama.cpp, Ollama, LM Studio) -> tfm's `GPT`: `load_gguf(path, dtype)`.

`tfm.load("model.gguf")`, `tfm.load("path:<folder holding one .gguf>")` and Ollama model
folders (`tfm.loaders.ollama`) end here. Steps, each checked before the next is paid for:
the header and tensor table are parsed strictly (`gguf_file.read_gguf`); the architecture
must be one of `ARCHITECTURES` (anything else is refused by name, with the list); the config
comes from `<arch>.*` metadata (the app first compares the dequantized size, computed from the
header, with its model limit: `limits.check_gguf`); every tensor's header shape is checked against
the config before any is dequantized; then each tensor is dequantized to float32 (the `gguf`
package's numpy code: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K-Q6_K) and copied in.

llama.cpp stores a Llama query/key projection with the rows of each head interleaved (it
rotates adjacent pairs; Hugging Face and tfm rotate halves): `unpermute` restores them. Qwen2
and GPT-2 files are stored unpermuted. Llama 3.1 / 3.2 files carry their RoPE rescaling as a
`rope_freqs` tensor (one divisor per rotated pair), read into `ModelConfig.rope_freq_factors`.
The tokenizer comes from the metadata
(`tfm.text.gguf_tokenizer`); `lm.tokenizer.chat_template` is the file's chat template (or
None), `lm.tokenizer.bos_id` / `.eot_id` / `.special_tokens` its special ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..core.config import ModelConfig
from ..core.files import reading
from ..core.model import GPT
from ..core.positions import local_inv_freq, rope_inv_freq, sinusoidal_table
from ..text.gguf_tokenizer import tokenizer_from_gguf
from . import gguf_arch
from .convert.common import DTYPES, make_config
from .gguf_file import GGUFFile, read_gguf
from .weights import check_state, check_vocab

ARCHITECTURES = ("llama", "qwen2", "gpt2", *gguf_arch.ARCHS)


def unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row order: rows (head, pair, 2) back to (head, 2, half)."""
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def _get(meta: dict, key: str, source: str, kind=int, default: Any = None):
    value = meta.get(key, default)
    if value is None:
        raise ValueError(f"{source}: the metadata lacks {key!r}")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(
            f"{source}: metadata {key!r} = {str(value)[:40]!r} is not a{'n integer' if kind is int else ' number'}"
        )
    return value


def config_fields(f: GGUFFile, arch: str, source: str) -> dict[str, Any]:
    """ModelConfig fields from `<arch>.*` metadata (and the embedding's shape for the vocabulary)."""
    m, p = f.metadata, arch + "."
    d, h = _get(m, p + "embedding_length", source), _get(m, p + "attention.head_count", source)
    emb = f.tensors.get("token_embd.weight")
    if emb is None or len(emb.shape) != 2:
        raise ValueError(f"{source}: the file has no 2-D token_embd.weight tensor")
    common = dict(
        vocab_size=int(m.get(p + "vocab_size", emb.shape[0])),
        d_model=d,
        n_head=h,
        context_length=_get(m, p + "context_length", source),
        n_layer=_get(m, p + "block_count", source),
        d_ff=_get(m, p + "feed_forward_length", source),
    )
    if arch == "gpt2":
        return dict(
            common,
            norm="layernorm",
            activation="gelu_tanh",
            bias=True,
            pos_encoding="learned",
            norm_eps=_get(m, p + "attention.layer_norm_epsilon", source, float, 1e-5),
            tied_embeddings="output.weight" not in f.tensors,
        )
    return common | _rope_fields(f, arch, common, source)


def _rope_fields(f: GGUFFile, arch: str, common: dict[str, Any], source: str) -> dict[str, Any]:
    """The fields of a RoPE architecture (llama, qwen2 and `gguf_arch.ARCHS`) beyond `common`."""
    m, p, d, h = f.metadata, arch + ".", common["d_model"], common["n_head"]
    head = _get(m, p + "attention.key_length", source, int, d // h if h else 0)
    rope_dim = m.get(p + "rope.dimension_count", head)
    if not h or rope_dim != head:
        raise ValueError(
            f"{source}: rope.dimension_count {rope_dim} differs from the head size {head}; "
            "tfm rotates whole heads for this architecture"
        )
    extra = (
        gguf_arch.config_fields(
            m, arch, common["n_layer"], head, lambda k, kind, default: _get(m, p + k, source, kind, default)
        )
        if arch in gguf_arch.ARCHS
        else {}
    )
    fields = dict(
        norm="rmsnorm",
        activation="swiglu",
        bias=False,
        pos_encoding="rope",
        head_dim=head if head * h != d else None,
        qkv_bias=arch == "qwen2",
        tied_embeddings="output.weight" not in f.tensors,
    )
    fields |= dict(
        n_kv_head=_get(m, p + "attention.head_count_kv", source, int, h),
        norm_eps=_get(m, p + "attention.layer_norm_rms_epsilon", source, float, 1e-6),
        rope_base=_get(m, p + "rope.freq_base", source, float, 10000.0),
    )
    return fields | _rope_scaling(f, p, rope_dim, source) | extra


def _rope_scaling(f: GGUFFile, p: str, rope_dim: int, source: str) -> dict[str, Any]:
    """RoPE rescaling as llama.cpp applies it: a `rope_freqs` tensor (Llama 3.1 / 3.2: one
    divisor per rotated pair, the llama3 rescaling precomputed) or `rope.scaling.type` linear."""
    kind = f.metadata.get(p + "rope.scaling.type", "none")
    if kind not in ("none", "linear"):
        raise ValueError(
            f"{source}: RoPE scaling {str(kind)[:20]!r} is not supported; tfm reads plain RoPE, "
            "linear scaling and a rope_freqs tensor"
        )
    t = f.tensors.get("rope_freqs.weight")
    if t is not None:
        if kind != "none":
            raise ValueError(f"{source}: both rope.scaling.type and a rope_freqs tensor: which applies is unclear")
        if t.shape != (rope_dim // 2,) or t.qtype.name != "F32":
            raise ValueError(
                f"{source}: rope_freqs.weight must be F32 of shape ({rope_dim // 2},), "
                f"one per rotated pair; it is {t.qtype.name} {t.shape}"
            )
        return dict(rope_scaling="factors", rope_freq_factors=tuple(float(x) for x in f.tensor(t.name)))
    if kind == "linear":
        return dict(rope_scaling="linear", rope_factor=_get(f.metadata, p + "rope.scaling.factor", source, float))
    return {}


class Tensors:
    """Hands out the file's tensors by GGUF name, shape checked against the config first (from
    the header: nothing is dequantized for a mismatch); `finish` names tensors never asked for."""

    def __init__(self, f: GGUFFile, source: str):
        self.f, self.source, self.used = f, source, set()

    def check(self, name: str, *shape: int) -> None:
        t = self.f.tensors.get(name)
        if t is None:
            raise ValueError(f"{self.source}: missing tensor {name!r} (expected shape {shape})")
        if t.shape != shape:
            raise ValueError(f"{self.source}: tensor {name!r} has shape {t.shape}, the config expects {shape}")
        self.used.add(name)

    def take(self, name: str, *shape: int) -> torch.Tensor:
        self.check(name, *shape)
        return torch.from_numpy(self.f.tensor(name))

    def finish(self) -> None:
        extra = sorted(set(self.f.tensors) - self.used)
        if extra:
            raise ValueError(
                f"{self.source}: unexpected tensors {extra[:5]}{' ...' if len(extra) > 5 else ''} for this architecture"
            )


def _plan(cfg: ModelConfig, arch: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """tfm name -> (GGUF name, shape) for every tensor except the fused / permuted attention."""
    d, f, v, qd = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.d_attn
    plan = {"tok_emb.weight": ("token_embd.weight", (v, d)), "ln_final.weight": ("output_norm.weight", (d,))}
    if not cfg.tied_embeddings:
        plan["unembed.weight"] = ("output.weight", (v, d))
    if arch == "gpt2":
        plan["pos_emb.weight"] = ("position_embd.weight", (cfg.context_length, d))
        plan["ln_final.bias"] = ("output_norm.bias", (d,))
    for i in range(cfg.n_layer):
        g, o = f"blk.{i}.", f"blocks.{i}."
        plan |= {
            o + "ln1.weight": (g + "attn_norm.weight", (d,)),
            o + "ln2.weight": (g + "ffn_norm.weight", (d,)),
            o + "attn.proj.weight": (g + "attn_output.weight", (d, qd)),
            o + "mlp.proj.weight": (g + "ffn_down.weight", (d, f)),
        }
        if arch != "phi3":  # phi3's ffn_up holds gate and up (gguf_arch.fused)
            plan[o + "mlp.fc.weight"] = (g + "ffn_up.weight", (f, d))
        if arch in gguf_arch.ARCHS:
            plan |= gguf_arch.plan(cfg, arch, i)
        if arch == "gpt2":
            plan |= {
                o + "ln1.bias": (g + "attn_norm.bias", (d,)),
                o + "ln2.bias": (g + "ffn_norm.bias", (d,)),
                o + "attn.proj.bias": (g + "attn_output.bias", (d,)),
                o + "mlp.fc.bias": (g + "ffn_up.bias", (f,)),
                o + "mlp.proj.bias": (g + "ffn_down.bias", (d,)),
                o + "attn.qkv.weight": (g + "attn_qkv.weight", (3 * d, d)),
                o + "attn.qkv.bias": (g + "attn_qkv.bias", (3 * d,)),
            }
        elif arch != "phi3":
            plan[o + "mlp.gate.weight"] = (g + "ffn_gate.weight", (f, d))
    return plan


def _attention(t: Tensors, cfg: ModelConfig, arch: str, i: int, check: bool) -> dict[str, torch.Tensor]:
    """Layer i's separate q, k, v (llama, qwen2) fused into tfm's qkv rows [q | k | v]."""
    if arch == "phi3":
        return gguf_arch.fused(t, cfg, i, check)
    d, kv, g, qd = cfg.d_model, cfg.n_kv_head * cfg.d_head, f"blk.{i}.", cfg.d_attn
    names = [(g + "attn_q.weight", (qd, d)), (g + "attn_k.weight", (kv, d)), (g + "attn_v.weight", (kv, d))]
    biases = (
        [(g + "attn_q.bias", (qd,)), (g + "attn_k.bias", (kv,)), (g + "attn_v.bias", (kv,))] if cfg.qkv_bias else []
    )
    if check:
        for name, shape in names + biases:
            t.check(name, *shape)
        return {}
    q, k, v = (t.take(n, *s) for n, s in names)
    if arch == "llama":
        q, k = unpermute(q, cfg.n_head), unpermute(k, cfg.n_kv_head)
    out = {f"blocks.{i}.attn.qkv.weight": torch.cat([q, k, v])}
    if biases:
        out[f"blocks.{i}.attn.qkv.bias"] = torch.cat([t.take(n, *s) for n, s in biases])
    return out


def convert(f: GGUFFile, cfg: ModelConfig, arch: str, source: str) -> dict[str, torch.Tensor]:
    """Every tensor checked against the config (header only), then dequantized into tfm names."""
    t, plan = Tensors(f, source), _plan(cfg, arch)
    for name, shape in plan.values():
        t.check(name, *shape)
    if arch != "gpt2":
        for i in range(cfg.n_layer):
            _attention(t, cfg, arch, i, check=True)
    if cfg.rope_scaling == "factors":
        t.check("rope_freqs.weight", cfg.rotary_dim // 2)  # read into the config already
    t.finish()
    state = {ours: t.take(name, *shape) for ours, (name, shape) in plan.items()}
    if arch != "gpt2":
        for i in range(cfg.n_layer):
            state |= _attention(t, cfg, arch, i, check=False)
    return state


def build_in_place(cfg: ModelConfig, state: dict[str, torch.Tensor], tokenizer, source: str, dtype: str) -> GPT:
    """A GPT holding `state` (emptied as it goes), built on the meta device so no random init
    is paid for (half of a 135M model's load time): each parameter is a fresh tensor with the
    memory layout `GPT` gives it (matrices (in, out) in memory), filled from `state`."""
    check_vocab(cfg, tokenizer, source)
    with torch.device("meta"):
        model = GPT(cfg)
    params = dict(model.named_parameters())  # a tied head appears once, as tok_emb.weight
    check_state(params, {k: v for k, v in state.items() if k in params or k != "unembed.weight"}, source)
    with torch.no_grad():
        for name, p in params.items():
            t = torch.empty_strided(p.shape, p.stride(), dtype=DTYPES[dtype]).copy_(state.pop(name))
            module, _, attr = name.rpartition(".")
            setattr(model.get_submodule(module), attr, torch.nn.Parameter(t, requires_grad=p.requires_grad))
    if cfg.tied_embeddings:
        model.unembed.weight = model.tok_emb.weight
    fresh = {
        "pos_table": lambda: sinusoidal_table(cfg.context_length, cfg.d_model),
        "inv_freq": lambda: rope_inv_freq(cfg),
        "local_inv_freq": lambda: local_inv_freq(cfg),
    }
    for name, _ in list(model.named_buffers()):
        if name not in fresh:
            raise ValueError(f"GPT has a buffer {name!r} this loader does not know how to fill")
        model.register_buffer(name, fresh[name](), persistent=False)
    return model.eval()


def read_checked(path: str | Path, dtype: str = "float32") -> tuple[GGUFFile, str, ModelConfig]:
    """Header, architecture and config of a GGUF file (ValueError when its architecture is not
    supported or its config not buildable); nothing dequantized. `tfm.loaders.limits.check_gguf`
    compares `f.float_bytes()` with the server's limit from this."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; choose one of {', '.join(DTYPES)}")
    source = Path(path).name
    f = read_gguf(path)
    arch = f.metadata.get("general.architecture")
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise ValueError(
            f"{source}: architecture {str(arch)[:40]!r} is not supported; tfm loads GGUF files of "
            f"{', '.join(ARCHITECTURES)}"
        )
    with reading(source):
        return f, arch, make_config(source, "its header", **config_fields(f, arch, source))


def load_gguf(path: str | Path, dtype: str = "float32") -> tuple[GPT, Any, dict]:
    """Model, tokenizer and meta from a GGUF file (see the module doc)."""
    f, arch, cfg = read_checked(path, dtype)
    source = Path(path).name
    with reading(source):
        tokenizer = tokenizer_from_gguf(f.metadata, Path(path).stem, source)
        state = convert(f, cfg, arch, source)
    if arch == "gpt2" and not cfg.tied_embeddings and torch.equal(state["unembed.weight"], state["tok_emb.weight"]):
        cfg = cfg.replace(tied_embeddings=True)  # llama.cpp writes GPT-2's tied head out as a copy
        del state["unembed.weight"]
    model = build_in_place(cfg, state, tokenizer, source, dtype)
    meta = {
        "source_format": "gguf",
        "architecture": arch,
        "dtype": dtype,
        "gguf_types": f.types(),
        "gguf_bytes": f.size,
        "name": f.metadata.get("general.name"),
        "license": f.metadata.get("general.license"),
    }
    return model, tokenizer, meta
