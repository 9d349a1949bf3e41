"""The Shapes page's settings."""

from __future__ import annotations

from dataclasses import dataclass

from ui.views import PageView


@dataclass(frozen=True)
class ShapesView(PageView):
    """Part 1's batch and length, part 3's KV cache (context, layers, KV heads, batch, precision): none in the link."""

    batch: int
    length: int
    kv_ctx: int
    kv_layers: int
    kv_heads: int
    kv_batch: int
    kv_dtype: str
