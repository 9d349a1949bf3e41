"""Model configuration: one frozen, validated dataclass and a few named presets.

Nothing here executes code from a file: configs come from keyword arguments, a preset name,
or a plain JSON dict (`ModelConfig.from_dict`), and every bad value raises `ValueError`
with a message that says what is allowed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Self, get_args

from .validate import check_int, check_number, from_json_object
from .window import check_fields as _check_layer_fields

PosEncoding = Literal["learned", "sinusoidal", "rope", "none"]
NormType = Literal["layernorm", "rmsnorm"]
NormPlacement = Literal["pre", "post"]
Activation = Literal["gelu", "gelu_tanh", "relu", "swiglu", "geglu"]
RopeScaling = Literal["none", "linear", "llama3", "factors"]
LMHead = Literal["next", "masked", "none"]


def _check_choice(name: str, value: Any, kind: Any) -> None:
    allowed = get_args(kind)
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}")


class JsonConfig:
    """What the frozen config dataclasses share (`ModelConfig`, `tfm.teach.encdec.EncDecConfig`):
    validated copies and plain-JSON round trips. `_kind` names the config in messages."""

    _kind = "a model config"

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (tuples as lists), equal to what `from_dict` reads back from a file."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Build from plain JSON data; unknown or missing keys are an error, not silently dropped."""
        return from_json_object(cls, data, cls._kind)


