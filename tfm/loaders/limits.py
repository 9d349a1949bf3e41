"""What one request may cost on a shared server, computed from a config before anything is allocated.

A random model's weights and its trace at full context are sized analytically (float32, 4 bytes
a number), so a config that would exhaust the machine is refused with both numbers and what to
change, instead of getting the server killed. `Limits` holds the owner's choices; the app reads
them from environment variables or command-line flags (README, "Running for a class").
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.config import ModelConfig
from ..core.files import read_json, reading
from ..core.lazy import LazyTrace
from ..core.model import GPT
from ..core.trace import estimate_block_bytes, estimate_trace_bytes
from ..core.validate import check_int
from .gguf import read_checked
from .ollama import gguf_in
from .weights import hf_gpt2_config

GB = 1_000_000_000
FLOAT_BYTES = 4  # the app computes and caches traces in float32


def fmt_bytes(n: float) -> str:
    """1.42 GB, 37.7 MB, 512 kB: decimal units, as in the limits' settings."""
    for unit, size in (("GB", GB), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def parse_bytes(text: str) -> int:
    """'2GB', '1.5 GB', '800MB', '123456' -> bytes (decimal units)."""
    s = str(text).strip().upper().replace(" ", "").removesuffix("B")
    scale = {"K": 10**3, "M": 10**6, "G": GB, "T": 1000 * GB}.get(s[-1:], 1)
    try:
        value = float(s[:-1] if scale > 1 else s)
    except ValueError:
        raise ValueError(f"{text!r} is not a size; write e.g. 2GB, 800MB or a number of bytes") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text!r} must be a positive size such as 2GB")
    return int(value * scale)


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Per-request bounds of a shared server. Defaults fit a 2-core / 24 GB machine and let GPT-2
    small and medium shapes (124M / 355M parameters) load and trace at their full 1024 tokens."""

    max_model_bytes: int = 2 * GB  # float32 weights: GPT-2 medium is 1.42 GB
    max_trace_bytes: int = 8 * GB  # one traced forward, every entry read: GPT-2 medium at 1024 is 7.2 GB
    # Prompts whose full trace fits are traced eagerly (tfm.core.lazy.prefer_lazy): one forward instead
    # of a lazy one plus every block again when a page reads them all (the Attention page does),
    # and about the bytes a lazy trace holds once read. SmolLM2 up to 52 tokens, GPT-2 small up to 80.
    eager_trace_bytes: int = 128_000_000
    max_prompt_chars: int = 20_000
    max_new_tokens: int = 512  # per generation (each of up to 4 samples)
    max_generation_bytes: int = GB // 2  # one session's generation timeline: GPT-2 small, 512 tokens
    max_train_steps: int = 3_000  # toy training on the encoder-decoder page
    heavy_slots: int = 2  # heavy computations running at once, server-wide
    batch_rows: int = 32  # generations in one batched decode step (tfm.generation.batcher)
    batch_rows_per_session: int = 4  # of those, one browser session's (every sample of a run is a row)
    torch_threads: int = dataclasses.field(default_factory=lambda: max(1, (os.cpu_count() or 1) // 2))
    # ^ intra-op threads per computation: cores / heavy_slots, so concurrent forwards do not thrash

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check_int(f"limit {f.name}", getattr(self, f.name), 1, hint=" (a positive integer)")
        if self.batch_rows_per_session > self.batch_rows:
            raise ValueError(
                f"limit batch_rows_per_session={self.batch_rows_per_session} is more than batch_rows="
                f"{self.batch_rows}: a session's rows are part of the batch; lower it or raise batch_rows"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Limits":
        """Defaults overridden by TFM_MAX_MODEL_BYTES=2GB, TFM_MAX_NEW_TOKENS=256, ... (see ENV)."""
        env = os.environ if env is None else env
        return cls(
            **{
                name: (parse_bytes if name.endswith("bytes") else _parse_int)(env[var])
                for name, var in ENV.items()
                if env.get(var, "").strip()
            }
        )

    def replace(self, **changes) -> "Limits":
        return dataclasses.replace(self, **changes)


def _parse_int(text: str) -> int:
    try:
        return int(str(text).replace("_", "").strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None


ENV = {f.name: "TFM_" + f.name.upper() for f in dataclasses.fields(Limits)}


@functools.lru_cache(maxsize=256)
def count_params(cfg: ModelConfig) -> int:
    """Parameters of `tfm.model.GPT(cfg)` (tied weights counted once): the model itself built on
    the meta device, which allocates nothing, so the count is exact for every architecture.
    Remembered per config: the sidebar asks on every rerun, and building the modules is not free."""
    with torch.device("meta"):
        return GPT(cfg).num_params()


@dataclass(frozen=True)
class TraceCost:
    """Bytes of one traced forward of `tokens` positions (batch 1, float32), from the engine's own
    estimates (`tfm.trace`). The app's traces are lazy (`tfm.core.lazy`): a trace `held`s its stored
    part (embeddings, each block's input, the final norm, the last position's logits) plus the
    blocks read lately, at most max(the lazy budget, one block); `eager` is what a trace with every
    entry of every block read at once would hold (`lazy=False`)."""

    tokens: int
    per_block: int  # one block's entries once read, per-head results and normalised inputs included
    stored: int  # what the lazy forward keeps
    logits: int  # the full (T, V) logits, one more lazy group when read
    held: int  # the most a lazy trace holds however its entries are read
    eager: int


def trace_cost(cfg: ModelConfig, tokens: int | None = None) -> TraceCost:
    """The size of a trace of `tokens` positions (default: the full context)."""
    t, d = (cfg.context_length if tokens is None else tokens), cfg.d_model
    per_block = estimate_block_bytes(cfg, t, deferred=True)
    pos = {"learned": t * d, "sinusoidal": cfg.context_length * d}.get(cfg.pos_encoding, 0)  # a view of the whole table
    angles = t * (cfg.rotary_dim // 2) if cfg.pos_encoding == "rope" else 0
    final = t * (2 * d + (2 if cfg.norm == "layernorm" else 1)) if cfg.norm_placement == "pre" else t * d
    stored = FLOAT_BYTES * (t * d * (1 + cfg.n_layer) + pos + angles + final + cfg.vocab_size)
    logits = FLOAT_BYTES * t * cfg.vocab_size
    groups = cfg.n_layer * per_block + logits
    normalized = FLOAT_BYTES * t * d if cfg.norm_placement == "pre" else 0  # ln_final's, computed when read
    held = stored + normalized + min(groups, LazyTrace.max_lazy_bytes + max(per_block, logits))
    return TraceCost(t, per_block, stored, logits, held, estimate_trace_bytes(cfg, t))


def check_model(cfg: ModelConfig, limits: Limits, tokens: int | None = None) -> None:
    """Refuse (ValueError) a config whose weights or full-context trace exceed the limits."""
    n = count_params(cfg)
    weights = n * FLOAT_BYTES
    if weights > limits.max_model_bytes:
        raise ValueError(
            f"this model has {n:,} parameters ({fmt_bytes(weights)} in float32), over this server's limit of "
            f"{fmt_bytes(limits.max_model_bytes)} (~{limits.max_model_bytes // FLOAT_BYTES:,} parameters); "
            "make n_layer, d_model, d_ff or vocab_size smaller"
        )
    check_trace(cfg, limits, tokens)


def check_trace(cfg: ModelConfig, limits: Limits, tokens: int | None = None) -> None:
    """Refuse (ValueError) a traced forward of `tokens` positions (default: full context) whose
    lazy trace could hold more than the limit."""
    cost = trace_cost(cfg, tokens)
    if cost.held > limits.max_trace_bytes:
        raise ValueError(
            f"tracing {cost.tokens:,} tokens through this model can hold {fmt_bytes(cost.held)} "
            f"({fmt_bytes(cost.per_block)} per block read, mostly the {cfg.n_head} heads' {cost.tokens}×{cost.tokens} "
            f"attention scores and patterns), over this server's limit of {fmt_bytes(limits.max_trace_bytes)}; "
            "use a shorter context_length (or prompt), fewer heads or layers, or a smaller d_model"
        )


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


def check_folder(path: Path, limits: Limits) -> None:
    """Refuse (ValueError) a model folder (or checkpoint file) whose weight files, or whose config's
    shape, exceed the limits: checked from file sizes and config.json before any weight is read
    or allocated. (A nanoGPT ckpt.pt keeps its shape inside the pickle-free torch file: only its
    size is checked here.) A GGUF file (or folder / Ollama manifest naming one): `check_gguf`."""
    with reading(path.name or str(path), name_values=False):  # whatever a reader missed: one ValueError
        _check_files(path, limits)


def _check_files(path: Path, limits: Limits) -> None:
    gguf = gguf_in(path)
    if gguf is not None:
        check_gguf(gguf, limits)
        return
    files = [path] if path.is_file() else [p for p in path.glob("*") if p.suffix in WEIGHT_SUFFIXES and p.is_file()]
    size = sum(p.stat().st_size for p in files)
    if size > limits.max_model_bytes:
        raise ValueError(
            f"its weight files hold {fmt_bytes(size)}, over this server's limit of "
            f"{fmt_bytes(limits.max_model_bytes)}; use a smaller model, or raise the limit "
            "(README, 'Running for a class')"
        )
    cfg = _folder_config(path) if path.is_dir() else None
    if cfg is not None:
        check_model(cfg, limits)


@functools.lru_cache(maxsize=64)
def _gguf_header(path: str, size: int, mtime_ns: int) -> tuple[int, int, ModelConfig]:
    """(float32 bytes of the weights, bytes on disk, config) from a GGUF file's header, for the file
    as it is now (size and modification time in the key): the app checks its model on every page
    run, and parsing SmolLM2's header (49152 token strings and 48900 merges) each time was slow."""
    f, _, cfg = read_checked(path)
    return f.float_bytes(FLOAT_BYTES), f.size, cfg


