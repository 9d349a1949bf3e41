"""Where and how hard to steer a model, measured on that model: `calibrate(lm)` gives each of a
few of its layers the strength at which steering costs a fixed amount of its reading of ordinary
text, generates short seeded texts toward and away from the opposite-mood pair on a few open
prompts, and keeps the prompt, layer and strength whose texts move most toward both moods while
still reading like text. No model is recognised by its name: the numbers come from its forwards.

    cal = calibrate(lm)                    # seconds on SmolLM2; cache it per model
    vec = pair_vector(lm, *cal.pair, cal.layer)
    plain, steered = steered_pair(lm, cal.prompt, vec, cal.strength, seed=1, temperature=0.8)

Mood is counted with two small fixed lexicons (`POSITIVE`, `NEGATIVE`): in the words of a text
(`mood_counts`), and as the probability the steered model itself gives their tokens while it
writes (a smooth measure of the same thing, `Trial.pull_toward` / `pull_away`). A text is fluent
when it is as varied as ordinary text (`distinct_ratio`) and no token fills it (`longest_run`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ...core import cancel
from ...core.encoder import token_nll
from ...core.kv_cache import KVCache
from ...core.validate import check_int
from ...generation.choice import Noise, choose_all
from ...generation.generate import n_words
from ...generation.sampling import SamplingSettings
from .vectors import (
    NEUTRAL_TEXT,
    SteeringVector,
    check_layer,
    check_strengths,
    pair_vector,
    reading_ids,
    steer_span,
    stream_norms,
)

POSITIVE = frozenset(
    "happy happiness happily joy joyful glad cheerful delighted excited exciting love loved loves loving lovely "
    "kind kindness good great wonderful amazing awesome beautiful fantastic excellent smile smiled smiles smiling "
    "laugh laughed laughing friend friends friendly friendship nice sweet warm gentle hope hopeful fun proud "
    "grateful thankful thank thanks blessed peace peaceful calm bright celebrate enjoy enjoyed inspired "
    "confident".split()
)
NEGATIVE = frozenset(
    "sad sadness unhappy miserable sorrow grief cry cried cries crying tears angry anger mad furious hate hated "
    "hates hatred awful terrible horrible bad worse worst cruel evil stupid ugly lie liar wrong lost alone lonely "
    "broken dark hopeless pain painful hurt suffer suffering fear scared afraid terrified worried worry stress "
    "stressed anxious nervous frustrated annoyed disappointed bored boring sick ill exhausted ashamed guilty "
    "failing failure fail failed dead die death kill".split()
)
PAIR = ("I feel happy, joyful and kind.", "I feel sad, angry and miserable.")
OPEN_PROMPTS = ("Today I feel", "I looked at him and felt")  # open prompts tried; a model's text leans its own way
LAYER_FRACTIONS = (0.2, 0.35, 0.5)  # of the depth: steering works in the early-middle layers
STRENGTHS = (0.1, 0.25, 0.4, 0.6, 0.8, 1.0)  # probed for damage, in typical stream lengths (`stream_norms`)
MAX_DAMAGE = 0.6  # nats per token of ordinary text a default steering may cost
MIN_DISTINCT = 0.6  # distinct words / words, on average: ordinary text is above ~0.7
LOOP_DISTINCT = 0.35  # one text below this is a loop
MIN_PULL = 0.5  # each mood's lexicon at least e^0.5 = 1.6x as likely as unsteered
FLOOR = 1e-6  # probability floor in the pull's ratios
MAX_LAYERS, MAX_SEEDS, MAX_NEW_TOKENS, MAX_PROMPTS = 8, 8, 64, 4  # a calibration's cost stays bounded
STEP = 0.01  # a chosen strength is a multiple of this (the Steer page's slider step)
WORD = re.compile(r"[a-z']+")


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def mood_counts(text: str) -> tuple[int, int]:
    """(positive, negative) lexicon words in `text`."""
    w = words(text)
    return sum(x in POSITIVE for x in w), sum(x in NEGATIVE for x in w)


def distinct_ratio(text: str) -> float:
    """Distinct words / words (1.0 for an empty text): a loop of a few words scores low."""
    w = words(text)
    return len(set(w)) / len(w) if w else 1.0


def longest_run(ids: Sequence[int]) -> int:
    """The longest stretch of one token repeated back to back."""
    best = run = 0
    for i, t in enumerate(ids):
        run = run + 1 if i and t == ids[i - 1] else 1
        best = max(best, run)
    return best


def lexicon_ids(tokenizer, lexicon) -> list[int]:
    """Token ids of the lexicon's words that are one token after a space, lower case or capitalised."""
    out = set()
    for w in lexicon:
        for form in (" " + w, " " + w.capitalize()):
            ids = tokenizer.encode(form)
            if len(ids) == 1:
                out.add(ids[0])
    return sorted(out)


