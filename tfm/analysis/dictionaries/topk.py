"""The TopK dictionary an SAE (`sae.SAE`) and a transcoder (`transcoder.Transcoder`) both are.

    pre = x' W_enc + b_enc            x' = x - b_dec for an SAE (input and output one space), else x
    encode: keep the k largest entries of each row of pre, ReLU them, zero the rest   (..., F)
    decode: acts W_dec + b_dec                                                          (..., D)

W_enc (D, F), b_enc (F,), W_dec (F, D), b_dec (D,), float32 in memory; `cfg` has d_model,
n_features and k. The training loop (`tfm.train.topk`) reads `pre`, `W_dec`, `b_dec` and `cfg.k`.
"""

from __future__ import annotations

import torch

from ...core.validate import check_int


def check_fields(cfg, max_features: int, what: str) -> None:
    """The checks every TopK dictionary's config shares: d_model, n_features (1..max_features),
    k (1..n_features) and the informative model name."""
    check_int("d_model", cfg.d_model, 1)
    check_int("n_features", cfg.n_features, 1, max_features)
    check_int("k", cfg.k, 1, cfg.n_features, " (at most n_features)")
    if not isinstance(cfg.model, str) or len(cfg.model) > 200:
        raise ValueError(f"{what}'s model name must be a short string")


class TopKDictionary(torch.nn.Module):
    """A TopK dictionary (float32 parameters in memory); subclasses say whether encoding first
    subtracts b_dec (`centered`)."""

    centered = False

    def __init__(self, cfg) -> None:
        super().__init__()
        self.cfg = cfg
        d, f = cfg.d_model, cfg.n_features
        self.W_enc = torch.nn.Parameter(torch.zeros(d, f))
        self.b_enc = torch.nn.Parameter(torch.zeros(f))
        self.W_dec = torch.nn.Parameter(torch.zeros(f, d))
        self.b_dec = torch.nn.Parameter(torch.zeros(d))

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., F) pre-activations, before TopK."""
        x = x.float() - self.b_dec if self.centered else x.float()
        return x @ self.W_enc + self.b_enc

    def topk(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, indices), each (..., k): the kept activations (ReLU'd) and their features."""
        vals, idx = self.pre(x).topk(self.cfg.k, dim=-1)
        return vals.relu(), idx

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., F) sparse activations: at most k non-zero entries per row."""
        vals, idx = self.topk(x)
        return vals.new_zeros(*idx.shape[:-1], self.cfg.n_features).scatter_(-1, idx, vals)

    def decode(self, acts: torch.Tensor) -> torch.Tensor:
        """(..., F) -> (..., D)."""
        return acts @ self.W_dec + self.b_dec

    def decode_kept(self, vals: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """`topk`'s (values, indices) -> (..., D), reading only k rows of W_dec per row (the same
        sum as `decode(encode(x))` in another order, so equal up to rounding)."""
        return (vals[..., None] * self.W_dec[idx]).sum(-2) + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))
