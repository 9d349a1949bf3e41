"""What a page needs of a model, by capability (never by name): a next-token head, a masked-LM
head, bidirectional attention. Each answer is one line a page shows instead of its content."""

from __future__ import annotations

from ..core.config import ModelConfig

WHAT = {
    "next": "a language-model head that predicts the next token",
    "masked": "a masked-language-model head that fills [MASK]",
    "none": "no language-model head (an encoder that makes sentence embeddings)",
}


def has_next_token_head(cfg: ModelConfig) -> bool:
    return cfg.lm_head == "next"


def has_token_head(cfg: ModelConfig) -> bool:
    """Whether the logits mean something: next-token or fill-mask predictions."""
    return cfg.lm_head in ("next", "masked")


def missing_next_token_head(cfg: ModelConfig, page: str) -> str | None:
    """None when `page` (its name in words) can run on this model; else the one line why not."""
    if has_next_token_head(cfg):
        return None
    return (
        f"{page} needs {WHAT['next']}; this model has {WHAT[cfg.lm_head]}. "
        "Pick a language model (SmolLM2 or the bundled one) in the sidebar."
    )


def missing_encoder(cfg: ModelConfig, page: str) -> str | None:
    """None for an encoder (every token sees every token); else the one line why `page` needs one."""
    if not cfg.causal:
        return None
    return f"{page} needs an encoder (bidirectional attention, such as MiniLM); this model is a causal decoder."


def missing_token_head(cfg: ModelConfig, page: str) -> str | None:
    """None when the model predicts tokens (next-token or fill-mask); else the one line why not."""
    if has_token_head(cfg):
        return None
    return (
        f"{page} needs {WHAT['next']} (or one that fills [MASK]); this model has {WHAT[cfg.lm_head]}. "
        "Pick a language model (SmolLM2 or the bundled one) in the sidebar."
    )


def predicted_position(cfg: ModelConfig, ids, mask_id: int | None) -> int:
    """Where the model's prediction is read: the last position for a next-token head (what comes
    after the prompt), the first [MASK] for a masked-LM head (ValueError saying to type one)."""
    if cfg.lm_head == "next":
        return len(ids) - 1
    if cfg.lm_head != "masked":
        raise ValueError(f"this model has {WHAT[cfg.lm_head]}: it predicts no token")
    found = [i for i, t in enumerate(ids) if mask_id is not None and int(t) == mask_id]
    if not found:
        raise ValueError(
            "type [MASK] in the prompt where a word should be filled in, e.g. 'The capital of France is [MASK].'"
        )
    return found[0]


def pair_ranges(cfg: ModelConfig, ids) -> tuple[range, range] | None:
    """An encoder's sentence pair in `ids` ([CLS] A [SEP] B [SEP]): the positions of segment A
    (with [CLS] and its [SEP]) and of segment B (with the last [SEP]); None for one sentence."""
    if not cfg.segments:
        return None
    ids = [int(i) for i in ids]
    seps = [i for i, t in enumerate(ids) if t == cfg.sep_token_id]
    if not seps or seps[0] >= len(ids) - 1:
        return None
    return range(0, seps[0] + 1), range(seps[0] + 1, len(ids))