@dataclass
class _Row:
    """One generation of the batch (the row interface of `tfm.generation.choice`)."""

    settings: SamplingSettings
    words: int
    gen: torch.Generator
    noise: Noise


@torch.no_grad()
def generate_rows(
    lm,
    prompt_ids: Sequence[int],
    edits: Sequence,
    seeds: Sequence[int],
    new_tokens: int,
    temperature: float,
    lexicons: Sequence[Sequence[int]] = (),
    should_stop: cancel.ShouldStop = None,
) -> tuple[list[list[int]], torch.Tensor]:
    """`new_tokens` tokens after the prompt for each seed in one batched, KV-cached decode, each
    row drawing from its own generator as `tfm.generate` does; `edits` carry their rows. Returns
    each row's tokens (up to its first end-of-text) and (B, len(lexicons)) the mean probability
    the row's model gave each lexicon's tokens at its steps."""
    b, ids = len(seeds), list(prompt_ids)
    settings, width = SamplingSettings(temperature, 0, 1.0), n_words(lm)
    rows = [_Row(settings, width, torch.Generator().manual_seed(int(s)), Noise()) for s in seeds]
    cache = KVCache(lm.config, b, len(ids) + new_tokens - 1, lm.device, next(lm.model.parameters()).dtype)
    x, out = torch.tensor([ids] * b, device=lm.device), [[] for _ in range(b)]
    mass = torch.zeros(b, len(lexicons))
    for _ in range(new_tokens):
        cancel.check(should_stop, "the calibration")
        logits = lm.model(x, cache=cache, last_only=True, edits=list(edits)).logits[:, -1]  # (B, V)
        for r, (part, token, _) in enumerate(choose_all(logits, rows)):
            out[r].append(token)
            mass[r] += torch.stack([part.probs[list(lex)].sum() for lex in lexicons]).cpu() if lexicons else 0
        x = torch.tensor([[t[-1]] for t in out], device=lm.device)  # (B, 1)
    eot = lm.tokenizer.eot_id
    return [t[: t.index(eot)] if eot in t else t for t in out], mass / new_tokens


@torch.no_grad()
def damage(
    lm, vectors: Sequence[SteeringVector], strengths: Sequence[float], should_stop: cancel.ShouldStop = None
) -> torch.Tensor:
    """(len(vectors), len(strengths)) how much each steering hurts the model's reading of ordinary
    text: the extra nats per token it needs for NEUTRAL_TEXT, the worse of +strength and -strength
    (steered as `steer_span` says). One batched forward of 1 + 2 x V x S rows."""
    ids, _ = reading_ids(lm, NEUTRAL_TEXT, "neutral", cut=True)
    start, _, skip = steer_span(lm.tokenizer, ids)
    if len(ids) < start + 2:
        raise ValueError(f"this model's context ({lm.config.context_length} tokens) is too short to measure damage")
    signed = [(v, sign * s) for v in vectors for s in strengths for sign in (1, -1)]
    edits = [v.edit(s, start, row=r + 1, skip=skip) for r, (v, s) in enumerate(signed)]
    batch = torch.tensor([ids] * (len(signed) + 1), device=lm.device)  # (R, T)
    h = lm.model.hidden(batch, edits=edits, should_stop=should_stop)[:, start:-1]  # (R, T-1-start, D)
    targets = batch[:, start + 1 :]  # (R, T-1-start): no (R, T, V) logits held, a chunk of rows at a time
    nll = token_nll(lm.model, h.reshape(-1, h.shape[-1]), targets.reshape(-1)).reshape(targets.shape).mean(-1).cpu()
    extra = (nll[1:] - nll[0]).reshape(len(vectors), len(strengths), 2)
    return extra.max(-1).values


