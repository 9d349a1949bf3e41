"""What every family converter shares: config.json fields, RoPE settings in both config
layouts, safetensors reading (single file or shards), and checked copying into a `GPT`.

Never unpickles: only safetensors files are read. Every shape is checked against the config
with the key named; missing and unexpected keys are named too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

from ...core.config import ModelConfig
from ...core.files import read_json, reading
from ...text.hf_tokenizer import tokenizer_from_folder
from ...core.model import GPT
from ..weights import check_vocab, load_state_checked, read_safetensors

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
ROPE_TYPES = {"default": "none", "linear": "linear", "llama3": "llama3"}


def architecture_of(folder: Path) -> str:
    data = read_json(folder / "config.json")
    archs = data.get("architectures") if isinstance(data, dict) else None
    if not isinstance(archs, list) or len(archs) != 1 or not isinstance(archs[0], str):
        raise ValueError(f'config.json names no single architecture ("architectures": {str(archs)[:80]})')
    return archs[0]


def need(data: dict, keys: tuple[str, ...], source: str) -> None:
    missing = [k for k in keys if k not in data]
    if missing:
        raise ValueError(f"{source} lacks {missing}")


# config.json keys every Hugging Face family here names the same way -> ModelConfig fields
HF_SHAPE = {
    "vocab_size": "vocab_size",
    "max_position_embeddings": "context_length",
    "hidden_size": "d_model",
    "num_hidden_layers": "n_layer",
    "num_attention_heads": "n_head",
    "intermediate_size": "d_ff",
}


def hf_shape(data: dict, source: str) -> dict[str, Any]:
    """The model's sizes from a config.json (ValueError naming what it lacks)."""
    need(data, tuple(HF_SHAPE), source)
    return {field: data[key] for key, field in HF_SHAPE.items()}


def rope_fields(data: dict, source: str, default_theta: float, default_pct: float = 1.0) -> dict[str, Any]:
    """ModelConfig RoPE fields from either config layout: published checkpoints carry top-level
    rope_theta (GPT-NeoX: rotary_emb_base, rotary_pct) and rope_scaling; transformers 5 writes
    one rope_parameters dict."""
    old, new = data.get("rope_scaling") or {}, data.get("rope_parameters") or {}
    if not isinstance(old, dict) or not isinstance(new, dict):
        raise ValueError(f"{source}: rope_scaling and rope_parameters must be JSON objects or null")
    params = dict(old)
    if any(isinstance(v, dict) for v in new.values()):
        raise ValueError(f"{source}: per-layer rope_parameters are not supported (one RoPE for every layer)")
    params.update(new)
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(
            f"{source}: rope scaling type {kind!r} is not supported; tfm supports {', '.join(map(repr, ROPE_TYPES))}"
        )
    needs = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor")}.get(kind, ())
    missing = [k for k in needs if k not in params]
    if missing:
        raise ValueError(f"{source}: rope scaling {kind!r} needs {missing} in rope_scaling / rope_parameters")
    try:
        return _rope_numbers(data, params, kind, default_theta, default_pct)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{source}: a RoPE setting is not a number ({e})") from None


def _rope_numbers(data: dict, params: dict, kind: str, default_theta: float, default_pct: float) -> dict[str, Any]:
    out = dict(
        pos_encoding="rope",
        rope_scaling=ROPE_TYPES[kind],
        rope_base=float(params.get("rope_theta", data.get("rope_theta", data.get("rotary_emb_base", default_theta)))),
        rotary_pct=float(
            params.get("partial_rotary_factor", data.get("partial_rotary_factor", data.get("rotary_pct", default_pct)))
        ),
    )
    if kind in ("linear", "llama3"):
        out["rope_factor"] = float(params["factor"])
    if kind == "llama3":
        out.update(
            rope_low_freq_factor=float(params["low_freq_factor"]),
            rope_high_freq_factor=float(params["high_freq_factor"]),
            rope_original_context=int(params.get("original_max_position_embeddings", data["max_position_embeddings"])),
        )
    return out


