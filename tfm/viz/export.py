"""The numbers behind a figure, as a file a reader downloads (the Attention page's export)."""

from __future__ import annotations

import io
import json

import numpy as np


def export_npz(
    shown: np.ndarray,
    positions: np.ndarray,
    window_patterns: np.ndarray,
    window_positions: np.ndarray,
    ids,
    pieces: list[str],
    settings: dict,
) -> bytes:
    """The numbers behind the view: `shown` (the matrix on screen, NaN = masked) over absolute
    `positions`, every head's raw pattern (L, H, w, w) over `window_positions` (all heads at all
    positions would be 600 MB for GPT-2 at 1024 tokens), token ids, pieces and the settings."""
    buf = io.BytesIO()
    np.savez(
        buf,
        shown=shown,
        positions=positions,
        window_patterns=window_patterns.astype(np.float32),
        window_positions=window_positions,
        ids=np.asarray(ids, dtype=np.int64),
        pieces=np.asarray(pieces, dtype=str),
        settings_json=np.asarray(json.dumps(settings, ensure_ascii=False)),
    )
    return buf.getvalue()
