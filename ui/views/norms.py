"""The norms page's settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ui.views import PageView


@dataclass(frozen=True)
class NormsView(PageView):
    """Part 1's norm, part 3's norm, layer and token, part 4's fresh models (none in the link)."""

    stat_norm: Literal["ln1", "ln2"]
    which: str  # a block's norm (ln1, ln2, ...) or ln_final
    layer: int
    token: int
    placement: Literal["both", "pre", "post"]
    norm_kind: Literal["layernorm", "rmsnorm"]
    n_layer: int
