"""What an encoder's heads look at (Clark, Khandelwal, Levy & Manning 2019, "What Does BERT Look
At?"): per layer and head, the average attention to [CLS], to [SEP], to punctuation, to the token
itself and to the previous and next token, over a set of texts the model was not tuned on.

An attention score here is a share of each query's attention: for a class of keys (say [SEP]),
the pattern's mass on those keys, averaged over every query of every text, then over texts
weighted by their queries (Clark et al.'s Figure 2 averages the same way, over 1000 Wikipedia
segments of at most 128 tokens). Previous / next: the mass on key i-1 / i+1 (queries that have one).
"""

from __future__ import annotations

import string
import unicodedata
from dataclasses import dataclass

import torch

from ...core import cancel
from ...core.validate import check_int

KINDS = ("cls", "sep", "punctuation", "self", "previous", "next")
HELP = {
    "cls": "Share of each token's attention on [CLS] (the first token).",
    "sep": "Share on the [SEP] tokens (Clark et al.: many middle-layer BERT heads park attention there).",
    "punctuation": "Share on punctuation tokens ('.' and ',' above all).",
    "self": "Share on the token itself.",
    "previous": "Share on the token right before.",
    "next": "Share on the token right after (an encoder sees it; a causal decoder never does).",
}
PUNCTUATION = set(string.punctuation)
# The page's text set (written for tfm; the report's figures use held-out corpus text, bench/bench_bert_heads.py).
SAMPLE_TEXTS = (
    "The old lighthouse keeper climbed the stairs, lit the lamp, and watched the ships pass in the night.",
    "When the train was late again, she called her manager, apologised, and took a taxi to the office.",
    "Rain fell all afternoon; the children stayed inside, built a fort of cushions, and read comics.",
    "A committee will review the proposal next week. [SEP] Its members have not yet seen the budget.",
    "He planted tomatoes, beans and squash, but the rabbits ate most of the lettuce.",
    "The museum's new exhibit, which opened on Friday, shows maps drawn by sailors in the 1600s.",
    "Can you pass the salt? [SEP] Of course, here it is.",
    "After the concert, the violinist thanked the audience, bowed twice, and left the stage quietly.",
    "Water boils at a lower temperature on a mountain, because the air pressure there is lower.",
    "The detective looked at the muddy boots, then at the window, and smiled.",
    "My brother, who lives in Lisbon, is learning to surf. [SEP] He says the waves are cold in winter.",
    "Bees visit thousands of flowers a day, carrying pollen from one plant to the next.",
    "The recipe asks for two eggs, a cup of flour, and a pinch of salt.",
    "Nobody expected the small team to win the final, yet they scored twice in the last ten minutes.",
    "The library closes at six. [SEP] Books can be returned through the slot by the door.",
    "Autumn leaves drifted across the road as the bus, nearly empty, turned toward the hills.",
)


def is_punctuation(piece: str) -> bool:
    """A piece made only of punctuation characters (ASCII or Unicode category P*)."""
    text = piece.removeprefix("##").strip()
    return bool(text) and all(c in PUNCTUATION or unicodedata.category(c).startswith("P") for c in text)


def key_classes(tokenizer, ids: list[int]) -> dict[str, torch.Tensor]:
    """(T,) bool masks of the keys in each class: cls (the first position, [CLS] in BERT), sep, punctuation."""
    t = len(ids)
    sep = getattr(tokenizer, "sep_id", None)
    specials = set(tokenizer.special_tokens.values())
    cls = torch.zeros(t, dtype=torch.bool)
    cls[0] = True
    return {
        "cls": cls,
        "sep": torch.tensor([sep is not None and i == sep for i in ids], dtype=torch.bool),
        "punctuation": torch.tensor(
            [i not in specials and is_punctuation(tokenizer.display_piece(i)) for i in ids], dtype=torch.bool
        ),
    }


def pattern_scores(pattern: torch.Tensor, classes: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One layer's (H, T, T) pattern -> per head (H,) sums over queries of each kind of attention
    (divide by `query_counts` for the mean)."""
    p = pattern.double()
    out = {name: p[..., mask].sum((-1, -2)) for name, mask in classes.items()}  # (H,)
    out["self"] = p.diagonal(dim1=-2, dim2=-1).sum(-1)
    out["previous"] = p.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1)
    out["next"] = p.diagonal(offset=1, dim1=-2, dim2=-1).sum(-1)
    return out


def query_counts(t: int) -> dict[str, int]:
    return {"cls": t, "sep": t, "punctuation": t, "self": t, "previous": t - 1, "next": t - 1}


@dataclass(frozen=True)
class LookAt:
    """`scores[kind]` (L, H) average shares (KINDS); `n_texts` and `n_tokens` measured over."""

    scores: dict[str, torch.Tensor]
    n_texts: int
    n_tokens: int

    def standouts(self, kind: str, n: int = 5) -> list[tuple[int, int, float]]:
        """The n heads with the highest `kind` score: (layer, head, score), highest first."""
        s = self.scores[kind]
        top = torch.argsort(s.flatten(), descending=True)[: check_int("n", n, 1, s.numel())]
        return [(int(i) // s.shape[1], int(i) % s.shape[1], float(s.flatten()[i])) for i in top]


def look_at(
    model, tokenizer, texts: list[str], max_tokens: int = 128, progress=None, should_stop: cancel.ShouldStop = None
) -> LookAt:
    """Average attention per layer and head over `texts` (each cut to `max_tokens` pieces), one
    text's trace at a time (at most the model's context); `progress(done, total)` after each text."""
    cfg = model.config
    max_tokens = min(check_int("max_tokens", max_tokens, 3), cfg.context_length)
    sums = {k: torch.zeros(cfg.n_layer, cfg.n_head, dtype=torch.float64) for k in KINDS}
    counts = dict.fromkeys(KINDS, 0)
    n_tokens, used, dev = 0, 0, model.tok_emb.weight.device
    for done, text in enumerate(texts, 1):
        cancel.check(should_stop, "the analysis")
        ids = tokenizer.prompt_ids(text)
        ids = ids if len(ids) <= max_tokens else ids[: max_tokens - 1] + ids[-1:]
        if len(ids) >= 3:
            _add_text(model, tokenizer, ids, dev, sums, counts)
            n_tokens, used = n_tokens + len(ids), used + 1
        if progress is not None:
            progress(done, len(texts))
    if not used:
        raise ValueError("no text had 3 or more tokens to measure")
    return LookAt({k: (sums[k] / counts[k]).float() for k in KINDS}, used, n_tokens)


def _add_text(model, tokenizer, ids, dev, sums, counts) -> None:
    classes = key_classes(tokenizer, ids)
    with torch.no_grad():
        trace = model(torch.tensor([ids], device=dev), trace=True, keep=("pattern",)).trace
    for layer in range(model.config.n_layer):
        for kind, value in pattern_scores(trace.pattern(layer).cpu(), classes).items():
            sums[kind][layer] += value
    for kind, c in query_counts(len(ids)).items():
        counts[kind] += c


def prompt_scores(trace, tokenizer, ids: list[int]) -> dict[str, torch.Tensor]:
    """The same scores on one traced prompt, (L, H) each: the head table's encoder columns."""
    classes, t = key_classes(tokenizer, list(ids)), len(ids)
    counts = query_counts(t)
    rows: dict[str, list[torch.Tensor]] = {k: [] for k in KINDS}
    for layer in range(trace.n_layers()):
        for kind, value in pattern_scores(trace.pattern(layer).cpu(), classes).items():
            rows[kind].append(value / max(counts[kind], 1))
    return {k: torch.stack(v).float() for k, v in rows.items()}
