"""How a prompt was cut into the pieces the model reads: the Tokens page's numbers, and the one
way a chart labels a position with its token (`position_labels`, `token_labels`)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TokenView:
    """One row per token: its readable piece, id and byte length; and the text's characters per token
    (counting tokens cut off the front of a long prompt, `dropped`, so the rate is the tokenizer's)."""

    pieces: tuple[str, ...]
    ids: tuple[int, ...]
    n_bytes: tuple[int, ...]
    chars_per_token: float


def token_view(tokenizer, ids: Sequence[int], text: str, dropped: int = 0) -> TokenView:
    ids = tuple(int(t) for t in ids)
    return TokenView(pieces=tuple(tokenizer.display_piece(t) for t in ids), ids=ids,
                     n_bytes=tuple(len(tokenizer.piece_bytes(t)) for t in ids),
                     chars_per_token=len(text) / max(1, len(ids) + dropped))


def position_labels(pieces: Sequence[str]) -> list[str]:
    """Axis labels, one per position: each piece with its position (`piece ·i`), so labels stay
    distinct (plotly merges equal category names, and a prompt repeats tokens)."""
    return [f"{p} ·{i}" for i, p in enumerate(pieces)]


def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """`position_labels` of the tokens' readable pieces (`display_piece`)."""
    return position_labels(tokenizer.display_pieces(ids))
