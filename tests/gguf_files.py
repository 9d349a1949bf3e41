"""Small GGUF files written in the tests with the `gguf` package's own `GGUFWriter`, as
llama.cpp's converter lays them out: random llama / qwen2 / gpt2 weights in a chosen tensor
type, a byte-level BPE ("gpt2") or SentencePiece-style ("llama") vocabulary in the metadata.

K-quant types (Q2_K-Q6_K) cannot be produced by `gguf.quants.quantize`; their blocks are
random bytes with the float16 scale fields set to small finite values, which every reader
must dequantize the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter, quants

from tests.conftest import BPE_TEXT

# K-quant blocks: (byte offset, value) of each float16 scale field (d, dmin) in a block.
K_SCALES = {
    "Q2_K": ((80, 0.01), (82, 0.01)),
    "Q3_K": ((108, 0.003),),
    "Q4_K": ((0, 0.0005), (2, 0.0005)),
    "Q5_K": ((0, 0.0003), (2, 0.0003)),
    "Q6_K": ((208, 0.0001),),
}
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


@dataclass
class Vocab:
    model: str  # "gpt2" or "llama"
    tokens: list[str]
    types: list[int]
    merges: list[str] | None = None
    scores: list[float] | None = None
    pre: str | None = None
    bos: int | None = None
    eos: int | None = None
    extra: dict = field(default_factory=dict)


def bytelevel_vocab(size: int = 320, pre: str = "gpt2") -> Vocab:
    """A byte-level BPE trained here (all 256 bytes, <|endoftext|> and <|im_start|>/<|im_end|>
    control tokens) as llama.cpp stores one."""
    import tokenizers

    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        BPE_TEXT, vocab_size=size, show_progress=False, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    )
    import json

    data = json.loads(bpe.to_str())
    vocab = data["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    types = [3 if t.startswith("<|") and t.endswith("|>") else 1 for t in tokens]
    return Vocab(
        "gpt2", tokens, types, merges=merges, pre=pre, bos=tokens.index("<|im_start|>"), eos=tokens.index("<|im_end|>")
    )


def sentencepiece_vocab(size: int = 400) -> Vocab:
    """A SentencePiece-style BPE (▁ for spaces, <0xNN> byte fallback, scores instead of merges)
    trained here with the tokenizers library, as llama.cpp stores Llama 2 / TinyLlama's."""
    import tokenizers
    from tokenizers import models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE(byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    trainer = trainers.BpeTrainer(
        vocab_size=size, show_progress=False, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=[]
    )
    tok.train_from_iterator(BPE_TEXT, trainer)
    learned = [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1]) if t not in ("<unk>", "<s>", "</s>")]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tokens = ["<unk>", "<s>", "</s>"] + byte_tokens + [t for t in learned if t not in byte_tokens]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(tokens) - 259)
    scores = [0.0] * 259 + [-float(i) for i in range(len(tokens) - 259)]
    return Vocab("llama", tokens, types, scores=scores, bos=1, eos=2)


