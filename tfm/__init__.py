"""tfm: a small, readable GPT you can look inside.

    import tfm
    lm = tfm.load("default")                     # or a tfm folder; a HF GPT-2, Llama, Qwen2, Mistral
                                                 # or GPT-NeoX folder; a nanoGPT ckpt.pt
    ids = lm.tokenizer.encode("The cat sat")
    out = lm.model(torch.tensor([ids]), trace=True)
    out.logits, out.trace["blocks.0.attn.pattern"]

Packages, lowest first; a package imports only from those before it (tests/test_layers.py):
core, text, loaders, generation, analysis, teach, train, viz. This file and cli.py sit on top.
"""

import sys

from .core import model as _model
from .core import trace as _trace
from .core.config import PRESETS, ModelConfig
from .core.model import GPT, ModelOutput
from .core.trace import Trace
from .generation import sampling as _sampling
from .generation.generate import generate
from .loaders.loading import LM, available_devices, load, pick_device, random_model

# Module paths from before the packages (tfm.model, tfm.trace, tfm.sampling) name the same modules.
for _old, _mod in (("model", _model), ("trace", _trace), ("sampling", _sampling)):
    sys.modules[f"{__name__}.{_old}"] = _mod
    globals()[_old] = _mod

__all__ = [
    "LM",
    "GPT",
    "ModelConfig",
    "ModelOutput",
    "PRESETS",
    "Trace",
    "available_devices",
    "generate",
    "load",
    "pick_device",
    "random_model",
]