@dataclass(frozen=True, kw_only=True)
class ModelConfig(JsonConfig):
    """Shape and architecture of a transformer: a decoder (causal) or a BERT-style encoder.

    `activation`: "gelu" is the exact (erf) GELU of nanoGPT / PyTorch, "gelu_tanh" the tanh
    approximation GPT-2 was trained with, "swiglu" the gated unit of PaLM / Llama (its
    hidden width is `d_ff`, with a third weight matrix).
    `norm_placement`: "pre" normalises each sublayer's input (GPT-2); "post" normalises after
    the residual sum (the 2017 paper).

    `n_kv_head`: key/value heads (grouped-query attention when fewer than `n_head`, multi-query
    at 1); each serves n_head / n_kv_head consecutive query heads. Defaults to n_head.
    RoPE fields (used only when pos_encoding == "rope"): `rope_base` is Hugging Face's rope_theta;
    `rotary_pct` the fraction of each head's dimensions rotated (Pythia: 0.25); `rope_scaling`
    rescales the frequencies ("linear": all divided by `rope_factor`; "llama3": Llama 3.1's
    wavelength-banded rescaling, with `rope_low_freq_factor`, `rope_high_freq_factor` and
    `rope_original_context`; "factors": each pair's frequency divided by its own entry of
    `rope_freq_factors`, as llama.cpp applies a GGUF file's rope_freqs tensor).
    `parallel_block`: attention and MLP both read the block's input (GPT-NeoX):
    x + attn(ln1(x)) + mlp(ln2(x)). `qkv_bias`: biases on the query/key/value
    projection even when `bias` is false (Qwen2).
    Gemma 3 / Qwen3 / Phi-3 fields (`tfm.core.window` validates them): `head_dim` when heads are
    not d_model / n_head wide; `qk_norm`: an RMSNorm over each head's query and key before RoPE;
    `post_norms`: a norm after each sublayer too (Gemma's four norms a block); "geglu" is the
    tanh-GELU gated unit; `scale_embeddings`: embeddings times sqrt(d_model) in their dtype;
    `attn_scalar`: scores divided by its square root instead of sqrt(head size); `local_layers`
    read only the `sliding_window` most recent keys, with RoPE base `rope_local_base` (None: rope_base).
    Encoders (BERT; `tfm.core.encoder`): `causal=False` lets every token see every token (a
    padding mask hides pad keys); `embed_norm` adds a LayerNorm over the summed embeddings;
    `type_vocab_size` token-type (segment) embeddings, with segment 1 after the first
    `sep_token_id` in the ids ([CLS] A [SEP] B [SEP]); `lm_head`: "next" predicts the next
    token, "masked" fills [MASK] (BERT's transform, then the tied embedding plus a bias),
    "none" has no language-model head (the tied embedding's logits mean nothing).
    """

    vocab_size: int
    context_length: int
    d_model: int
    n_layer: int
    n_head: int
    d_ff: int
    pos_encoding: PosEncoding = "learned"
    norm: NormType = "layernorm"
    norm_placement: NormPlacement = "pre"
    activation: Activation = "gelu_tanh"
    bias: bool = True
    tied_embeddings: bool = True
    norm_eps: float = 1e-5
    dropout: float = 0.0
    rope_base: float = 10000.0
    n_kv_head: int | None = None  # None = n_head; stored resolved
    rotary_pct: float = 1.0
    rope_scaling: RopeScaling = "none"
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_context: int = 8192
    rope_freq_factors: tuple[float, ...] = ()  # one per rotated pair, only with rope_scaling="factors"
    parallel_block: bool = False
    qkv_bias: bool = False
    head_dim: int | None = None  # None = d_model // n_head
    qk_norm: bool = False
    post_norms: bool = False
    scale_embeddings: bool = False
    attn_scalar: float | None = None
    sliding_window: int | None = None
    local_layers: tuple[int, ...] = ()
    rope_local_base: float | None = None
    causal: bool = True
    embed_norm: bool = False
    type_vocab_size: int = 0
    sep_token_id: int | None = None
    lm_head: LMHead = "next"

    def __post_init__(self) -> None:
        check_int("vocab_size", self.vocab_size, 2, 1_000_000)
        check_int("context_length", self.context_length, 1, 1_000_000)
        check_int("d_model", self.d_model, 1, 65_536)
        check_int("n_layer", self.n_layer, 1, 1_000)
        check_int("n_head", self.n_head, 1, 1_024)
        check_int("d_ff", self.d_ff, 1, 1_000_000)
        _check_layer_fields(self)
        self._check_kv_heads()
        self._check_rope()
        if self.pos_encoding == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"sinusoidal encodings pair sin/cos: d_model={self.d_model} must be even")
        _check_choice("pos_encoding", self.pos_encoding, PosEncoding)
        _check_choice("norm", self.norm, NormType)
        _check_choice("norm_placement", self.norm_placement, NormPlacement)
        _check_choice("activation", self.activation, Activation)
        for flag in ("bias", "tied_embeddings", "parallel_block", "qkv_bias", "causal", "embed_norm"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{flag} must be true or false, got {getattr(self, flag)!r}")
        self._check_encoder()
        for name in ("norm_eps", "dropout", "rope_base"):
            check_number(name, getattr(self, name))
        if not (0 < self.norm_eps < 1):
            raise ValueError(f"norm_eps={self.norm_eps} must be a small positive number such as 1e-5")
        if not (0 <= self.dropout < 1):
            raise ValueError(f"dropout={self.dropout} must be in [0, 1)")
        if not (self.rope_base > 1):
            raise ValueError(f"rope_base={self.rope_base} must be greater than 1 (10000 is usual)")
        if self.parallel_block and self.norm_placement != "pre":
            raise ValueError("parallel_block=true needs norm_placement='pre' (GPT-NeoX normalises each branch's input)")

    def _check_encoder(self) -> None:
        _check_choice("lm_head", self.lm_head, LMHead)
        check_int("type_vocab_size", self.type_vocab_size, 0, 64, " (BERT has 2 segments; 0 = none)")
        if self.sep_token_id is not None:
            check_int("sep_token_id", self.sep_token_id, 0, self.vocab_size - 1, " (an id of the vocabulary)")
        if (self.lm_head == "next") != (self.causal is True):
            raise ValueError(
                f"lm_head={self.lm_head!r} with causal={self.causal!r}: next-token prediction needs causal "
                "attention, and a bidirectional encoder has lm_head 'masked' or 'none'"
            )
        if self.lm_head == "none" and not self.tied_embeddings:
            raise ValueError(
                "lm_head='none' keeps only the tied embedding as its unembedding: set tied_embeddings=true"
            )

    @property
    def segments(self) -> bool:
        """Whether segment ids come from the token ids (type embeddings and a [SEP] id)."""
        return self.type_vocab_size > 0 and self.sep_token_id is not None

    def _check_kv_heads(self) -> None:
        if self.n_kv_head is None:
            object.__setattr__(self, "n_kv_head", self.n_head)  # resolved once: to_dict holds the number
        check_int("n_kv_head", self.n_kv_head, 1, self.n_head)
        if self.n_head % self.n_kv_head:
            raise ValueError(
                f"n_kv_head={self.n_kv_head} must divide n_head={self.n_head}: each key/value head "
                "serves the same number of query heads"
            )

    def _check_rope(self) -> None:
        _check_choice("rope_scaling", self.rope_scaling, RopeScaling)
        for name in ("rotary_pct", "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor"):
            check_number(name, getattr(self, name))
        check_int("rope_original_context", self.rope_original_context, 1, 10_000_000)
        if not (0 < self.rotary_pct <= 1):
            raise ValueError(
                f"rotary_pct={self.rotary_pct} must be in (0, 1]: the fraction of each head's dims RoPE rotates"
            )
        if self.pos_encoding == "rope" and (self.rotary_dim < 2 or self.rotary_dim % 2):
            part = (
                ""
                if self.rotary_pct == 1
                else f" times rotary_pct={self.rotary_pct}, rounded down, = {self.rotary_dim}"
            )
            raise ValueError(
                f"RoPE rotates pairs of dimensions: d_model/n_head={self.d_head}{part} must be even "
                "(and at least 2); change d_model, n_head or rotary_pct"
            )
        if self.rope_factor < 1:
            raise ValueError(f"rope_factor={self.rope_factor} must be >= 1 (it stretches the wavelengths)")
        if not (0 < self.rope_low_freq_factor < self.rope_high_freq_factor):
            raise ValueError(
                f"need 0 < rope_low_freq_factor ({self.rope_low_freq_factor}) < rope_high_freq_factor "
                f"({self.rope_high_freq_factor}) (Llama 3.1 uses 1 and 4)"
            )
        self._check_freq_factors()

    def _check_freq_factors(self) -> None:
        factors = self.rope_freq_factors
        if not isinstance(factors, (list, tuple)) or len(factors) > 65_536:
            raise ValueError("rope_freq_factors must be a list of numbers, one per rotated pair")
        object.__setattr__(self, "rope_freq_factors", tuple(factors))  # JSON gives a list; the config stays hashable
        for i, f in enumerate(factors):
            check_number(f"rope_freq_factors[{i}]", f)
            if not f > 0:
                raise ValueError(f"rope_freq_factors[{i}]={f} must be positive (it divides a frequency)")
        want = self.rotary_dim // 2 if self.rope_scaling == "factors" else 0
        if len(factors) != want:
            raise ValueError(
                f"rope_freq_factors has {len(factors)} entries; rope_scaling={self.rope_scaling!r} needs "
                f"{want}" + (" (one per rotated pair)" if want else " (they are used only with 'factors')")
            )

    @property
    def d_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_head

    @property
    def d_attn(self) -> int:
        """Width of the concatenated query heads, n_head * d_head (d_model unless head_dim says otherwise)."""
        return self.n_head * self.d_head

    @property
    def rotary_dim(self) -> int:
        """Dimensions of each head that RoPE rotates (the first ones); the rest pass through."""
        return int(self.d_head * self.rotary_pct)

    @property
    def group_size(self) -> int:
        """Query heads per key/value head."""
        return self.n_head // self.n_kv_head

    # The one mapping between query heads and key/value heads (Hugging Face's repeat_kv:
    # consecutive query heads share one); `tfm.core.functional.expand_kv` is its tensor form.
    def kv_head(self, head: int) -> int:
        """The key/value head that query head `head` reads: head // group_size."""
        return (
            check_int("head", head, 0, self.n_head - 1, f" (the model has {self.n_head} query heads)")
            // self.group_size
        )

    def query_heads(self, kv_head: int) -> range:
        """The query heads that share key/value head `kv_head`."""
        g = check_int("key/value head", kv_head, 0, self.n_kv_head - 1, f" (the model has {self.n_kv_head})")
        return range(g * self.group_size, (g + 1) * self.group_size)

    def kv_sharing(self, head: int) -> str:
        """Which key/value head query head `head` reads and who shares it, in words ("" when every
        query head has its own): "key/value head 2, shared by query heads 6, 7, 8"."""
        g = self.kv_head(head)
        if self.group_size == 1:
            return ""
        if self.n_kv_head == 1:
            return f"the model's one key/value head, shared by all {self.n_head} query heads"
        return f"key/value head {g}, shared by query heads {', '.join(map(str, self.query_heads(g)))}"

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "ModelConfig":
        """A named preset (see `PRESETS`), optionally with fields overridden."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(sorted(PRESETS))}")
        return cls(**{**PRESETS[name], **overrides})


PRESETS: dict[str, dict[str, Any]] = {
    # GPT-2 small (124M): learned positions, pre-LN, tanh GELU, biases, tied embeddings.
    "gpt2": dict(vocab_size=50257, context_length=1024, d_model=768, n_layer=12, n_head=12, d_ff=3072),
    "gpt2-medium": dict(vocab_size=50257, context_length=1024, d_model=1024, n_layer=24, n_head=16, d_ff=4096),
    # "Attention Is All You Need" base sizes, as a decoder-only stack: sinusoidal, post-LN, ReLU.
    "transformer-base": dict(
        vocab_size=37000,
        context_length=512,
        d_model=512,
        n_layer=6,
        n_head=8,
        d_ff=2048,
        pos_encoding="sinusoidal",
        norm_placement="post",
        activation="relu",
        tied_embeddings=True,
    ),
    # Llama-style block at toy size: RoPE, RMSNorm, SwiGLU, no biases, untied head.
    "llama-tiny": dict(
        vocab_size=4096,
        context_length=256,
        d_model=128,
        n_layer=4,
        n_head=4,
        d_ff=344,
        pos_encoding="rope",
        norm="rmsnorm",
        activation="swiglu",
        bias=False,
        tied_embeddings=False,
    ),
    # Shaped like today's small open models (random weights; context capped at 2048 for the app).
    "smollm2-135m": dict(
        vocab_size=49152,
        context_length=2048,
        d_model=576,
        n_layer=30,
        n_head=9,
        n_kv_head=3,
        d_ff=1536,
        pos_encoding="rope",
        rope_base=100000.0,
        norm="rmsnorm",
        activation="swiglu",
        bias=False,
    ),
    "qwen2.5-0.5b": dict(
        vocab_size=151936,
        context_length=2048,
        d_model=896,
        n_layer=24,
        n_head=14,
        n_kv_head=2,
        d_ff=4864,
        pos_encoding="rope",
        rope_base=1000000.0,
        norm="rmsnorm",
        norm_eps=1e-6,
        activation="swiglu",
        bias=False,
        qkv_bias=True,
    ),
    "pythia-160m": dict(
        vocab_size=50304,
        context_length=2048,
        d_model=768,
        n_layer=12,
        n_head=12,
        d_ff=3072,
        pos_encoding="rope",
        rotary_pct=0.25,
        parallel_block=True,
        activation="gelu",
        tied_embeddings=False,
    ),
    # BERT-style encoder shaped like all-MiniLM-L6-v2: bidirectional, post-LN, exact GELU, segments.
    "minilm-l6": dict(
        vocab_size=30522,
        context_length=512,
        d_model=384,
        n_layer=6,
        n_head=12,
        d_ff=1536,
        norm_placement="post",
        activation="gelu",
        norm_eps=1e-12,
        causal=False,
        embed_norm=True,
        type_vocab_size=2,
        sep_token_id=102,
        lm_head="none",
    ),
    # The shape of the bundled default model.
    "tfm-small": dict(vocab_size=4096, context_length=256, d_model=192, n_layer=6, n_head=6, d_ff=768),
    # Tiny: for tests and quick exploration of shapes.
    "tiny": dict(vocab_size=257, context_length=32, d_model=16, n_layer=2, n_head=2, d_ff=32),
}
