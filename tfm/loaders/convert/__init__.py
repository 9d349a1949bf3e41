"""Hugging Face checkpoints of today's model families, converted into tfm's `GPT`.

One module per family maps that family's config.json and tensor names onto `ModelConfig`
and tfm's parameters (as TransformerLens does); `common` reads the safetensors files
(single or sharded), checks every key and shape, and copies the tensors in.
"""

from __future__ import annotations

from pathlib import Path

from ...core.model import GPT
from ...text.tokenizer import Tokenizer
from . import bert, gemma3, gpt_neox, llama, mistral, phi3, qwen2, qwen3
from .common import DTYPES, architecture_of

CONVERTERS = {
    "LlamaForCausalLM": llama.load,
    "MistralForCausalLM": mistral.load,
    "Qwen2ForCausalLM": qwen2.load,
    "GPTNeoXForCausalLM": gpt_neox.load,
    "Gemma3ForCausalLM": gemma3.load,
    "Qwen3ForCausalLM": qwen3.load,
    "Phi3ForCausalLM": phi3.load,
    "BertModel": bert.load_model,
    "BertForMaskedLM": bert.load_masked_lm,
}


def is_hf_family_folder(data: object) -> bool:
    """config.json of a Hugging Face model that is not GPT-2 (GPT-2 has its own loader)."""
    return isinstance(data, dict) and "architectures" in data and data.get("model_type") != "gpt2"


def load_hf_family_folder(folder: Path, dtype: str = "float32") -> tuple[GPT, Tokenizer, dict]:
    """Model, tokenizer and meta from a Hugging Face folder of a supported architecture."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; choose one of {', '.join(DTYPES)}")
    arch = architecture_of(folder)
    if arch not in CONVERTERS:
        raise ValueError(
            f"config.json: architecture {arch[:60]!r} is not supported; tfm loads "
            f"{', '.join(sorted(CONVERTERS))} (and GPT-2)"
        )
    return CONVERTERS[arch](folder, dtype)
