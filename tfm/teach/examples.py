"""Example prompts that show each Look-inside page's mechanism on the running model.

Which prompt shows induction, an indirect object, an answer surfacing through the layers or a
feature firing depends on the model: a name is one token in one vocabulary and two in another,
a tiny story model knows no capitals. So a page's examples are MEASURED on the model, never
chosen by its name: a few fixed candidate texts per mechanism, one short forward each, and the
best that reach the mechanism's bar, with the settings the page opens on and a line saying
what was measured.

    offer = for_page(lm, "attention")       # Offer: examples (best first), measured, bar
    ex = offer.examples[0]                  # Example(page, prompt, settings, label, why, score)
    ex.settings                             # {"layer": 18, "head": 6}: the head that scored best

Cost: one forward per candidate, at most 6 per page (SmolLM2: a few tenths of a second each);
`should_stop` (tfm.core.cancel) is asked before each.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..analysis.attribution import n_words, token_id
from ..analysis.dictionaries.features import FeatureSet
from ..analysis.heads import detection_score, induction_detection, top_head
from ..analysis.lens.logit import logit_lens
from ..analysis.dictionaries.sae import stream_at
from ..core import cancel
from ..core.escape import short
from ..core.trace_names import head_label
from ..generation.generate import prepare_prompt

PAGES = {"attention": 1, "why": 2, "logit_lens": 2, "features": 2}  # page -> most examples it offers

# The bars an example must reach. Induction: the share of a later copy's attention on the token
# after the earlier copy (a trained induction head: 0.5-0.95; an untrained model's best head: a
# few hundredths to a tenth). Indirect object: logits by which the model prefers the indirect
# object to the subject (a model that knows prefers it by several; an untrained one's logits
# differ by hundredths). Features: the activation as a share of the feature's strongest held-out one.
INDUCTION_MIN, IOI_MIN, FEATURE_MIN = 0.3, 1.0, 0.5
FEATURE_SHARE = 0.02  # an example's feature fires on at most this share of held-out tokens: it says something
# about the token it fires on (features.DENSE_SHARE, 0.1, only keeps the page from opening on a dense one)
LENS_K = 5  # the logit lens page's hover lists the top 5

# Induction: common words (one token with a leading space in most vocabularies), each candidate
# six of them in a fixed random order, three times.
WORDS = (
    "cat",
    "dog",
    "tree",
    "ball",
    "house",
    "sun",
    "bird",
    "cake",
    "red",
    "blue",
    "green",
    "apple",
    "water",
    "happy",
    "big",
    "fish",
    "hat",
    "box",
    "car",
    "milk",
    "book",
    "door",
    "bed",
    "girl",
    "boy",
    "park",
)


def repeated_words(seed: int, n: int = 6, copies: int = 3) -> str:
    """`n` of WORDS in the order `seed` draws, `copies` times, separated by spaces."""
    return " ".join(random.Random(seed).sample(WORDS, n) * copies)


INDUCTION_TEXTS = tuple(repeated_words(seed) for seed in range(4))
# Indirect object identification (Wang et al. 2022): (text, indirect object, repeated subject).
IOI_TEXTS = (
    ("When Mary and John went to the store, John gave a drink to", " Mary", " John"),
    ("Then, Anna and Tom went to the park. Tom gave a flower to", " Anna", " Tom"),
    ("When Tom and Lily went to the park, Lily gave the ball to", " Tom", " Lily"),
    ("Tom and Sue went to the park. Tom gave the ball to", " Sue", " Tom"),
)
# Facts and story endings a model may know: (text, the answer that comes next).
LENS_TEXTS = (
    ("The capital of France is", " Paris"),
    ("A, B, C, D,", " E"),
    ('She was very happy. She smiled and said, "Thank', " you"),
    ("They lived happily ever", " after"),
    ("The dog wagged its", " tail"),
    ("Tom was sad. He started to", " cry"),
)
# Sentences in the words of the shipped SAEs' training text (children's stories).
FEATURE_TEXTS = (
    "Tom saw a big red ball under the tree.",
    "The cat sat on the mat and looked at the bird.",
    'Mom said, "Wash your hands before dinner!"',
    "The sun was hot, so they ate cold ice cream.",
)


@dataclass(frozen=True)
class Example:
    """A prompt for `page` and the page's settings it opens on (`settings`: "layer", "head",
    "position", "row" (a logit-lens row, 0 = the embedding), "token", "versus", "feature"),
    a short button label, one line on what was measured, and the measured number (`score`)."""

    page: str
    prompt: str
    settings: dict
    label: str
    why: str
    score: float

    def __post_init__(self) -> None:
        if self.page not in PAGES:
            raise ValueError(f"page {self.page!r} has no examples: use one of {', '.join(PAGES)}")
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError("an example needs a prompt with some text")
        if not isinstance(self.settings, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, str)) and not isinstance(v, bool)
            for k, v in self.settings.items()
        ):
            raise ValueError(f"an example's settings are names to whole numbers or text, got {self.settings!r}")
        if not math.isfinite(self.score):
            raise ValueError(f"an example's score must be a finite number, got {self.score!r}")


@dataclass(frozen=True)
class Offer:
    """A page's examples on one model: `examples`, those that reached the bar (best first, at
    most PAGES[page]); `measured`, every candidate that fits the model (best first, reaching
    the bar or not); `bar`, what an example must show, in words."""

    page: str
    examples: tuple[Example, ...]
    measured: tuple[Example, ...]
    bar: str


def _offer(
    page: str,
    found: list[tuple[Example, bool]],
    order: Callable[[Example], float],
    bar: str,
    distinct: str | None = None,
) -> Offer:
    """Sort by `order` (smaller first); keep those that passed, one per `distinct` setting."""
    found = sorted(found, key=lambda pair: order(pair[0]))
    passed, seen = [], set()
    for example, ok in found:
        value = example.settings.get(distinct) if distinct else None
        if ok and (value is None or value not in seen):
            passed.append(example)
            seen.add(value)
    return Offer(page, tuple(passed[: PAGES[page]]), tuple(e for e, _ in found), bar)


def prompt_ids(lm, text: str) -> tuple[int, ...] | None:
    """The ids a page traces for `text` (`prepare_prompt`, as the app's pages), or None when the
    model's context would cut it."""
    info = prepare_prompt(lm, text, room=0)
    return None if info.dropped or info.from_eot else info.ids


def _batch(lm, ids) -> torch.Tensor:
    return torch.tensor([list(ids)], device=lm.device)


def _token(lm, text: str) -> int | None:
    try:
        return token_id(lm.tokenizer, text, n_words(lm))
    except ValueError:  # two tokens in this vocabulary: the candidate does not fit the model
        return None


# ---- induction: the Attention page -------------------------------------------------------------


def later_copy_scores(trace, ids) -> torch.Tensor:
    """(L, H) each head's induction score on the queries whose token came before (a repeated
    sequence's later copies): the share of their attention on the token right after the
    earlier copy (`heads.induction_detection`), averaged over those queries."""
    det = induction_detection(torch.tensor(list(ids)))
    rows = det.sum(-1) > 0
    if not bool(rows.any()):
        raise ValueError("no token of the prompt repeats an earlier one followed by another: nothing to induct")
    return torch.stack(
        [detection_score(trace.pattern(layer).float().cpu()[:, rows], det[rows]) for layer in range(trace.n_layers())]
    )


@torch.no_grad()
def induction(lm, should_stop: cancel.ShouldStop = None) -> Offer:
    """A repeated sequence of common words, opening on the head with the highest induction
    score on its later copies."""
    found = []
    for text in INDUCTION_TEXTS:
        cancel.check(should_stop, "finding an induction example")
        if (ids := prompt_ids(lm, text)) is None:
            continue
        trace = lm.model(_batch(lm, ids), trace=True, keep=("pattern",)).trace
        layer, head, score = top_head(later_copy_scores(trace, ids))
        ex = Example(
            "attention",
            text,
            {"layer": layer, "head": head},
            f"a repeated sequence (on its words, induction: {head_label(layer, head)} scores {score:.2f})",
            f"The same words three times: on the later copies head {head_label(layer, head)} puts {score:.0%} of its "
            "attention on the word that followed the current word last time, the most of any head on these words "
            "(Home's induction head is measured on random tokens; on real words another head can lead).",
            score,
        )
        found.append((ex, score >= INDUCTION_MIN))
    return _offer(
        "attention",
        found,
        lambda e: -e.score,
        f"a head putting at least {INDUCTION_MIN:.0%} of a repeated word's attention on the word after "
        "its earlier copy",
    )


# ---- indirect object: Why this token? ----------------------------------------------------------


@torch.no_grad()
def logit_difference(lm, ids, answer: int, versus: int) -> float:
    """logit(answer) - logit(versus) after the last token."""
    logits = lm.model(_batch(lm, ids), last_only=True).logits[0, -1].float()
    return float(logits[answer] - logits[versus])


def indirect_object(lm, should_stop: cancel.ShouldStop = None) -> Offer:
    """Sentences where one name is the indirect object and the other the repeated subject,
    best first by how far the model prefers the indirect object."""
    found = []
    for text, io, subject in IOI_TEXTS:
        cancel.check(should_stop, "finding an indirect-object example")
        ids, a, b = prompt_ids(lm, text), _token(lm, io), _token(lm, subject)
        if ids is None or a is None or b is None:
            continue
        diff = logit_difference(lm, ids, a, b)
        ex = Example(
            "why",
            text,
            {"position": len(ids) - 1, "token": io, "versus": subject},
            f"who gets it? ({io.strip()} over {subject.strip()} by {diff:.1f} logits)",
            f"{io.strip()} is the indirect object and {subject.strip()} the repeated subject: after the last "
            f"token the model prefers {io!r} to {subject!r} by {diff:.2f} logits.",
            diff,
        )
        found.append((ex, diff >= IOI_MIN))
    return _offer(
        "why",
        found,
        lambda e: -e.score,
        f"a sentence where the model prefers the indirect object's name by at least {IOI_MIN:g} logits",
    )


# ---- an answer surfacing: the Logit lens -------------------------------------------------------


@torch.no_grad()
def surfacing(lm, ids, answer: int, k: int = LENS_K) -> tuple[int, int, float]:
    """At the last position: the first logit-lens row (0 = the embedding, r = after block r-1)
    from which `answer` stays in the top `k` through the last row (n_layer + 1: not in the
    final top k), the model's top prediction there, and its probability."""
    t = len(ids)
    trace = lm.model(_batch(lm, ids), trace=True, last_only=True).trace
    lens = logit_lens(lm.model, trace, k=k, positions=slice(t - 1, t), keep_probs=False, n_words=n_words(lm))
    inside = (lens.top_ids[:, 0, :] == answer).any(-1).tolist()  # (L+1,)
    row = len(inside)
    while row > 0 and inside[row - 1]:
        row -= 1
    return row, int(lens.top_ids[-1, 0, 0]), float(lens.top_probs[-1, 0, 0])


def _where(row: int) -> str:
    return "the embedding" if row == 0 else f"block {row - 1}"


def surfacing_answers(lm, should_stop: cancel.ShouldStop = None) -> Offer:
    """Prompts whose answer the model predicts, best first by how near mid-depth the answer
    enters the lens's top LENS_K for good (and before the last block)."""
    found, n = [], lm.config.n_layer
    for text, answer in LENS_TEXTS:
        cancel.check(should_stop, "finding a logit-lens example")
        ids, a = prompt_ids(lm, text), _token(lm, answer)
        if ids is None or a is None:
            continue
        row, top, p = surfacing(lm, ids, a)
        depth = row / n
        said = f"{short(lm.tokenizer.display_piece(top), 20)!r} (p {p:.2f})"
        why = (
            f"After the last token the model predicts {answer!r} (p {p:.2f}); read through the final norm, the "
            f"stream holds it in its top {LENS_K} from {_where(row)} on, of {n} blocks."
            if top == a
            else f"The model predicts {said}, not {answer!r}."
        )
        label = f"top {LENS_K} from {_where(row)}" if top == a else "not predicted"
        ex = Example(
            "logit_lens",
            text,
            {"position": len(ids) - 1, "row": row},
            f"{answer.strip()!r} surfacing ({label})",
            why,
            depth,
        )
        found.append((ex, top == a and row < n))
    return _offer(
        "logit_lens",
        found,
        lambda e: abs(e.score - 0.5),
        f"a prompt whose answer the model predicts and the lens shows in its top {LENS_K} before the end",
    )


# ---- a feature firing: Features (SAE) ----------------------------------------------------------


@torch.no_grad()
def strongest_feature(lm, fs: FeatureSet, ids) -> tuple[int, int, float, float]:
    """(position, feature, activation, share): the feature firing hardest on the prompt as a
    share of its strongest held-out activation, among those that fired on held-out text on at
    most FEATURE_SHARE of tokens; positions the SAE was not trained on (`fs.skip`) left out."""
    x = stream_at(lm.model, _batch(lm, ids), fs.layer)[0].float().cpu()  # (T, D)
    acts = fs.sae.encode(x)  # (T, F)
    acts[: fs.skip] = 0
    top, freq = fs.data["hist_max"].float(), fs.data["freq"].float()
    usable = (top > 0) & (freq <= FEATURE_SHARE)
    share = torch.where(usable, acts / top.clamp_min(1e-12), torch.zeros(()))
    position, feature = divmod(int(share.argmax()), share.shape[1])
    return position, feature, float(acts[position, feature]), float(share[position, feature])


def firing_features(lm, fs: FeatureSet | None, should_stop: cancel.ShouldStop = None) -> Offer:
    """Sentences with a feature firing as hard as on its strongest held-out text, one example
    per feature; none without an SAE."""
    found = []
    for text in FEATURE_TEXTS if fs is not None else ():
        cancel.check(should_stop, "finding a feature example")
        if (ids := prompt_ids(lm, text)) is None or len(ids) <= fs.skip:
            continue
        position, feature, act, share = strongest_feature(lm, fs, ids)
        piece = short(lm.tokenizer.display_piece(ids[position]), 20)
        freq = float(fs.data["freq"][feature])
        ex = Example(
            "features",
            text,
            {"feature": feature, "position": position},
            f"feature {feature} on {piece!r} ({share:.0%} of its top)",
            f"F{fs.named(feature)[1:]} fires {act:.2f} on {piece!r} (position {position}), {share:.0%} of its "
            f"strongest held-out activation; it fires on {freq:.1%} of held-out tokens.",
            share,
        )
        found.append((ex, share >= FEATURE_MIN))
    return _offer(
        "features",
        found,
        lambda e: -e.score,
        f"a sparse autoencoder, and a feature firing at {FEATURE_MIN:.0%} of its strongest held-out activation",
        distinct="feature",
    )


def for_page(lm, page: str, fs: FeatureSet | None = None, should_stop: cancel.ShouldStop = None) -> Offer:
    """`page`'s examples on `lm` (`fs`: the model's SAE, for the Features page)."""
    if page == "features":
        return firing_features(lm, fs, should_stop)
    finders = {"attention": induction, "why": indirect_object, "logit_lens": surfacing_answers}
    if page not in finders:
        raise ValueError(f"page {page!r} has no examples: use one of {', '.join(PAGES)}")
    return finders[page](lm, should_stop)
