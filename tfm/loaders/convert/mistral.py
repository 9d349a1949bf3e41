"""Mistral: Llama's tensors and config plus a sliding attention window.

Within `sliding_window` positions the window never hides a key, so tfm caps the context at
the window instead of masking (the model card's meta says so): exact, and no silent change.
"""

from __future__ import annotations

from pathlib import Path

from ...core.validate import check_int
from . import llama
from .common import load_family


def cap_to_window(kwargs: dict, meta: dict, window: object, source: str) -> None:
    if window is None:
        return
    window = check_int(f"{source}: sliding_window", window, 1, hint=" (or null)")
    if window < kwargs["context_length"]:
        meta["context_note"] = (
            f"context capped at the sliding window ({window} of "
            f"{kwargs['context_length']} positions): tfm has no sliding-window mask"
        )
        kwargs["context_length"] = window


def fields(data: dict, source: str) -> tuple[dict, dict]:
    kwargs, meta = llama.fields(data, source, family="mistral")
    cap_to_window(kwargs, meta, data.get("sliding_window"), source)
    return kwargs, meta


def load(folder: Path, dtype: str):
    return load_family(folder, dtype, fields, llama.convert, llama.ignore)
