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
    segments: tuple[int, ...] = ()  # a pair's segment of each token (WordPiece / BERT), else empty
    note: str = ""  # how to read the pieces, where the tokenizer has a convention

    @property
    def is_pair(self) -> bool:
        return any(self.segments)


def token_view(tokenizer, ids: Sequence[int], text: str, dropped: int = 0) -> TokenView:
    ids = tuple(int(t) for t in ids)
    segments = tuple(tokenizer.segments(ids)) if hasattr(tokenizer, "segments") else ()
    pieces = tuple(tokenizer.display_piece(t) for t in ids)
    note = ""
    if segments:  # WordPiece (tfm.text.wordpiece)
        note = (
            "WordPiece: a piece starting with ## continues the word before it (un ##bel ##ie ##va ##bly); [CLS] "
            "starts the text, [SEP] ends each sentence"
            + (
                "; segment 1 is the pair's second sentence"
                if any(segments)
                else "; type [SEP] between two sentences for a pair"
            )
            + "."
        )
    return TokenView(
        pieces=pieces,
        ids=ids,
        n_bytes=tuple(len(tokenizer.piece_bytes(t)) for t in ids),
        chars_per_token=len(text) / max(1, len(ids) + dropped),
        segments=segments,
        note=note,
    )


def position_labels(pieces: Sequence[str]) -> list[str]:
    """Axis labels, one per position: each piece with its position (`piece ·i`), so labels stay
    distinct (plotly merges equal category names, and a prompt repeats tokens)."""
    return [f"{p} ·{i}" for i, p in enumerate(pieces)]


def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """`position_labels` of the tokens' readable pieces (`display_piece`)."""
    return position_labels(tokenizer.display_pieces(ids))
