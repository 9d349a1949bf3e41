"""tfm: a small, readable GPT you can look inside.

    import tfm
    lm = tfm.load("default")                     # or a tfm folder; a HF GPT-2, Llama, Qwen2, Mistral
                                                 # or GPT-NeoX folder; a nanoGPT ckpt.pt
    ids = lm.tokenizer.encode("The cat sat")
    out = lm.model(torch.tensor([ids]), trace=True)
    out.logits, out.trace["blocks.0.attn.pattern"]
"""
from .config import PRESETS, ModelConfig
from .generate import generate
from .loading import LM, available_devices, load, pick_device, random_model
from .model import GPT, ModelOutput
from .trace import Trace

__all__ = ["LM", "GPT", "ModelConfig", "ModelOutput", "PRESETS", "Trace", "available_devices", "generate",
           "load", "pick_device", "random_model"]