def make_config(source: str, what: str = "config.json", **fields: Any) -> ModelConfig:
    """ModelConfig(**fields); `what` names where the fields came from in the refusal."""
    try:
        return ModelConfig(**fields)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{source}: {what} describes a model tfm cannot build: {e}") from None


def _shard_files(folder: Path) -> list[Path]:
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        bins = " (its pytorch_model.bin is a pickle, which tfm never loads)" if any(folder.glob("*.bin")) else ""
        raise FileNotFoundError(
            f"the folder has no model.safetensors or model.safetensors.index.json{bins}; "
            "download the safetensors weights"
        )
    data = read_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f'{index.name} has no "weight_map"; re-download the index file')
    names = list(weight_map.values())
    bad = [n for n in names if not isinstance(n, str) or Path(n).name != n or not n.endswith(".safetensors")]
    if bad:
        raise ValueError(f"{index.name} names shard files outside the folder or not safetensors: {str(bad[:3])[:200]}")
    return [folder / n for n in sorted(set(names))]


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's safetensors file(s), in float32 (exact for fp16 and bf16 files)."""
    state: dict[str, torch.Tensor] = {}
    for path in _shard_files(folder):
        if not path.is_file():
            raise FileNotFoundError(f"{path.name} is missing; the index lists it as a weights shard")
        state.update(read_safetensors(path, as_float=True))
    return state


class Weights:
    """Hands out tensors of a Hugging Face state dict by key, each checked against its expected
    shape; `finish` names any key never asked for."""

    def __init__(self, state: dict[str, torch.Tensor], source: str, ignore: Callable[[str], bool] = lambda k: False):
        self.state, self.source = {k: v for k, v in state.items() if not ignore(k)}, source
        self.used: set[str] = set()

    def has(self, key: str) -> bool:
        return key in self.state

    def take(self, key: str, *shape: int) -> torch.Tensor:
        if key not in self.state:
            raise ValueError(f"{self.source}: missing weight {key!r} (expected shape {shape})")
        t = self.state[key]
        if tuple(t.shape) != shape:
            raise ValueError(f"{self.source}: weight {key!r} has shape {tuple(t.shape)}, the config expects {shape}")
        self.used.add(key)
        return t

    def finish(self) -> None:
        extra = sorted(set(self.state) - self.used)
        if extra:
            raise ValueError(
                f"{self.source}: unexpected weights {extra[:5]}{' ...' if len(extra) > 5 else ''} for this config"
            )


def build(cfg: ModelConfig, state: dict[str, torch.Tensor], tokenizer, source: str, dtype: str) -> GPT:
    """A GPT with `state` (tfm names) copied into its parameters (keeping their memory layout)."""
    check_vocab(cfg, tokenizer, source)
    model = GPT(cfg)
    with torch.no_grad():
        load_state_checked(model, state, source)
    return model.to(DTYPES[dtype])


def tokenizer_for(folder: Path):
    return tokenizer_from_folder(folder)


def load_family(
    folder: Path,
    dtype: str,
    fields: Callable[[dict, str], tuple[dict, dict]],
    convert: Callable[["Weights", ModelConfig], dict[str, torch.Tensor]],
    ignore: Callable[[ModelConfig, str], bool],
):
    """config.json -> ModelConfig, safetensors -> checked tfm state, then the tokenizer; the
    weights are checked first so a broken folder says so before tokenizer trouble."""
    source = "config.json"
    data = read_json(folder / source)
    if not isinstance(data, dict):
        raise ValueError(f"{source} is not a JSON object")
    with reading(source):
        kwargs, meta = fields(data, source)
        cfg = make_config(source, **kwargs)
    weights = Weights(read_weights(folder), folder.name, lambda key: ignore(cfg, key))
    state = convert(weights, cfg)
    weights.finish()
    tokenizer = tokenizer_for(folder)
    model = build(cfg, state, tokenizer, folder.name, dtype)
    return model, tokenizer, {**meta, "dtype": dtype}