def random_tensor(
    shape: tuple[int, ...], qtype: str, rng: np.random.Generator, norm: bool = False
) -> tuple[np.ndarray, GGMLQuantizationType]:
    """(stored array, type) for a tensor of numpy `shape`: floats quantized by gguf.quants, or
    random K-quant blocks."""
    t = GGMLQuantizationType[qtype]
    if norm or len(shape) == 1:
        return (1 + 0.2 * rng.standard_normal(shape) if norm else 0.25 * rng.standard_normal(shape)).astype(
            np.float32
        ), GGMLQuantizationType.F32
    if qtype in K_SCALES:
        block, size = GGML_QUANT_SIZES[t]
        raw = rng.integers(0, 256, (*shape[:-1], shape[-1] // block, size), dtype=np.uint8)
        for offset, value in K_SCALES[qtype]:
            raw[..., offset : offset + 2] = np.frombuffer(np.float16(value).tobytes(), np.uint8)
        return raw.reshape(*shape[:-1], -1), t
    x = (0.25 * rng.standard_normal(shape)).astype(np.float32)
    if qtype == "F32":
        return x, t
    if qtype == "F16":
        return x.astype(np.float16), t
    return quants.quantize(x, t), t


def tensor_shapes(
    arch: str, d: int, f: int, n_layer: int, n_head: int, n_kv: int, vocab: int, ctx: int, tied: bool
) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name -> numpy shape, as llama.cpp names them."""
    kv = d // n_head * n_kv
    out = {"token_embd.weight": (vocab, d), "output_norm.weight": (d,)}
    if not tied:
        out["output.weight"] = (vocab, d)
    if arch == "gpt2":
        out |= {"position_embd.weight": (ctx, d), "output_norm.bias": (d,)}
    for i in range(n_layer):
        b = f"blk.{i}."
        out |= {
            b + "attn_norm.weight": (d,),
            b + "ffn_norm.weight": (d,),
            b + "attn_output.weight": (d, d),
            b + "ffn_up.weight": (f, d),
            b + "ffn_down.weight": (d, f),
        }
        if arch == "gpt2":
            out |= {
                b + "attn_qkv.weight": (3 * d, d),
                b + "attn_qkv.bias": (3 * d,),
                b + "attn_norm.bias": (d,),
                b + "ffn_norm.bias": (d,),
                b + "attn_output.bias": (d,),
                b + "ffn_up.bias": (f,),
                b + "ffn_down.bias": (d,),
            }
        else:
            out |= {
                b + "attn_q.weight": (d, d),
                b + "attn_k.weight": (kv, d),
                b + "attn_v.weight": (kv, d),
                b + "ffn_gate.weight": (f, d),
            }
            if arch == "qwen2":
                out |= {b + "attn_q.bias": (d,), b + "attn_k.bias": (kv,), b + "attn_v.bias": (kv,)}
    return out


LLAMA3_ROPE = dict(
    rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=256
)


def llama_cpp_rope_freqs(head: int, base: float = 10000.0) -> np.ndarray:
    """What llama.cpp's converter writes as rope_freqs for Llama 3.1's rescaling: per pair,
    1 for short wavelengths, `factor` for long ones, the smooth blend's divisor between."""
    r = LLAMA3_ROPE
    low, high = (
        r["original_max_position_embeddings"] / r["low_freq_factor"],
        r["original_max_position_embeddings"] / r["high_freq_factor"],
    )
    out = []
    for freq in 1.0 / base ** (np.arange(0, head, 2) / head):
        wavelen = 2 * np.pi / freq
        if wavelen < high:
            out.append(1.0)
        elif wavelen > low:
            out.append(r["factor"])
        else:
            smooth = (r["original_max_position_embeddings"] / wavelen - r["low_freq_factor"]) / (
                r["high_freq_factor"] - r["low_freq_factor"]
            )
            out.append(1 / ((1 - smooth) / r["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def write_model(
    path: Path,
    arch: str = "llama",
    qtype: str = "F32",
    vocab: Vocab | None = None,
    d: int = 64,
    f: int = 96,
    n_layer: int = 2,
    n_head: int = 4,
    n_kv: int = 2,
    ctx: int = 64,
    tied: bool = False,
    seed: int = 0,
    extra_kv: dict | None = None,
    skip: tuple[str, ...] = (),
    shapes: dict | None = None,
    extra_tensors: dict[str, np.ndarray] | None = None,
) -> Path:
    """A random model file. `extra_kv` adds/overrides metadata ({key: (value, GGUFValueType)}),
    `skip` drops tensors, `shapes` overrides tensor shapes (for hostile-file tests),
    `extra_tensors` adds tensors with given float32 data (e.g. rope_freqs.weight)."""
    vocab = vocab or bytelevel_vocab()
    rng = np.random.default_rng(seed)
    w = GGUFWriter(str(path), arch)
    _write_shape(w, arch, d, f, n_layer, n_head, n_kv, ctx)
    _write_vocab(w, vocab)
    for key, (value, kind) in (extra_kv or {}).items():
        w.add_key_value(key, value, kind)
    all_shapes = tensor_shapes(arch, d, f, n_layer, n_head, n_kv, len(vocab.tokens), ctx, tied) | (shapes or {})
    _write_tensors(w, {k: v for k, v in all_shapes.items() if k not in skip}, qtype, rng, extra_tensors or {})
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _write_tensors(w: GGUFWriter, shapes: dict, qtype: str, rng: np.random.Generator, extra: dict) -> None:
    """Random tensors of `shapes` in `qtype` (norm weights near 1), then `extra`'s as float32."""
    for name, shape in shapes.items():
        data, t = random_tensor(shape, qtype, rng, norm=name.endswith("norm.weight"))
        w.add_tensor(name, data, raw_dtype=t if t not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16) else None)
    for name, data in extra.items():
        w.add_tensor(name, np.asarray(data, dtype=np.float32))


def _write_shape(w: GGUFWriter, arch: str, d: int, f: int, n_layer: int, n_head: int, n_kv: int, ctx: int) -> None:
    """The architecture's sizes; GPT-2's LayerNorm epsilon, or the others' KV heads, RMSNorm and RoPE."""
    p = arch + "."
    w.add_uint32(p + "context_length", ctx)
    w.add_uint32(p + "embedding_length", d)
    w.add_uint32(p + "block_count", n_layer)
    w.add_uint32(p + "feed_forward_length", f)
    w.add_uint32(p + "attention.head_count", n_head)
    if arch == "gpt2":
        w.add_float32(p + "attention.layer_norm_epsilon", 1e-5)
    else:
        w.add_uint32(p + "attention.head_count_kv", n_kv)
        w.add_float32(p + "attention.layer_norm_rms_epsilon", 1e-6)
        w.add_float32(p + "rope.freq_base", 10000.0)
        w.add_uint32(p + "rope.dimension_count", d // n_head)


def _write_vocab(w: GGUFWriter, v: Vocab) -> None:
    w.add_tokenizer_model(v.model)
    if v.pre:
        w.add_tokenizer_pre(v.pre)
    w.add_token_list(v.tokens)
    w.add_token_types(v.types)
    if v.merges is not None:
        w.add_token_merges(v.merges)
    if v.scores is not None:
        w.add_token_scores(v.scores)
    if v.bos is not None:
        w.add_bos_token_id(v.bos)
    if v.eos is not None:
        w.add_eos_token_id(v.eos)
    w.add_chat_template(CHAT_TEMPLATE)
