"""What a model knows, checked on it: the prompt pairs a patching view opens on (`knows`: the model
answers both prompts of a pair by a margin; `opening_pair`), and its strongest induction head's
effect when ablated (`induction_check`). `tfm.analysis.patching` re-exports these names."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core import edits as E
from ..core.encoder import token_nll
from .attribution import _ids, _model, n_words, token_id
from .heads import induction_probe, top_head

KNOWN_MARGIN = 1.0  # logits: a trained model that knows an answer prefers it by several; an untrained one's
# logits differ by hundredths


@dataclass(frozen=True)
class PromptPair:
    """A clean and a corrupted prompt (the same length in tokens) and the answer each should give."""

    clean: str
    corrupt: str
    answer: str
    wrong: str


# Indirect object identification (Wang et al. 2022): a pretrained model knows who gets the drink.
NAME_SWAP = PromptPair(
    "When Mary and John went to the store, John gave a drink to",
    "When Mary and John went to the store, Mary gave a drink to",
    " Mary",
    " John",
)


STORY = PromptPair(
    "Lily gave the ball to Tom. Then Tom gave it to", "Tom gave the ball to Lily. Then Lily gave it to", " Lily", " Tom"
)  # in the bundled model's words (children's stories)


EXAMPLES = (NAME_SWAP, STORY)


@torch.no_grad()
def knows(lm, pair: PromptPair, margin: float = KNOWN_MARGIN) -> bool:
    """Whether the model answers `pair`: on the clean prompt it prefers `answer` to `wrong` by at
    least `margin` logits, and on the corrupted prompt `wrong` by as much. False when an answer is
    not one token of the model or a prompt does not fit its context."""
    model, tok = _model(lm), lm.tokenizer
    try:
        answer, wrong = (token_id(tok, t, n_words(lm)) for t in (pair.answer, pair.wrong))
    except ValueError:
        return False
    for text, sign in ((pair.clean, 1.0), (pair.corrupt, -1.0)):
        ids = tok.encode(text)
        if not 0 < len(ids) <= model.config.context_length:
            return False
        logits = model(_ids(model, ids), last_only=True).logits[0, -1].float()
        if sign * float(logits[answer] - logits[wrong]) < margin:
            return False
    return True


def opening_pair(lm) -> PromptPair:
    """The pair a patching view opens on: the first of `EXAMPLES` the model knows, else the last."""
    return next((p for p in EXAMPLES[:-1] if knows(lm, p)), EXAMPLES[-1])


@dataclass(frozen=True)
class InductionCheck:
    layer: int
    head: int  # the strongest induction head by the engine's score
    score: float
    control: int  # another head of the same layer, picked at random
    loss_clean: float  # mean loss on the repeated half
    loss_ablated: float
    loss_control: float


@torch.no_grad()
def induction_check(lm, seq_len: int = 40, seed: int = 0, bos: int | None = None) -> InductionCheck:
    """Zero-ablate the strongest induction head (by `analysis.induction_probe`) and a random
    other head of its layer; the mean next-token loss on the second copy of a repeated
    random sequence (after the start token `bos`, if any) before and after each. With
    `heads.probe_settings(lm)`'s seq_len, seed and bos its head and score are the head table's."""
    model = _model(lm)
    probe = induction_probe(model, seq_len=seq_len, seed=seed, bos=bos)
    layer, head, score = top_head(probe["induction"])
    g = torch.Generator().manual_seed(seed)
    others = [h for h in range(model.config.n_head) if h != head]
    if not others:
        raise ValueError("the model has one head per layer: there is no control head")
    control = others[int(torch.randint(len(others), (1,), generator=g))]
    toks = probe["tokens"].to(next(model.parameters()).device)[None]  # (1, 2n + (bos is not None))
    first = seq_len + (bos is not None)  # where the second copy starts
    losses = []
    for edit in ([], [E.AblateHead(layer, head)], [E.AblateHead(layer, control)]):
        h = model.hidden(toks, edits=edit)[0, first - 1 : -1]  # (n, D): predicts the second copy
        losses.append(float(token_nll(model, h, toks[0, first:]).mean()))  # no (2n, V) logits
    return InductionCheck(layer, head, score, control, *losses)
