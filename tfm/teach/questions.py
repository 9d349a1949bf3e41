"""Questions for a whole class, graded against the running model's own numbers (issue #43).

A teacher asks; every student commits to an answer; the class sees the spread; then the model's
real numbers are revealed and each student sees how close they came. Each kind is a frozen
dataclass; `ask_*` builds one from the engine together with its `Truth` (the model's answer,
computed: the top tokens and their probabilities from `sampling.next_token`, every head's score
from `analysis.head_table`), never from a stored answer key. `grade(question, truth, answer)`
compares a student's answer with it.

Kinds: `NextToken` (typed, or one of options that include the model's top choices),
`WhichHead` (a head of the all-heads grid, graded by a head score), `Sampling` (what a
temperature / top-p does: the top token's probability after it, or how many tokens it keeps),
`Estimate` (a number: the probability of one token). Questions and truths travel as JSON
(`to_json`, `from_json`), checked on the way back in.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..analysis.heads import SCORES, HeadTable
from ..core.validate import check_int, check_number
from ..core.trace_names import head_label
from ..generation.sampling import SamplingSettings, next_token

TOP = 50  # the model's top tokens a next-token truth keeps (answers are graded among them)
N_OPTIONS = 4  # options of a multiple-choice next-token question
ODDS_RATIO = 1.5  # a probability whose odds are within this factor of the model's is counted right
ODDS_FLOOR = 1e-4  # answers of 0 or 1 are graded as this far from them (their odds are 0 or infinite)
KEPT_RATIO = 1.5  # a kept-token count within this factor of the model's is counted right


@dataclass(frozen=True)
class NextToken:
    kind: ClassVar[str] = "next_token"
    options: tuple[str, ...] = ()  # tokens as shown (␣ for a space); empty: the answer is typed

    @property
    def text(self) -> str:
        return "What token will the model predict next?" + (" Pick one." if self.options else " Type it.")


@dataclass(frozen=True)
class WhichHead:
    kind: ClassVar[str] = "which_head"
    score: str
    n_layer: int
    n_head: int

    def __post_init__(self) -> None:
        if self.score not in SCORES:
            raise ValueError(f"unknown head score {self.score!r}: choose one of {', '.join(SCORES)}")
        check_int("n_layer", self.n_layer, 1, 1000)
        check_int("n_head", self.n_head, 1, 1000)

    @property
    def text(self) -> str:
        return f"Which head has the highest {self.score.replace('_', ' ')} score? Click it in the grid."


@dataclass(frozen=True)
class Sampling:
    kind: ClassVar[str] = "sampling"
    temperature: float
    top_p: float
    measure: str  # "top_prob": the top token's probability after them; "kept": how many tokens stay

    def __post_init__(self) -> None:
        SamplingSettings(self.temperature, 0, self.top_p)  # the same checks as the sliders'
        if self.measure not in ("top_prob", "kept"):
            raise ValueError(f"measure {self.measure!r}: choose top_prob or kept")

    @property
    def text(self) -> str:
        where = f"temperature {self.temperature:g}" + (f" and top-p {self.top_p:g}" if self.top_p < 1 else "")
        return (
            f"With {where}, what is the most likely token's probability (0 to 1)?"
            if self.measure == "top_prob"
            else f"With {where}, how many tokens can the model still draw?"
        )


@dataclass(frozen=True)
class Estimate:
    kind: ClassVar[str] = "estimate"
    token: int
    shown: str  # the token as shown

    @property
    def text(self) -> str:
        return f"What probability (0 to 1) does the model give {self.shown!r} as the next token?"


KINDS = {k.kind: k for k in (NextToken, WhichHead, Sampling, Estimate)}
Question = NextToken | WhichHead | Sampling | Estimate


@dataclass(frozen=True)
class Truth:
    """The model's answer. `top`: (shown token, raw text, probability) by rank (next-token
    questions); `scores`: every head's score, (layer, head) (head questions); `value`: the number
    (sampling and estimate questions); `summary`: one sentence for the reveal."""

    summary: str
    top: tuple[tuple[str, str, float], ...] = ()
    scores: tuple[tuple[float, ...], ...] = ()
    value: float | None = None


@dataclass(frozen=True)
class Grade:
    correct: bool
    closeness: float  # 1 = the model's answer, toward 0 = far from it
    text: str  # what the student sees privately


def _probs(lm, logits: torch.Tensor, settings: SamplingSettings = SamplingSettings()):
    """The next-token breakdown the Next-token page shows for these (V,) logits."""
    return next_token(logits.float().cpu(), settings, min(lm.tokenizer.vocab_size, lm.config.vocab_size))


def ask_next_token(lm, logits: torch.Tensor, typed: bool) -> tuple[NextToken, Truth]:
    """From the last position's (V,) logits: the top TOP tokens; options (unless typed) are the
    model's top three and the tenth, in alphabetical order (the order gives nothing away)."""
    probs = _probs(lm, logits).probs
    p, ids = torch.topk(probs, min(TOP, probs.shape[0]))
    tok = lm.tokenizer
    top = tuple((tok.display_piece(int(i)), tok.piece(int(i)), float(q)) for q, i in zip(p, ids))
    picks = [top[r][0] for r in (0, 1, 2, 9) if r < len(top)]
    options = () if typed else tuple(sorted(dict.fromkeys(picks)))
    return NextToken(options), Truth(
        f"The model's top token is {top[0][0]!r} with probability {top[0][2]:.3f} (then {top[1][0]!r} {top[1][2]:.3f})."
        if len(top) > 1
        else f"The model's top token is {top[0][0]!r} with probability {top[0][2]:.3f}.",
        top=top,
    )


