"""The computations behind the positional-encoding page (no Streamlit here): the model's own
position vectors or RoPE angles, their similarities and PCA, the sinusoidal table and its
dot-product identity, and the check that attention without positions ignores token order."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.model import GPT
from ..core.positions import sinusoidal_table
from .shapes import ids_tensor


# ---- permutation check -------------------------------------------------------------------


def block0_attention(model: GPT, h: torch.Tensor, angles: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """Block 0's attention sublayer (its own norm and `Attention`) on a (B, T, D) input.

    With `causal=False` there is no mask at all: the bare self-attention operation.
    """
    block = model.blocks[0]
    return block.attn(block.ln1(h) if block.pre else h, None, angles, causal=causal)  # (B, T, D)


def _shuffle(t: int, g: torch.Generator) -> torch.Tensor:
    """A random permutation of t positions that is not the identity (when t > 1)."""
    perm = torch.randperm(t, generator=g)
    if t > 1 and torch.equal(perm, torch.arange(t)):
        perm = perm.roll(1)
    return perm


@dataclass(frozen=True)
class PermutationCheck:
    """max |differences| of block 0's attention output when the prompt is shuffled (see
    `permutation_check`). The `*_with` values are None when the model has no positions."""

    pos_encoding: str
    perm: list[int]
    perm_prefix: list[int]
    full_without: float
    full_with: float | None
    causal_last_without: float
    causal_last_with: float | None
    scale: float  # max |attn(x)|, for comparison


@torch.no_grad()
def permutation_check(model: GPT, ids, seed: int = 0) -> PermutationCheck:
    """Does block 0's attention notice when the prompt's tokens are shuffled?

    Full (unmasked) attention: max |attn(shuffled x) - shuffle(attn(x))|, with and without the
    model's positional information (added vectors, or RoPE's rotation; positions stay at
    0..T-1 while the tokens move). Causal attention: the change of the *last* token's output
    when only the earlier tokens are shuffled.
    """

    ids_t = ids_tensor(ids, model.config, min_len=2).to(next(model.parameters()).device)
    t = ids_t.numel()
    g = torch.Generator().manual_seed(seed)
    perm, perm_prefix = _shuffle(t, g), torch.cat([_shuffle(t - 1, g), torch.tensor([t - 1])])
    x = model.tok_emb(ids_t[None])  # (1, T, D)
    pos, angles = model.positions(0, t)

    def run(tokens_x, with_pos: bool, causal: bool):
        h = tokens_x + pos if (with_pos and pos is not None) else tokens_x
        return block0_attention(model, h, angles if with_pos else None, causal)

    def measure(with_pos: bool) -> tuple[float, float]:
        full = (run(x[:, perm], with_pos, False) - run(x, with_pos, False)[:, perm]).abs().max()
        last = (run(x[:, perm_prefix], with_pos, True)[:, -1] - run(x, with_pos, True)[:, -1]).abs().max()
        return float(full), float(last)

    without = measure(False)
    with_pos = measure(True) if model.config.pos_encoding != "none" else (None, None)
    return PermutationCheck(
        model.config.pos_encoding,
        perm.tolist(),
        perm_prefix.tolist(),
        without[0],
        with_pos[0],
        without[1],
        with_pos[1],
        float(run(x, True, False).abs().max()),
    )


# ---- the model's positions -----------------------------------------------------------------


def position_vectors(model: GPT, length: int | None = None) -> torch.Tensor | None:
    """The model's own added positional vectors (first `length` positions), or None for
    RoPE / no positions. Learned: `pos_emb.weight`; sinusoidal: the `pos_table` buffer."""
    pos, _ = model.positions(0, model.config.context_length if length is None else length)
    return None if pos is None else pos.detach().float().cpu()


def rope_angle_table(model: GPT, length: int) -> torch.Tensor:
    """(length, d_head/2) rotation angles in radians, computed as the model does."""
    if model.config.pos_encoding != "rope":
        raise ValueError("the model does not use RoPE")
    return model.positions(0, length)[1].detach().float().cpu()


def local_rope_freq(model: GPT) -> torch.Tensor | None:
    """Local (sliding-window) layers' RoPE inverse frequencies when their base differs (Gemma 3:
    10,000 against the global layers' 1,000,000), (rotary_dim/2,); None when every layer shares one."""
    freq = getattr(model, "local_inv_freq", None)
    return None if freq is None else freq.detach().float().cpu()


def cosine_similarity_matrix(table: torch.Tensor) -> torch.Tensor:
    """(T, D) -> (T, T) cosine similarity between every pair of rows."""
    unit = table / table.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return unit @ unit.T


