"""Rotary position embeddings' frequencies, computed as Hugging Face computes them.

`inv_freq(cfg)` gives one inverse frequency per rotated dimension pair, (rotary_dim/2,):
theta_i = base^(-2i/rotary_dim), optionally rescaled ("linear", Llama 3.1's "llama3", or a
GGUF file's per-pair "factors").
The formula is written in the same float32 operations transformers uses, so angles (and
hence every query and key) match a Hugging Face model bit for bit where the math allows.
"""

from __future__ import annotations

import math

import torch

from .config import ModelConfig


def base_inv_freq(base: float, dim: int) -> torch.Tensor:
    """1 / base^(2i/dim) for i < dim/2, in float32. (dim/2,)"""
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim
    return 1.0 / (base**exponents)


def llama3_inv_freq(
    inv_freq: torch.Tensor, factor: float, low_freq_factor: float, high_freq_factor: float, original_context: int
) -> torch.Tensor:
    """Llama 3.1's rescaling: wavelengths shorter than original_context/high_freq_factor are
    kept, longer than original_context/low_freq_factor are stretched by `factor`, and the band
    between is interpolated smoothly."""
    low_freq_wavelen = original_context / low_freq_factor
    high_freq_wavelen = original_context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """The model's RoPE inverse frequencies, (rotary_dim/2,), float32."""
    freq = base_inv_freq(cfg.rope_base, cfg.rotary_dim)
    if cfg.rope_scaling == "linear":
        return freq / cfg.rope_factor
    if cfg.rope_scaling == "llama3":
        return llama3_inv_freq(
            freq, cfg.rope_factor, cfg.rope_low_freq_factor, cfg.rope_high_freq_factor, cfg.rope_original_context
        )
    if cfg.rope_scaling == "factors":  # llama.cpp's rope_freqs: theta_i / factor_i
        return freq / torch.tensor(cfg.rope_freq_factors, dtype=torch.float32)
    return freq


def rope_angles(inv_freq: torch.Tensor, start: int, length: int) -> torch.Tensor:
    """Rotation angle per position and dimension pair: pos * base^(-2i/rd). (T, rd/2), rd = rotary_dim"""
    pos = torch.arange(start, start + length, device=inv_freq.device, dtype=inv_freq.dtype)
    return torch.outer(pos, inv_freq)


def apply_rope(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (i, i + rd/2) of the first rd = 2 * angles.shape[-1] dims of each head's vector
    by their angle (Hugging Face's rotate_half layout); the other hd - rd dims pass through
    (partial rotary, GPT-NeoX)."""
    half = angles.shape[-1]
    x1, x2 = x[..., :half], x[..., half : 2 * half]  # (B, H, T, rd/2) each
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (T, rd/2)
    rotated = [x1 * cos - x2 * sin, x2 * cos + x1 * sin]
    return torch.cat(rotated + [x[..., 2 * half :]] if 2 * half < x.shape[-1] else rotated, dim=-1)