def check_gguf(path: Path, limits: Limits) -> None:
    """Refuse (ValueError) a GGUF file whose weights, expanded to float32, exceed the model limit:
    computed from its header (a 4-bit file grows ~8x), before any tensor is read; also refuses
    an unsupported architecture or a config tfm cannot build."""
    st = Path(path).stat()
    size, on_disk, cfg = _gguf_header(str(path), st.st_size, st.st_mtime_ns)
    if size > limits.max_model_bytes:
        raise ValueError(
            f"its {count_params(cfg):,} parameters take {fmt_bytes(size)} once expanded to float32 "
            f"({fmt_bytes(on_disk)} on disk), over this server's limit of "
            f"{fmt_bytes(limits.max_model_bytes)}; use a smaller model, or raise the limit "
            "(README, 'Running for a class')"
        )


def _folder_config(folder: Path) -> ModelConfig | None:
    """The shape a tfm or Hugging Face GPT-2 folder's config.json declares, if it declares one."""
    if not (folder / "config.json").is_file():
        return None
    data = read_json(folder / "config.json")
    if isinstance(data, dict) and data.get("format") == "tfm" and isinstance(data.get("model"), dict):
        with reading("config.json"):
            return ModelConfig.from_dict(data["model"])
    if isinstance(data, dict) and data.get("model_type") == "gpt2":
        return hf_gpt2_config(data)
    return None


