"""The values the state fuzzer (fuzz.py) draws: for a control, a random value it offers (legal by
construction); for a link parameter, a legal value of this model and prompt or an illegal one.

Each draw comes with a verdict on what the page must do with it:
- LEGAL: no error box (but the messages of matrix.EXPECTED);
- ILLEGAL: a message (warning, info or error) says the value was not used as given;
- FREE: text a page may refuse with an error (not a token of the vocabulary, a folder that is not
  allowed): only no exception, no markup from it, messages bounded.
A new link parameter joins by one line in PARAMS."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable


from ui.sidebar import SEED_MAX
from ui.st_private import number_is_int

from tests.app.matrix import HOSTILE, WHY_TABS

LEGAL, ILLEGAL, FREE = "legal", "illegal", "free"
TOUR_STEPS = (
    "tokens",
    "embed",
    "positions",
    "qkv",
    "scores",
    "mask",
    "softmax",
    "weighted",
    "heads",
    "norm",
    "residual",
    "mlp",
    "blocks",
    "final_norm",
    "logits",
    "sampling",
    "drawn",
)
# Short texts a student might type or paste: emoji, scripts, HTML, Markdown, special tokens.
TEXTS = (
    "hello world",
    "The cat sat",
    "🐱🐈‍⬛ cats 🎉",
    "数学 café ñ",
    "<b>bold</b> <script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "**bold** _it_ `code`",
    "[link](https://example.com)",
    "# Heading",
    "$x^2$ :red[x] :smile:",
    "a\nb\tc",
    " ",
    "<|endoftext|>",
    "1e308",
    "-1",
    "www.example.com",
)
# Text fields that refuse some texts with an error box (a token that is not one token, a folder).
FREE_TEXT = (
    "why.token",
    "why.versus",
    "graph.token",
    "graph.versus",
    "why.clean",
    "why.corrupt",
    "why.answer",
    "why.wrong",
    "steer.words",
    "steer.pos",
    "steer.neg",
    "encdec.folder",
    "encdec.text",
)
# Error boxes a page shows by design for a combination of values each control offers, on any model
# (the lesson is the refusal: test_experiments_page.py's test_invalid_head_count_shows_an_error).
BY_DESIGN = {"experiments": "is not divisible by n_head"}
# Keyed tabs (st.tabs(key=...)): AppTest lists them without their key.
TABS = {"why": "why.tab", "attention": "attn.view"}
# Controls whose legal range is cut for time only (a bigger value is a longer run, not another path).
CHEAP = {"steer.new": 8, "gen.max_new": 8, "gen.n_samples": 2, "shapes.kv_ctx": 4096}
# Controls drawn at an end of their range half the time (issue #51: both graph thresholds at 1.0 kept
# every edge of the graph, ~10^7 of them, as Python objects).
EXTREMES = ("graph.node_threshold", "graph.edge_threshold")
# Values that surely hold more than one token (a "token" link value that must be refused).
MANY_TOKENS = tuple(HOSTILE[k] for k in ("md-link", "md-image", "html", "heading", "autolink", "long"))
NOT_NUMBERS = tuple(
    HOSTILE[k] for k in ("md-link", "html", "nan", "inf", "-inf", "null", "rtl-zero-width", "traversal", "long")
) + ("1.5", "", "0x10")


@dataclass(frozen=True)
class Shape:
    """What legal values depend on: the model's sizes, the link prompt's tokens, the page's SAE."""

    n_layer: int
    n_head: int
    n_tok: int
    n_words: int
    n_features: int  # 0: the page shows no feature on this model (no SAE ships for it)
    pieces: tuple[str, ...]  # the prompt's tokens as text (each one token of the vocabulary)


def text(rng: random.Random, max_chars: int = 0) -> str:
    out = " ".join(rng.choice(TEXTS) for _ in range(rng.randint(1, 3)))
    return out[:max_chars] if max_chars else out


def _words(rng: random.Random) -> str:
    """A link's prompt that is not blank (a blank one stops every page before it reads the others)."""
    while not (out := text(rng)).strip():
        pass
    return out


# --- link parameters: name -> (legal draw, illegal draw or None, verdict of the legal draw)


def _int(high: Callable[[Shape], int]):
    def legal(s: Shape, rng: random.Random) -> str:
        return str(rng.randrange(max(high(s), 1)))

    def illegal(s: Shape, rng: random.Random) -> str:
        return rng.choice(
            [
                str(-1 - rng.randrange(3)),
                str(high(s) + rng.randrange(3)),
                str(2**70),
                HOSTILE["20-digits"],
                "1e308",
                rng.choice(NOT_NUMBERS),
            ]
        )

    return legal, illegal, LEGAL


def _float(low: float, high: float):
    def legal(s: Shape, rng: random.Random) -> str:
        return str(round(rng.uniform(low, high), 2))

    def illegal(s: Shape, rng: random.Random) -> str:
        return rng.choice([str(low - 1), str(high + 1), "1e308", "-1e308", rng.choice(NOT_NUMBERS)])

    return legal, illegal, LEGAL


