"""Reading and writing weights: tfm's own folders, Hugging Face GPT-2 folders, nanoGPT ckpt.pt.

Nothing here unpickles untrusted data: tensors come from safetensors files or from
`torch.load(..., weights_only=True)`. Every mismatch names the key and both shapes; every
missing or corrupt file names the file and says what to do.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from ..core.config import ModelConfig
from ..core.files import read_json, reading, why
from ..core.model import GPT
from ..text.hf_tokenizer import tokenizer_from_spec
from ..text.tokenizer import Tokenizer

FORMAT, VERSION = "tfm", 1


def read_safetensors(path: Path, as_float: bool = False) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file (each made float32 as it is read, with `as_float`);
    a corrupt file is one ValueError naming it."""
    if not path.is_file():
        raise FileNotFoundError(f"{path.name} is missing; the folder needs its weights file")
    with reading(path.name):
        try:
            with safe_open(str(path), framework="pt") as f:
                return {k: f.get_tensor(k).float() if as_float else f.get_tensor(k) for k in f.keys()}
        except SafetensorError as e:
            raise ValueError(f"{path.name} is corrupt or truncated ({why(e)}); re-export or re-copy it") from None


def read_torch_file(path: Path) -> Any:
    """torch.load restricted to tensors and plain containers: never runs pickled code."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path.name} is missing") from None
    except pickle.UnpicklingError as e:
        # torch's own message is long, has terminal colour codes and suggests weights_only=False:
        # keep only what the file referenced.
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
        if found:
            raise ValueError(
                f"{path.name} holds pickled objects, not only tensors (it references {found.group(1)}); "
                "tfm refuses to execute pickled code: re-save the weights as safetensors or as a "
                "plain state dict"
            ) from None
        detail = re.search(r"WeightsUnpickler error:\s*(.+)", str(e))
        raise ValueError(
            f"{path.name} could not be read as plain tensors "
            f"({detail.group(1).strip()[:200] if detail else 'not a PyTorch weights file'}); "
            "it is corrupt or truncated: re-export or re-copy it"
        ) from None
    except Exception as e:  # RuntimeError / OSError from a truncated zip, EOFError, ...
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise ValueError(
            f"{path.name} could not be read as plain tensors ({type(e).__name__}: {first}); "
            "it is corrupt or truncated: re-export or re-copy it"
        ) from None


def check_state(expected: dict[str, torch.Tensor], state: dict[str, torch.Tensor], source: str) -> None:
    """Refuse (ValueError) a state dict with a missing, unexpected or mis-shaped key, naming it."""
    missing = [k for k in expected if k not in state]
    if missing:
        raise ValueError(f"{source}: missing weights {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    unexpected = [k for k in state if k not in expected]
    if unexpected:
        raise ValueError(f"{source}: unexpected weights {unexpected[:5]} for this config")
    for key, want in expected.items():
        got = state[key]
        if tuple(got.shape) != tuple(want.shape):
            raise ValueError(
                f"{source}: weight {key!r} has shape {tuple(got.shape)}, the config expects {tuple(want.shape)}"
            )


def load_state_checked(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Copy `state` into `model`, failing on any missing, unexpected or mis-shaped key."""
    expected = model.state_dict()
    if getattr(model.config, "tied_embeddings", False):
        expected.pop("unembed.weight", None)
        state = {k: v for k, v in state.items() if k != "unembed.weight"}
    check_state(expected, state, source)
    model.load_state_dict(state, strict=False)  # keys were checked above; a tied weight is shared


MAX_CONFIG_BYTES = 1_000_000  # a model's config.json is a few KB: a bigger one is refused unread


@dataclass(frozen=True)
class FolderFormat:
    """One kind of tfm model folder: config.json's "format" and "version", how its "model" section
    is parsed, and a name for messages ("a tfm", "an encoder-decoder")."""

    name: str
    version: int
    what: str
    parse: Callable[[Any], Any]  # e.g. ModelConfig.from_dict: data -> validated config, or ValueError


def checked_config(data: Any, fmt: FolderFormat, source: str) -> Any:
    """The parsed "model" section of config.json data of format `fmt`; ValueError naming `source`
    (where the data came from: the config.json file)."""
    if not isinstance(data, dict) or data.get("format") != fmt.name:
        raise ValueError(f'{source} is not {fmt.what} config (no "format": "{fmt.name}")')
    if data.get("version") != fmt.version:
        raise ValueError(
            f"{source}: {fmt.name} format version {data.get('version')!r}; this tfm reads version {fmt.version}"
        )
    try:
        return fmt.parse(data.get("model"))
    except ValueError as e:
        raise ValueError(f'{source}: bad "model" section: {e}') from None