def ask_head(table: HeadTable, score: str) -> tuple[WhichHead, Truth]:
    if score not in table.scores:
        raise ValueError(f"the head table has no {score!r} score here: choose one of {', '.join(table.scores)}")
    s = table.scores[score].float()
    layer, head = divmod(int(s.argmax()), s.shape[1])
    return (
        WhichHead(score, s.shape[0], s.shape[1]),
        Truth(
            f"Layer {layer} head {head} scores highest: {float(s[layer, head]):.3f}.",
            scores=tuple(tuple(float(v) for v in row) for row in s),
        ),
    )


def ask_sampling(lm, logits: torch.Tensor, temperature: float, top_p: float, measure: str) -> tuple[Sampling, Truth]:
    q = Sampling(temperature, top_p, measure)
    bd = _probs(lm, logits, SamplingSettings(temperature, 0, top_p))
    best = int(bd.final.argmax())
    shown = lm.tokenizer.display_piece(best)
    if measure == "top_prob":
        value = float(bd.final[best])
        summary = f"{shown!r} goes from {float(bd.probs[best]):.3f} at temperature 1 to {value:.3f}."
    else:
        value = float(bd.n_kept)
        summary = f"{int(value):,} of {bd.probs.shape[0]:,} tokens can still be drawn."
    return q, Truth(summary, value=value)


def ask_estimate(lm, logits: torch.Tensor, token: int) -> tuple[Estimate, Truth]:
    probs = _probs(lm, logits).probs
    check_int("token", token, 0, probs.shape[0] - 1)
    shown = lm.tokenizer.display_piece(token)
    value = float(probs[token])
    return Estimate(token, shown), Truth(f"The model gives {shown!r} probability {value:.4f}.", value=value)


# ---- answers: checked, graded, binned ----
_HEAD = re.compile(r"\s*L?\s*(\d{1,4})\s*[ .,:/-]?\s*H?\s*(\d{1,4})\s*", re.IGNORECASE)


def _number(text: str, what: str, low: float, high: float) -> float:
    """A typed number: '0.3', '.3', '30%', '1,024'."""
    t = text.strip().replace(",", "")
    scale = 0.01 if t.endswith("%") else 1.0
    try:
        value = float(t.rstrip("%").strip()) * scale
    except ValueError:
        raise ValueError(f"{text!r} is not a number: type {what}") from None
    return check_number(what, value, low, high)


def parse_answer(q: Question, text: str) -> str:
    """A student's answer in the one form the store keeps and the histogram counts, or
    ValueError saying what to type."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the answer is empty")
    if isinstance(q, NextToken):
        if q.options and text not in q.options:
            raise ValueError("pick one of the options")
        return text
    if isinstance(q, WhichHead):
        m = _HEAD.fullmatch(text)
        if m is None:
            raise ValueError(f"{text!r} is not a head: write it as L3 H2")
        layer, head = int(m.group(1)), int(m.group(2))
        check_int("layer", layer, 0, q.n_layer - 1)
        check_int("head", head, 0, q.n_head - 1)
        return head_label(layer, head)
    if isinstance(q, Sampling) and q.measure == "kept":
        return str(round(_number(text, "a number of tokens", 1, 10**7)))
    return f"{_number(text, 'a probability from 0 to 1 (or a percentage)', 0, 1):.3g}"


def _same_token(answer: str, shown: str, raw: str) -> bool:
    a = answer.replace("␣", " ").strip().casefold()
    return answer == shown or (bool(a) and a == raw.strip().casefold())


def grade(q: Question, truth: Truth, answer: str) -> Grade:
    """How close `answer` (as `parse_answer` gives it) is to the model's own answer."""
    if isinstance(q, NextToken):
        return _grade_token(truth, answer)
    if isinstance(q, WhichHead):
        return _grade_head(truth, answer)
    value = float(answer)
    if isinstance(q, Sampling) and q.measure == "kept":
        ratio = max(value, 1) / max(truth.value, 1)
        how = "exactly" if ratio == 1 else f"{max(ratio, 1 / ratio):,.1f}× too {'many' if ratio > 1 else 'few'}"
        return Grade(
            1 / KEPT_RATIO <= ratio <= KEPT_RATIO,
            min(ratio, 1 / ratio),
            f"You said {value:,.0f}; the model keeps {truth.value:,.0f} ({how}).",
        )
    return _grade_probability(value, truth.value)


def log_odds(p: float) -> float:
    """ln(p / (1 - p)), with p kept ODDS_FLOOR away from 0 and 1."""
    p = min(max(p, ODDS_FLOOR), 1 - ODDS_FLOOR)
    return math.log(p / (1 - p))


