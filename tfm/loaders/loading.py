"""`tfm.load(source)`: one entry point for every model tfm can run, and device choice."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.config import ModelConfig
from ..core.files import reading
from .convert import DTYPES, is_hf_family_folder, load_hf_family_folder
from ..core.model import GPT
from .gguf import load_gguf
from .ollama import gguf_in
from .packaged import require_gemma3, require_smollm2
from .packaged_minilm import require_minilm
from .spec import ModelSpec, format_spec, parse_spec
from ..text.tokenizer import Tokenizer
from .weights import load_hf_gpt2_folder, load_nanogpt, load_tfm_folder, read_json

ASSETS = Path(__file__).resolve().parents[2] / "assets"
REGISTRY = {"default": ASSETS / "models" / "default"}
DEVICES = ("auto", "cpu", "cuda", "mps")
_ASSET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def is_asset_name(spec) -> bool:
    """True for a spec text that may name a shipped asset under ASSETS (a plain name such as
    "smollm2"); a path, a random model's JSON or anything with a separator never does."""
    return isinstance(spec, str) and _ASSET_NAME.fullmatch(spec) is not None


@dataclass(frozen=True)
class LM:
    """A model with its tokenizer. `model` is in eval mode; treat it as read-only."""

    model: GPT
    tokenizer: Tokenizer
    config: ModelConfig
    device: torch.device
    source: str
    meta: dict = field(default_factory=dict)


def available_devices() -> list[str]:
    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return found


def pick_device(choice: str | None = "auto") -> torch.device:
    """ "auto" prefers CUDA, then MPS, then CPU; an explicit choice must be available."""
    choice = choice or "auto"
    if choice not in DEVICES:
        raise ValueError(f"device {choice!r} is not known; choose one of {', '.join(DEVICES)}")
    found = available_devices()
    if choice == "auto":
        return torch.device(found[1] if len(found) > 1 else "cpu")
    if choice not in found:
        raise ValueError(f"device {choice!r} is not available on this machine (available: {', '.join(found)})")
    return torch.device(choice)


def bundled_tokenizer() -> Tokenizer | None:
    """The project's own BPE vocabulary from assets/tokenizer, if it is there."""
    folder = ASSETS / "tokenizer"
    if not (folder / "tokenizer.tiktoken").is_file():
        return None
    specials = read_json(folder / "special_tokens.json")
    return Tokenizer.from_tiktoken_file(folder / "tokenizer.tiktoken", specials, name="tfm-bundled")


def bytes_tokenizer() -> Tokenizer:
    """256 single-byte tokens plus end-of-text: fits any model with vocab_size >= 257."""
    return Tokenizer({bytes([b]): b for b in range(256)}, {"<|endoftext|>": 256}, name="bytes")


def default_tokenizer_for(vocab_size: int) -> Tokenizer:
    """The bundled vocabulary if the model has room for it, else plain bytes."""
    tok = bundled_tokenizer()
    if tok is not None and tok.vocab_size <= vocab_size:
        return tok
    if vocab_size >= 257:
        return bytes_tokenizer()
    raise ValueError(
        f"vocab_size={vocab_size} is too small for any tokenizer here; use at least 257 (bytes + end-of-text)"
    )


def random_model(
    config: ModelConfig | str, tokenizer: Tokenizer | None = None, seed: int = 0, device: str | None = "cpu"
) -> LM:
    """A randomly initialised model of any config (or preset name), reproducible by `seed`."""
    cfg = ModelConfig.preset(config) if isinstance(config, str) else config
    tok = tokenizer or default_tokenizer_for(cfg.vocab_size)
    model = GPT(cfg, torch.Generator().manual_seed(seed))
    dev = pick_device(device)
    name = format_spec(ModelSpec("random", config=cfg, seed=seed, preset=config if isinstance(config, str) else None))
    return LM(model.to(dev).eval(), tok, cfg, dev, name, {"seed": seed, "random": True})