def _choice(options: tuple[str, ...], illegal: bool = True):
    def bad(s: Shape, rng: random.Random) -> str:
        return rng.choice([text(rng), *HOSTILE.values()])

    return (lambda s, rng: rng.choice(options)), (bad if illegal else None), LEGAL


def _token():
    """A one-token text (or empty: the top prediction); many tokens must be refused."""
    return (lambda s, rng: rng.choice(("", *s.pieces))), (lambda s, rng: rng.choice(MANY_TOKENS)), LEGAL


def _free():
    """Text a panel checks only where it is used (a patching prompt): anything, no verdict."""
    return (lambda s, rng: text(rng)), None, FREE


PARAMS: dict[str, tuple] = {
    "layer": _int(lambda s: s.n_layer),
    "head": _int(lambda s: s.n_head),
    "pos": _int(lambda s: s.n_tok),
    "feature": _int(lambda s: s.n_features),
    "top_k": _int(lambda s: s.n_words + 1),
    "seed": _int(lambda s: SEED_MAX + 1),
    "t": _float(0.0, 3.0),
    "top_p": _float(0.0, 1.0),
    "step": _choice(TOUR_STEPS),
    "tab": _choice((*WHY_TABS, "SAE features")),
    "present": _choice(("0", "1", "true", "false"), illegal=False),  # anything else is "off"
    "device": _choice(("cpu",)),
    "lens": _choice(("logit", "tuned")),
    "prompt": ((lambda s, rng: _words(rng)), (lambda s, rng: HOSTILE["long"]), LEGAL),  # too long: cut, with a word
    "token": _token(),
    "vs": _token(),
    "clean": _free(),
    "corrupt": _free(),
    "answer": _free(),
    "wrong": _free(),
}
SIDEBAR = ("prompt", "seed", "device")  # read by every page
KEYS = {
    "token": "why.token",
    "vs": "why.versus",
    "clean": "why.clean",
    "corrupt": "why.corrupt",
    "answer": "why.answer",
    "wrong": "why.wrong",
}  # text parameters kept in a field after the run


# The words a message about a link parameter uses (its name, or the control's label), lower case.
WORDS = {
    "layer": ("block",),
    "pos": ("position",),
    "t": ("temperature",),
    "top_k": ("top-k",),
    "top_p": ("top-p",),
    "vs": ("token",),
}


def named(param: str) -> tuple[str, ...]:
    return (param, *WORDS.get(param, ()))


def link_value(name: str, s: Shape, rng: random.Random, want_legal: bool) -> tuple[str, str]:
    legal, illegal, verdict = PARAMS[name]
    if name == "feature" and not s.n_features:  # the page says it has no features and reads none
        return (legal if want_legal else illegal)(s, rng), FREE
    if want_legal or illegal is None:
        return legal(s, rng), verdict
    return illegal(s, rng), ILLEGAL


# --- controls: a random value the control offers


def _number(el, rng: random.Random, is_int: bool, cap: float | None):
    low = el.min if el.min is not None else -(10.0 ** rng.randint(0, 12))
    high = el.max if el.max is not None else 10.0 ** rng.randint(0, 12)
    high = min(high, cap) if cap is not None else high
    step = el.step or (1 if is_int else 0.01)
    n = rng.randint(0, int((high - low) // step))
    value = low + n * step
    return int(round(value)) if is_int else round(value, 6)


def _pair(options: list, rng: random.Random) -> list:
    i, j = sorted(rng.randrange(len(options)) for _ in range(2))
    return [options[i], options[j]]


def control_value(kind: str, key: str, el, rng: random.Random, baseline: dict, s: Shape):
    """(value, verdict) for one control, within what it offers."""
    if kind in ("slider", "number_input"):
        is_int = number_is_int(el, kind)
        if isinstance(el.value, (tuple, list)):  # a range slider
            return sorted(_number(el, rng, is_int, CHEAP.get(key)) for _ in range(2)), LEGAL
        if key in EXTREMES and rng.random() < 0.5:
            return rng.choice([el.min, el.max]), LEGAL
        return _number(el, rng, is_int, CHEAP.get(key)), LEGAL
    if kind in ("select_slider", "selectbox", "radio"):
        options = list(el.options)
        if kind == "select_slider" and isinstance(el.value, (tuple, list)):  # a range
            return _pair(options, rng), LEGAL
        return rng.choice(options), LEGAL
    if kind == "multiselect":
        return rng.sample(list(el.options), rng.randint(0, min(3, len(el.options)))), LEGAL
    if kind in ("text_input", "text_area"):
        if key not in FREE_TEXT:
            return text(rng, el.max_chars or 0), LEGAL
        if rng.random() < 0.5:  # back to what the page offered, or one token of the prompt
            tokenish = key in ("why.token", "why.versus", "graph.token", "graph.versus", "steer.words")
            return rng.choice([baseline.get(key, ""), *(s.pieces if tokenish else ())]), LEGAL
        return text(rng, el.max_chars or 0), FREE
    return rng.random() < 0.5, LEGAL