def generation_bytes(cfg: ModelConfig, prompt_tokens: int, new_tokens: int, samples: int = 1) -> int:
    """Upper bound of what a generation's timeline keeps per step and sample (in the session, for
    scrubbing back): the logits V, the last query's attention rows L*H*S, the residual streams
    (L+1)*D; S taken at its largest, the prompt plus every new token (capped by the context)."""
    s = min(cfg.context_length, prompt_tokens + new_tokens)
    per_step = cfg.vocab_size + cfg.n_layer * cfg.n_head * s + (cfg.n_layer + 1) * cfg.d_model
    return FLOAT_BYTES * samples * new_tokens * per_step


def check_generation(cfg: ModelConfig, limits: Limits, prompt_tokens: int, new_tokens: int, samples: int = 1) -> None:
    """Refuse (ValueError) a generation over the new-token limit or whose timeline would not fit."""
    check_count("new tokens", new_tokens, limits.max_new_tokens)
    size = generation_bytes(cfg, prompt_tokens, new_tokens, samples)
    if size > limits.max_generation_bytes:
        raise ValueError(
            f"keeping the timeline of {samples} × {new_tokens} new tokens takes up to {fmt_bytes(size)}, "
            f"over this server's limit of {fmt_bytes(limits.max_generation_bytes)} per generation; "
            "ask for fewer new tokens or samples"
        )


def check_count(what: str, value: int, high: int, low: int = 1) -> int:
    """A requested count (new tokens, training steps) within [low, high], or a ValueError saying so."""
    return check_int(what, value, low, high, hint=" on this server")
