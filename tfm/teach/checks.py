"""Questions a class can answer, with answers computed from the running model.

Each `Check` is built from real numbers of one forward (an attention row, the next-token
logits, the weights' sizes); the right answer is the engine's own (the rank-0 token, not a
random draw) and `grade` compares a chosen option with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

N_OPTIONS = 4


@dataclass(frozen=True)
class Check:
    question: str
    options: tuple[str, ...]
    answer: int  # index into options
    explanation: str

    def __post_init__(self) -> None:
        if len(set(self.options)) != len(self.options) or len(self.options) < 2:
            raise ValueError(f"a check needs at least two distinct options, got {self.options}")
        if not 0 <= self.answer < len(self.options):
            raise ValueError(f"answer {self.answer} is not one of the {len(self.options)} options")


def grade(check: Check, choice: int | str) -> bool:
    """True when `choice` (an option's index or text) is the engine's answer."""
    if isinstance(choice, str):
        if choice not in check.options:
            raise ValueError(f"{choice!r} is not one of the options {check.options}")
        choice = check.options.index(choice)
    if not 0 <= choice < len(check.options):
        raise ValueError(f"choice {choice} is out of range: pick 0..{len(check.options) - 1}")
    return choice == check.answer


def _top_sorted(values: torch.Tensor) -> tuple[list[int], int]:
    """The N_OPTIONS largest entries' indices in index order (so the order gives nothing away),
    and the argmax (the lowest index on ties, as torch.argmax)."""
    best = int(values.argmax())
    top = torch.topk(values, min(N_OPTIONS, values.shape[0])).indices.tolist()
    if best not in top:  # a tie at the top: topk may pick another equal entry
        top[-1] = best
    return sorted(top), best


def attend_check(row: torch.Tensor, labels: list[str], pos: int, where: str) -> Check | None:
    """Which earlier token does this head attend to most from position `pos`? `row` is (pos+1,)."""
    if row.shape[0] < 2:
        return None
    keys, best = _top_sorted(row.float())
    return Check(
        f"Which token will {where} attend to most from {labels[pos]!r}?",
        tuple(labels[j] for j in keys),
        keys.index(best),
        f"{labels[best]!r} gets weight {float(row[best]):.3f}, the largest of the {row.shape[0]} keys "
        f"(the weights sum to 1).",
    )


def next_token_check(logits: torch.Tensor, tok, after: str) -> Check:
    """Which token is most likely next? `logits` is (V,) over real tokens."""
    ids, best = _top_sorted(logits)
    probs = logits.softmax(-1)
    return Check(
        f"Which token is the model's most likely next token after {after!r}?",
        tuple(repr(tok.display_piece(i)) for i in ids),
        ids.index(best),
        f"{tok.display_piece(best)!r} has the highest logit ({float(logits[best]):.3f}): probability "
        f"{float(probs[best]):.2%} at temperature 1.",
    )


def attention_params(model, layer: int) -> int:
    return sum(p.numel() for p in model.blocks[layer].attn.parameters())


def params_check(model, layer: int) -> Check:
    """How many parameters does one attention layer have? Distractors are common miscounts."""
    cfg = model.config
    d, kv = cfg.d_model, cfg.n_kv_head * cfg.d_head
    right = attention_params(model, layer)
    wrong = [3 * d * d, 4 * d * d, 4 * d * d + 4 * d, d * d, 12 * d * d, 3 * d * d + 3 * d]
    options = [right] + [w for i, w in enumerate(wrong) if w != right and w not in wrong[:i]][: N_OPTIONS - 1]
    options.sort()
    biases = right - 2 * d * d - 2 * d * kv  # qkv and output biases, where the model has them
    if kv == d:
        weights = f"W_Q, W_K, W_V and W_O are {d} × {d} each: 4 × {d}² = {4 * d * d:,}"
        heads = " The number of heads does not change it: the heads split d_model between them."
    else:  # grouped-query: k and v are n_kv_head · d_head wide
        weights = (
            f"W_Q and W_O are {d} × {d}, W_K and W_V only {d} × {kv} ({cfg.n_kv_head} key/value heads × "
            f"d_head {cfg.d_head}): 2 × {d}² + 2 × {d} × {kv} = {right - biases:,}"
        )
        heads = (
            f" The {cfg.n_head} query heads share {cfg.n_kv_head} key/value head{'s' if cfg.n_kv_head > 1 else ''}, "
            "so the key and value matrices are smaller than the query's."
        )
    return Check(
        f"How many parameters does one attention layer of this model have (d_model = {d})?",
        tuple(f"{n:,}" for n in options),
        options.index(right),
        weights + (f", plus {biases:,} biases = {right:,}." if biases else " (this model has no biases).") + heads,
    )