def affordable(strengths: Sequence[float], damages: Sequence[float], budget: float) -> tuple[float, float]:
    """(strength, its damage): where the damage reaches `budget`, linear between the probed
    strengths (from none at strength 0) and cut down to a STEP; the largest probed strength and
    its damage if it never does."""
    s0, d0 = 0.0, 0.0
    for s, d in zip(strengths, damages):
        if d >= budget:
            at = s0 + (s - s0) * (budget - d0) / (d - d0)
            cut = max(math.floor(at / STEP) * STEP, STEP)
            return round(cut, 6), d0 + (d - d0) * (cut - s0) / (s - s0)
        s0, d0 = s, d
    return s0, d0


# Strengths per batched damage forward. `affordable` reads a layer's damages only up to the first
# that reaches the budget, so later strengths are measured only for layers still below it.
PROBE_ROUND = 2


def affordable_strengths(
    lm, vectors: Sequence[SteeringVector], strengths: Sequence[float], budget: float, should_stop=None
) -> list[tuple[float, float]]:
    """`affordable(strengths, damage(lm, vectors, strengths)[i], budget)` for each vector, with
    the strengths probed PROBE_ROUND at a time and, past the first round, only for the vectors
    whose damage is still below `budget`: the same answers from fewer rows."""
    measured: list[list[float]] = [[] for _ in vectors]
    for a in range(0, len(strengths), PROBE_ROUND):
        todo = [i for i, m in enumerate(measured) if not any(d >= budget for d in m)]
        if not todo:
            break
        got = damage(lm, [vectors[i] for i in todo], strengths[a : a + PROBE_ROUND], should_stop)
        for i, row in zip(todo, got.tolist()):
            measured[i] += row
    return [affordable(strengths[: len(m)], m, budget) for m in measured]


@dataclass(frozen=True)
class Trial:
    """One layer at its affordable strength on one prompt: the damage it costs, its pull toward
    each mood (log of the lexicon's probability while steering over that while not: the positive
    lexicon at +strength, the negative at -strength), the lexicon words in its texts toward (+)
    and away (-) and in the plain texts (positive, negative), and whether every text stayed fluent."""

    prompt: str
    layer: int
    strength: float
    damage: float
    pull_toward: float
    pull_away: float
    toward: int  # positive words in the texts steered +strength
    away: int  # negative words in the texts steered -strength
    plain: tuple[int, int]
    distinct: float  # the mean distinct-word ratio of its texts
    fluent: bool

    @property
    def moves(self) -> bool:
        """Both moods pulled at least MIN_PULL, every text fluent."""
        return self.fluent and min(self.pull_toward, self.pull_away) >= MIN_PULL

    def rank(self) -> tuple:
        return self.moves, self.fluent, self.pull_toward + self.pull_away


@dataclass(frozen=True)
class Calibration:
    """The chosen prompt, layer and strength for `pair` and every trial it was chosen from (the
    best `Trial.rank`). `moves` is False when no trial moved both moods fluently: say so where it
    is shown."""

    layer: int
    strength: float
    pair: tuple[str, str]
    prompt: str
    trials: tuple[Trial, ...]
    moves: bool

    @property
    def chosen(self) -> Trial:
        return next(t for t in self.trials if (t.prompt, t.layer) == (self.prompt, self.layer))


def candidate_layers(n_layer: int) -> list[int]:
    return sorted({min(max(round(f * n_layer), 1 if n_layer > 1 else 0), n_layer - 1) for f in LAYER_FRACTIONS})