def detect_format(path: Path) -> str:
    """'tfm', 'hf-gpt2', 'hf-family' (Llama, Qwen2, Mistral, GPT-NeoX, BERT), 'gguf' (a .gguf file, a
    folder holding one, an Ollama manifest or models folder) or 'nanogpt', from what the path holds."""
    if path.exists() and gguf_in(path) is not None:
        return "gguf"
    if path.is_file():
        if path.suffix in (".pt", ".pth", ".ckpt"):
            return "nanogpt"
        raise ValueError(f"{path.name} is a file; give a model folder, a .gguf file, or a nanoGPT ckpt.pt")
    if not path.is_dir():
        raise FileNotFoundError(f"{path.name or path} does not exist")
    if (path / "config.json").is_file():
        data = read_json(path / "config.json")
        if isinstance(data, dict) and data.get("format") == "tfm":
            return "tfm"
        if isinstance(data, dict) and data.get("model_type") == "gpt2":
            return "hf-gpt2"
        if is_hf_family_folder(data):
            return "hf-family"
    if (path / "ckpt.pt").is_file():
        return "nanogpt"
    raise ValueError(
        f'{path.name or path} is not a model folder: expected a tfm folder (config.json with "format": "tfm" '
        "and model.safetensors), a Hugging Face folder (GPT-2, Llama, Qwen2, Mistral, GPT-NeoX, Gemma 3, Qwen3, "
        "Phi-3, BERT), "
        "a GGUF file or an Ollama models folder, or a nanoGPT ckpt.pt"
    )


def load(source: str | Path | ModelSpec = "default", device: str | None = "auto", dtype: str = "float32") -> LM:
    """Load a model by spec (`tfm.loaders.spec`: "default", "smollm2", "random:<preset>", "random:{json}",
    "path:<folder or .gguf>") or a path; `dtype` ("float32", "float16" or "bfloat16") is what its
    weights are held in, whatever the files hold."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; choose one of {', '.join(DTYPES)}")
    spec = source if isinstance(source, ModelSpec) else parse_spec(str(source), bare_path=True)
    if spec.kind == "random":
        lm = random_model(spec.config, seed=spec.seed, device=device)
        lm.model.to(DTYPES[dtype])  # freshly made, not shared yet
        return dataclasses.replace(lm, source=format_spec(spec))
    if spec.kind == "default":
        path, src = REGISTRY["default"], "default"
        if not path.is_dir():
            raise FileNotFoundError(
                f"the bundled model {src!r} is not at {path}; restore it from git, or train it "
                "with python -m tfm.train (README.md, 'The bundled model')"
            )
    elif spec.kind == "smollm2":
        path, src = require_smollm2(), "smollm2"
    elif spec.kind == "minilm":
        path, src = require_minilm(), "minilm"
    elif spec.kind == "gemma3":
        path, src = require_gemma3(), "gemma3"
    else:
        src = spec.path
        path = Path(src).expanduser()
    with reading(path.name or str(path), name_values=False):  # whatever a reader missed: one ValueError
        model, tok, meta = load_files(path, dtype)
    dev = pick_device(device)
    return LM(model.to(dev, DTYPES[dtype]).eval(), tok, model.config, dev, src, meta)


def load_files(path: Path, dtype: str = "float32") -> tuple[GPT, Tokenizer, dict]:
    """(model, tokenizer, meta) from a model folder or file of any format `detect_format` knows."""
    kind = detect_format(path)
    if kind == "gguf":
        return load_gguf(gguf_in(path), dtype)
    if kind == "tfm":
        return load_tfm_folder(path)
    if kind == "hf-gpt2":
        return load_hf_gpt2_folder(path)
    if kind == "hf-family":
        return load_hf_family_folder(path, dtype)
    return load_nanogpt(path if path.is_file() else path / "ckpt.pt")
