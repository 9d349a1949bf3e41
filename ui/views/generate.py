"""The generation page's settings."""

from __future__ import annotations

from dataclasses import dataclass

from ui.views import PageView


@dataclass(frozen=True)
class GenerateView(PageView):
    """How many tokens, how they are sampled, how many samples side by side, with or without the KV
    cache (none in the link: the prompt and seed are the sidebar's)."""

    max_new: int
    temperature: float
    top_k: int
    top_p: float
    n_samples: int
    use_cache: bool