def _fluent(tokenizer, rows: Sequence[Sequence[int]]) -> tuple[bool, float]:
    """(fluent, the texts' mean distinct-word ratio): as varied as ordinary text on average (a
    short text's ratio is noisy), none a loop, none filled by one token."""
    ratios = [distinct_ratio(tokenizer.decode(r)) for r in rows]
    mean = sum(ratios) / len(ratios)
    ok = mean >= MIN_DISTINCT and min(ratios) >= LOOP_DISTINCT
    return ok and all(longest_run(r) <= max(3, len(r) // 2) for r in rows), mean


def _trials(lm, prompt: str, layers, vectors, chosen, seeds, new_tokens, temperature, should_stop) -> list[Trial]:
    """Each layer's affordable (strength, damage) in `chosen` generated toward and away on
    `prompt`, `seeds` texts each, after the plain texts: one batched decode."""
    tok, n, ids = lm.tokenizer, len(seeds), lm.tokenizer.prompt_ids(prompt)
    room = lm.config.context_length - len(ids)
    if not ids or room < 1:
        raise ValueError(f"a calibration prompt needs 1..{lm.config.context_length - 1} tokens, has {len(ids)}")
    start, stop, skip = steer_span(tok, ids)
    edits = [
        v.edit(sign * s, start, stop, row=n * (1 + 2 * i + k) + j, skip=skip)
        for i, (v, (s, _)) in enumerate(zip(vectors, chosen))
        for k, sign in enumerate((1, -1))
        for j in range(n)
    ]
    lex = [lexicon_ids(tok, POSITIVE), lexicon_ids(tok, NEGATIVE)]
    rows, mass = generate_rows(
        lm, ids, edits, list(seeds) * (1 + 2 * len(layers)), min(new_tokens, room), temperature, lex, should_stop
    )
    group = lambda g: (rows[g * n : (g + 1) * n], mass[g * n : (g + 1) * n].mean(0).clamp_min(FLOOR))  # noqa: E731
    counts = lambda texts, which: sum(mood_counts(tok.decode(r))[which] for r in texts)  # noqa: E731
    (plain, base), out = group(0), []
    for i, (layer, (s, d)) in enumerate(zip(layers, chosen)):
        (up, m_up), (down, m_down) = group(1 + 2 * i), group(2 + 2 * i)
        fluent, distinct = _fluent(tok, up + down)
        out.append(
            Trial(
                prompt,
                layer,
                s,
                float(d),
                float((m_up[0] / base[0]).log()),
                float((m_down[1] / base[1]).log()),
                counts(up, 0),
                counts(down, 1),
                (counts(plain, 0), counts(plain, 1)),
                distinct,
                fluent,
            )
        )
    return out


def _checked(lm, layers, strengths, seeds, new_tokens) -> tuple[list[int], list[float], list[int], int]:
    layers = list(candidate_layers(lm.config.n_layer) if layers is None else layers)
    if not 1 <= len(layers) <= MAX_LAYERS:
        raise ValueError(f"give 1..{MAX_LAYERS} layers to try, got {len(layers)}")
    layers = [check_layer(lm, layer) for layer in layers]
    strengths = check_strengths(strengths)
    if strengths[0] <= 0 or any(b <= a for a, b in zip(strengths, strengths[1:])):
        raise ValueError(f"strengths to probe must be positive and increasing, got {strengths}")
    seeds = [check_int("seed", x, 0) for x in seeds]
    if not 1 <= len(seeds) <= MAX_SEEDS:
        raise ValueError(f"give 1..{MAX_SEEDS} seeds, got {len(seeds)}")
    return layers, strengths, seeds, check_int("new_tokens", new_tokens, 1, MAX_NEW_TOKENS)


def calibrate(
    lm,
    pair: tuple[str, str] = PAIR,
    prompts: Sequence[str] = OPEN_PROMPTS,
    layers: Sequence[int] | None = None,
    strengths: Sequence[float] = STRENGTHS,
    seeds: Sequence[int] = (0, 1, 2),
    new_tokens: int = 20,
    temperature: float = 0.8,
    should_stop: cancel.ShouldStop = None,
) -> Calibration:
    """Where and how hard to steer `pair` on this model: each of `layers` (default a few of its
    early-middle ones) gets the strength at which steering costs MAX_DAMAGE nats per token of
    ordinary text (`damage`, `affordable`: `affordable_strengths`); of those, on each of `prompts`, the one whose texts
    move both moods most while fluent wins (`Trial.rank`). A batched forward per PROBE_ROUND
    strengths for the damage, then per prompt one decode of len(seeds) x (1 + 2 x len(layers)) rows."""
    layers, strengths, seeds, new_tokens = _checked(lm, layers, strengths, seeds, new_tokens)
    if not 1 <= len(prompts) <= MAX_PROMPTS:
        raise ValueError(f"give 1..{MAX_PROMPTS} prompts to try, got {len(prompts)}")
    norms = stream_norms(lm)
    vectors = [pair_vector(lm, *pair, layer, norms=norms) for layer in layers]
    chosen = affordable_strengths(lm, vectors, strengths, MAX_DAMAGE, should_stop)
    trials = [
        t
        for prompt in prompts
        for t in _trials(lm, prompt, layers, vectors, chosen, seeds, new_tokens, temperature, should_stop)
    ]
    best = max(trials, key=Trial.rank)
    return Calibration(best.layer, best.strength, tuple(pair), best.prompt, tuple(trials), best.moves)
