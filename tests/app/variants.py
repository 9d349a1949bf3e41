"""Model variants for the pages' render sweeps (norms, positions, shapes): a 16-row pairwise design
over the position encoding, norm, its placement and the activation (4 x 2 x 2 x 4 settings, 64
combinations). Over the four encodings every value of each setting meets every value of each
other one (`tests/app/test_norms.py::test_the_variants_cover_every_pair`), so a clash of any two
settings renders in one of the 16."""

from __future__ import annotations

POSITIONS = ("learned", "sinusoidal", "rope", "none")
NORMS = ("layernorm", "rmsnorm")
PLACEMENTS = ("pre", "post")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "swiglu")


def variants(pos: str) -> list[tuple[str, str, str]]:
    """The (norm, placement, activation) rows of the design that go with position encoding `pos`."""
    i = POSITIONS.index(pos)
    return [(NORMS[(i + j) % 2], PLACEMENTS[(i + j // 2) % 2], ACTIVATIONS[j]) for j in range(len(ACTIVATIONS))]