def read_folder(
    folder: str | Path, fmt: FolderFormat, max_weight_bytes: int | None = None
) -> tuple[dict, Any, dict[str, torch.Tensor]]:
    """The one checked reader of tfm's model folders, GPT ("tfm") and encoder-decoder
    ("tfm-encdec"): (config.json data, its parsed "model" section, model.safetensors tensors).
    Only JSON and safetensors are read (nothing unpickled); config.json over MAX_CONFIG_BYTES
    and weights over `max_weight_bytes` (when given) are refused before they are read."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder; give the folder holding config.json and model.safetensors")
    config, weights = folder / "config.json", folder / "model.safetensors"
    data = read_json(config, MAX_CONFIG_BYTES)
    with reading(config.name):
        cfg = checked_config(data, fmt, config.name)
    if max_weight_bytes is not None and weights.is_file() and weights.stat().st_size > max_weight_bytes:
        raise ValueError(
            f"{weights} holds {weights.stat().st_size:,} bytes, over the limit of "
            f"{max_weight_bytes:,}; use a smaller model"
        )
    return data, cfg, read_safetensors(weights)


def save_model(folder: str | Path, model: GPT, tokenizer: Tokenizer, meta: dict | None = None) -> Path:
    """Write a tfm model folder: config.json, model.safetensors and the tokenizer file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    spec = tokenizer.save(folder)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if model.config.tied_embeddings:
        state.pop("unembed.weight")  # safetensors stores no shared tensors; it is tok_emb.weight
    save_file(state, str(folder / "model.safetensors"), metadata={"format": FORMAT})
    config = {
        "format": FORMAT,
        "version": VERSION,
        "model": model.config.to_dict(),
        "tokenizer": spec,
        "meta": meta or {},
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return folder


def check_vocab(cfg: ModelConfig, tokenizer: Tokenizer, source: str) -> None:
    if tokenizer.vocab_size > cfg.vocab_size:
        raise ValueError(
            f"{source}: the tokenizer has {tokenizer.vocab_size} ids but the model only "
            f"{cfg.vocab_size} embeddings; they do not belong together"
        )


TFM_FOLDER = FolderFormat(FORMAT, VERSION, "a tfm", ModelConfig.from_dict)


def load_tfm_folder(folder: Path, max_weight_bytes: int | None = None) -> tuple[GPT, Tokenizer, dict]:
    data, cfg, state = read_folder(folder, TFM_FOLDER, max_weight_bytes)
    spec = data.get("tokenizer")
    if not isinstance(spec, dict) or "file" not in spec:
        raise ValueError('config.json has no "tokenizer" section naming the tokenizer file')
    tokenizer = tokenizer_from_spec(folder, spec)
    check_vocab(cfg, tokenizer, folder.name)
    model = GPT(cfg)
    load_state_checked(model, state, "model.safetensors")
    return model, tokenizer, data.get("meta") or {}


HF_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def hf_gpt2_config(data: dict, source: str = "config.json") -> ModelConfig:
    """A Hugging Face GPT-2 config.json's data as a ModelConfig; ValueError naming `source`."""
    with reading(source):
        return _gpt2_fields(data, source)


def _gpt2_fields(data: dict, source: str) -> ModelConfig:
    if not isinstance(data, dict) or data.get("model_type") != "gpt2":
        kind = data.get("model_type") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{source}: model_type {kind!r} is not supported; tfm loads GPT-2 family folders")
    missing = [k for k in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head") if k not in data]
    if missing:
        raise ValueError(f"{source} lacks the GPT-2 keys {missing}")
    # Variants that change the attention computation: tfm would silently compute something else.
    if not data.get("scale_attn_weights", True) or data.get("scale_attn_by_inverse_layer_idx", False):
        raise ValueError(
            f"{source}: scale_attn_weights=false or scale_attn_by_inverse_layer_idx=true is not "
            "supported; tfm scales attention scores by 1/sqrt(d_head) only"
        )
    if data.get("add_cross_attention", False):
        raise ValueError(f"{source}: add_cross_attention=true is not supported (decoder-only models only)")
    act = data.get("activation_function", "gelu_new")
    if not isinstance(act, str) or act not in HF_ACTIVATIONS:
        raise ValueError(
            f"{source}: activation_function {act!r} is not supported; expected one of {sorted(HF_ACTIVATIONS)}"
        )
    d = data["n_embd"]
    return ModelConfig(
        vocab_size=data["vocab_size"],
        context_length=data["n_positions"],
        d_model=d,
        n_layer=data["n_layer"],
        n_head=data["n_head"],
        d_ff=data.get("n_inner") or 4 * d,
        activation=HF_ACTIVATIONS[act],
        norm_eps=data.get("layer_norm_epsilon", 1e-5),
        tied_embeddings=data.get("tie_word_embeddings", True),
    )


# GPT-2 / nanoGPT parameter names -> tfm names, and whether HF's Conv1D stores them transposed.
GPT2_NAMES = [
    ("ln_1.", "ln1.", False),
    ("ln_2.", "ln2.", False),
    ("attn.c_attn.weight", "attn.qkv.weight", True),
    ("attn.c_attn.bias", "attn.qkv.bias", False),
    ("attn.c_proj.weight", "attn.proj.weight", True),
    ("attn.c_proj.bias", "attn.proj.bias", False),
    ("mlp.c_fc.weight", "mlp.fc.weight", True),
    ("mlp.c_fc.bias", "mlp.fc.bias", False),
    ("mlp.c_proj.weight", "mlp.proj.weight", True),
    ("mlp.c_proj.bias", "mlp.proj.bias", False),
]


def rename_gpt2_key(key: str, conv1d: bool) -> tuple[str | None, bool]:
    """Map one GPT-2-style key to tfm's; None for buffers that carry no weights."""
    key = key.removeprefix("_orig_mod.").removeprefix("transformer.")
    top = {"wte.weight": "tok_emb.weight", "wpe.weight": "pos_emb.weight", "lm_head.weight": "unembed.weight"}
    if key in top:
        return top[key], False
    if key.startswith("ln_f."):
        return "ln_final." + key[len("ln_f.") :], False
    if key.startswith("h.") and key.endswith((".attn.bias", ".attn.masked_bias")):
        return None, False  # old causal-mask buffers
    if key.startswith("h."):
        _, layer, rest = key.split(".", 2)
        for old, new, transposed in GPT2_NAMES:
            if rest.startswith(old):
                return f"blocks.{layer}.{new}{rest[len(old) :]}", transposed and conv1d
    return key, False  # unknown: reported by load_state_checked


def convert_gpt2_state(state: dict[str, torch.Tensor], conv1d: bool) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        new, transpose = rename_gpt2_key(key, conv1d)
        if new is not None:
            out[new] = value.t().contiguous() if transpose else value
    return out


def load_hf_gpt2_folder(folder: Path) -> tuple[GPT, Tokenizer, dict]:
    cfg = hf_gpt2_config(read_json(folder / "config.json"))
    if (folder / "model.safetensors").is_file():
        path, state = folder / "model.safetensors", read_safetensors(folder / "model.safetensors")
    elif (folder / "pytorch_model.bin").is_file():
        path, state = folder / "pytorch_model.bin", read_torch_file(folder / "pytorch_model.bin")
    else:
        raise FileNotFoundError(
            f"{folder.name} has no model.safetensors or pytorch_model.bin; copy the weights file in"
        )
    tokenizer = Tokenizer.from_hf_gpt2_folder(folder)
    check_vocab(cfg, tokenizer, folder.name)
    model = GPT(cfg)
    load_state_checked(model, convert_gpt2_state(state, conv1d=True), path.name)
    return model, tokenizer, {"source_format": "huggingface-gpt2"}


def nanogpt_tokenizer(folder: Path) -> Tokenizer:
    if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        return Tokenizer.from_hf_gpt2_folder(folder)
    if (folder / "config.json").is_file():
        spec = read_json(folder / "config.json").get("tokenizer")
        if spec:
            return tokenizer_from_spec(folder, spec)
    hint = " (its meta.pkl is a pickle, which tfm never loads)" if (folder / "meta.pkl").exists() else ""
    raise FileNotFoundError(
        f"{folder.name}: a nanoGPT checkpoint carries no tokenizer{hint}; put GPT-2's "
        "vocab.json and merges.txt beside ckpt.pt"
    )


def load_nanogpt(path: Path) -> tuple[GPT, Tokenizer, dict]:
    ckpt = read_torch_file(path)
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        raise ValueError(f"{path.name} is not a nanoGPT checkpoint (expected keys 'model' and 'model_args')")
    a = ckpt["model_args"]
    missing = [k for k in ("vocab_size", "block_size", "n_embd", "n_layer", "n_head") if k not in a]
    if missing:
        raise ValueError(f"{path.name}: model_args lacks {missing}")
    cfg = ModelConfig(
        vocab_size=a["vocab_size"],
        context_length=a["block_size"],
        d_model=a["n_embd"],
        n_layer=a["n_layer"],
        n_head=a["n_head"],
        d_ff=4 * a["n_embd"],
        bias=bool(a.get("bias", True)),
        activation="gelu",
        tied_embeddings=True,
    )
    tokenizer = nanogpt_tokenizer(path.parent)
    check_vocab(cfg, tokenizer, path.name)
    model = GPT(cfg)
    load_state_checked(model, convert_gpt2_state(ckpt["model"], conv1d=False), path.name)
    return model, tokenizer, {"source_format": "nanogpt", "iter_num": ckpt.get("iter_num")}