def pca_2d(table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Project rows on the top two principal components: ((T, 2) coords, (2,) variance share)."""
    centered = table.double() - table.double().mean(0)
    _, s, vh = torch.linalg.svd(centered, full_matrices=False)
    # SVD signs are arbitrary: make each component's largest loading positive, so it is stable.
    vh = vh * vh.gather(1, vh.abs().argmax(-1, keepdim=True)).sign()
    share = (s**2) / (s**2).sum().clamp_min(1e-300)
    coords = centered @ vh[:2].T
    return coords.float(), share[:2].float()


# ---- the sinusoidal formula -----------------------------------------------------------------


@dataclass(frozen=True)
class SinusoidalDots:
    k: torch.Tensor  # (K,) offsets 0..K-1
    dots: dict[int, torch.Tensor]  # start p -> (K,) PE(p) . PE(p + k)
    formula: torch.Tensor  # (K,) sum_i cos(k w_i), which predicts every p's curve
    periods: torch.Tensor  # (D/2,) 2π / w_i


def sinusoidal_dots(length: int, d_model: int, starts: list[int]) -> SinusoidalDots:
    """PE(p) . PE(p + k) for k = 0.. for each start p, and sum_i cos(k w_i)."""
    if d_model < 2 or d_model % 2 or length < 2:
        raise ValueError("need an even d_model >= 2 and a length >= 2")
    table = sinusoidal_table(length, d_model).double()  # (T, D)
    span = length - max(starts)
    if span < 1:
        raise ValueError(f"start positions {starts} must be below the length {length}")
    k = torch.arange(span)
    dots = {p: table[p + k] @ table[p] for p in starts}
    omega = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    formula = torch.cos(k[:, None].double() * omega).sum(-1)
    return SinusoidalDots(k, dots, formula, 2 * math.pi / omega)


def doubling_dims(d_model: int, n: int) -> tuple[list[int], list[float]]:
    """Sine dimensions (2i) whose periods 2π·10000^(2i/d) come closest to 2π·2^b, b = 0..n-1:
    a subset whose frequencies halve step by step, like the bits of a binary counter."""
    periods = 2 * math.pi * torch.pow(10000.0, torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pairs: list[int] = []
    for b in range(n):
        i = int((periods.log() - math.log(2 * math.pi * 2**b)).abs().argmin())
        if i not in pairs:
            pairs.append(i)
    return [2 * i for i in pairs], [float(periods[i]) for i in pairs]


def binary_bits(length: int, n_bits: int) -> torch.Tensor:
    """(length, n_bits): bit b of each position p, least significant first."""
    return (torch.arange(length)[:, None] >> torch.arange(n_bits)) & 1


@dataclass(frozen=True)
class PositionTable:
    """A model's added position vectors for positions 0..n-1 and what the page draws of them."""

    table: torch.Tensor  # (n, d_model)
    similarity: torch.Tensor  # (n, n) cosine similarity between positions
    pca: tuple[torch.Tensor, torch.Tensor] | None  # ((n, 2) coords, (2,) variance share); None under 3 positions


def position_table(model: GPT, n: int) -> PositionTable:
    """`position_vectors` of a learned or sinusoidal model with their similarity and 2-D projection."""
    table = position_vectors(model, n)
    return PositionTable(table, cosine_similarity_matrix(table), pca_2d(table) if n >= 3 else None)


@dataclass(frozen=True)
class RopeTable:
    """A RoPE model's rotation angles per position and pair, and each pair's speed."""

    angles: torch.Tensor  # (n, rotary_dim/2)
    inv_freq: torch.Tensor  # (rotary_dim/2,) CPU float32
    local_freq: torch.Tensor | None  # the local layers' own (`local_rope_freq`)


def rope_table(model: GPT, n: int) -> RopeTable:
    return RopeTable(rope_angle_table(model, n), model.inv_freq.float().cpu(), local_rope_freq(model))


@dataclass(frozen=True)
class SinusoidDemo:
    """The sinusoidal formula at a chosen size: its table, offset dot products from three starts,
    and the first (up to 64) positions as a binary clock beside the dims whose periods double."""

    table: torch.Tensor
    dots: SinusoidalDots
    clock_table: torch.Tensor
    clock_bits: torch.Tensor
    clock_dims: list[int]
    periods: list[float]


def sinusoid_demo(length: int, d_model: int) -> SinusoidDemo:
    clock_len = min(length, 64)
    n_bits = max(1, (clock_len - 1).bit_length())
    dims, periods = doubling_dims(d_model, n_bits)
    return SinusoidDemo(
        sinusoidal_table(length, d_model),
        sinusoidal_dots(length, d_model, [0, length // 4, length // 2]),
        sinusoidal_table(clock_len, d_model),
        binary_bits(clock_len, n_bits),
        dims,
        periods,
    )
