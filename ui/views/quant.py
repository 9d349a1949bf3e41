"""The Quantization page's settings."""

from __future__ import annotations

from dataclasses import dataclass

from ui.views import PageView


@dataclass(frozen=True)
class QuantView(PageView):
    """The stored block opened (tensor, row, block; "" when no tensor is in a decoded type) and the
    type to re-quantize to (none in the link); the layer and head belong to the comparison shown."""

    tensor: str
    row: int
    block: int
    qtype: str