def _grade_probability(value: float, true: float) -> Grade:
    """A probability graded on log-odds: right when its odds are within ODDS_RATIO of the
    model's, so 0 is far from 0.038 (a flat band would call it right) and 0.5 vs 0.55 is close."""
    gap = abs(log_odds(value) - log_odds(true))
    factor = math.exp(gap)
    how = f"odds {factor:,.1f}× too {'low' if value < true else 'high'}" if factor >= 1.05 else "odds within 5%"
    return Grade(
        gap <= math.log(ODDS_RATIO),
        1 / (1 + gap),
        f"You said {value:.3g}; the model: {true:.3g} (off by {abs(value - true):.3g}; {how}; right is "
        f"within {ODDS_RATIO:g}× of its odds).",
    )


def _grade_token(truth: Truth, answer: str) -> Grade:
    best = truth.top[0]
    for rank, (shown, raw, p) in enumerate(truth.top):
        if _same_token(answer, shown, raw):
            return Grade(
                rank == 0,
                p / best[2] if best[2] > 0 else 0.0,
                f"The model gives {shown!r} probability {p:.3f} (rank {rank + 1}); its top is "
                f"{best[0]!r} at {best[2]:.3f}.",
            )
    return Grade(
        False,
        0.0,
        f"{answer!r} is not among the model's {len(truth.top)} most likely tokens (each of "
        f"those has at least {truth.top[-1][2]:.4f}); its top is {best[0]!r} at {best[2]:.3f}.",
    )


def _grade_head(truth: Truth, answer: str) -> Grade:
    m = _HEAD.fullmatch(answer)
    layer, head = int(m.group(1)), int(m.group(2))
    flat = torch.tensor(truth.scores).flatten()
    mine = truth.scores[layer][head]
    rank = int((flat > mine).sum())
    return Grade(
        rank == 0,
        mine / float(flat.max()) if float(flat.max()) > 0 else 0.0,
        f"Layer {layer} head {head} scores {mine:.3f}: rank {rank + 1} of {flat.numel()}. {truth.summary}",
    )


def bucket(q: Question, answer: str) -> str:
    """The histogram bar an answer counts in: numbers in bins, heads as given, a typed token
    without its spaces and case (as `grade` matches it), an option as shown."""
    if isinstance(q, WhichHead) or (isinstance(q, NextToken) and q.options):
        return answer
    if isinstance(q, NextToken):
        return answer.replace("␣", " ").strip().casefold() or answer
    value = float(answer)
    if isinstance(q, Sampling) and q.measure == "kept":
        low = 10 ** int(math.log10(max(value, 1)))
        return f"{low:,}–{10 * low - 1:,}" if low > 1 else "1–9"
    tenth = min(int(value * 10), 9)
    return f"{tenth / 10:.1f}–{(tenth + 1) / 10:.1f}"


def model_bucket(q: Question, truth: Truth) -> str:
    """The bar the model's own answer falls in."""
    if isinstance(q, NextToken):
        shown, raw, _ = truth.top[0]
        return bucket(q, shown if q.options else raw)
    if isinstance(q, WhichHead):
        flat = torch.tensor(truth.scores)
        layer, head = divmod(int(flat.argmax()), flat.shape[1])
        return head_label(layer, head)
    return bucket(q, repr(truth.value))


def bucket_order(q: Question, labels) -> list[str] | None:
    """Bars in their own order for numbers (every tenth of a probability; counts by size);
    None (most common first) for tokens and heads."""
    if isinstance(q, (NextToken, WhichHead)):
        return None
    if isinstance(q, Sampling) and q.measure == "kept":
        return sorted(set(labels), key=lambda b: int(b.split("–")[0].replace(",", "")))
    return [f"{i / 10:.1f}–{(i + 1) / 10:.1f}" for i in range(10)]


# ---- JSON: what the room store keeps ----
def to_json(q: Question) -> dict:
    return {"kind": q.kind, **dataclasses.asdict(q)}


def from_json(data: dict) -> Question:
    """A question back from the store, checked as if new (ValueError on anything else)."""
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        raise ValueError(f"not a question: its kind must be one of {', '.join(KINDS)}")
    cls = KINDS[data["kind"]]
    fields = {f.name for f in dataclasses.fields(cls)}
    args = {k: v for k, v in data.items() if k != "kind"}
    if set(args) != fields:
        raise ValueError(f"a {cls.kind} question has the fields {sorted(fields)}, got {sorted(args)}")
    if "options" in args:
        args["options"] = tuple(str(o) for o in args["options"])
    return cls(**args)


def truth_to_json(t: Truth) -> dict:
    return dataclasses.asdict(t)


def truth_from_json(data: dict) -> Truth:
    return Truth(
        str(data["summary"]),
        tuple((str(s), str(r), float(p)) for s, r, p in data.get("top", ())),
        tuple(tuple(float(v) for v in row) for row in data.get("scores", ())),
        None if data.get("value") is None else float(data["value"]),
    )
