"""A state fuzzer (issue #40): a seeded random walk over one page's state on one model. Each step
moves a random keyed control to a random value it offers, or opens the page from a link whose
parameters are random legal or illegal values (fuzz_values.py says which, and what the page must
show). After each step: no exception, no error box where every value was legal (but matrix.EXPECTED),
a message where a link value was illegal, no markup from a value, messages bounded.

A failing walk reports its seed and its steps as Python; `replay(steps)` runs them again, so a
crash becomes a regression test. From the command line (longer walks than CI's):

    python -m tests.app.fuzz --steps 500 --seed 7 --page tour --model smollm2
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from streamlit import config

os.environ.setdefault("TFM_DEFAULT_MODEL", "default")  # as tests/app/conftest.py sets it

from tfm.analysis.attribution import n_words  # noqa: E402
from ui import models
from services import server  # noqa: E402

from tests.app import fuzz_values as fv  # noqa: E402
from tests.app.conftest import allow_models, as_shown  # noqa: E402
from tests.app.controls import choose, control, keyed  # noqa: E402
from tests.app.judge import long_messages, markup_problems, own_markup  # noqa: E402
from tests.app.matrix import (
    EXPECTED,
    HOSTILE,
    LINK_PARAMS,
    MODELS,
    PAGES,
    PROMPT,
    needs,
    open_cell,  # noqa: E402
    set_view,
    spec_of,
)

# Every page on these model kinds (tests/app/matrix.py MODELS); the model-free pages on the first only.
WALK_MODELS = ("bundled", "smollm2-gqa", "mqa", "gemma3-window")
REAL_PAGES = ("tour", "attention", "why", "steer", "features", "logit_lens")  # also on SmolLM2 itself ("real")
# Encoders (issue #54): MiniLM and a random BERT shape, on the pages that read attention and its
# inputs, the encoder's own pages, and one that needs a language-model head (it says so).
ENCODER_MODELS = ("minilm", "bert-random")
SIDEBAR_PARAMS = ("model", "prompt", "seed", "device")  # read on every page, before it decides it can run
ENCODER_PAGES = ("tokens", "attention", "tour", "similarity", "look_at", "next_token", "logit_lens")
# Steps per (page, model) in CI (test_fuzz.py), sized so the whole fuzzer takes a few minutes on a
# 2-core machine: a step of the small models is ~0.1-0.5 s, of these pages ~1.5-2 s, of SmolLM2 1-3 s.
CI_STEPS, CI_SLOW_PAGES, CI_STEPS_SMALL = {"real": 4}, {"norms": 4, "experiments": 4}, 8
LINK_SHARE = 0.25  # share of steps that open the page from a new link (the rest move a control)
LEGAL_SHARE = 0.6  # share of link parameters given a legal value
PROMPT_CHARS = 400  # the server's prompt cap while fuzzing (HOSTILE["long"] is cut to it, with a word)
ALIASES = {"default": "bundled", "smollm2": "real", "gqa": "smollm2-gqa"}


@dataclass(frozen=True)
class Link:
    """Open `page` on `model` (a MODELS name) from a link with these parameters (text, as in a URL);
    `illegal`: the parameters given an illegal value (each must be named in a message)."""

    page: str
    model: str
    params: dict
    verdict: str = fv.LEGAL
    illegal: tuple[str, ...] = ()

    def __repr__(self) -> str:
        params = "{" + ", ".join(f"{k!r}: {_literal(v)}" for k, v in self.params.items()) + "}"
        return f"Link({self.page!r}, {self.model!r}, {params}, {self.verdict!r}, {self.illegal!r})"


@dataclass(frozen=True)
class Move:
    """Set one control (`kind` as AppTest names it, or "tabs" for a keyed st.tabs) to `value`."""

    kind: str
    key: str
    value: object
    verdict: str = fv.LEGAL


def _literal(value) -> str:
    """A value as Python; a long hostile value by its name, so a printed walk stays readable."""
    name = next((n for n, v in HOSTILE.items() if v == value and len(v) > 100), None)
    return f"HOSTILE[{name!r}]" if name else repr(value)


@dataclass
class Session:
    """One walk's page and model, what its page shows untouched, and the session now."""

    page: str
    model: str
    spec: str
    shape: fv.Shape
    baseline: set  # markup the page writes itself
    values: dict  # each control's value as the page first showed it, untouched
    at: object = None
    dirty: set = field(default_factory=set)  # text fields holding a value the page may refuse
    touched: set = field(default_factory=set)  # controls this session's link or moves have set

    @classmethod
    def open(cls, page: str, model: str, root: Path | None = None) -> "Session":
        root = root or Path(tempfile.gettempdir()) / "tfm-fuzz-models"
        root.mkdir(parents=True, exist_ok=True)  # the CLI's default folder may not exist yet
        spec = spec_of(model, root)
        if spec.startswith("path:"):
            allow_models(root)
        at = open_cell(page, spec, setup=PAGES[page].setup)
        assert not at.exception, (page, model, [e.value for e in at.exception])
        values = {key: control(at, kind, key).value for kind, key in keyed(at)}
        return cls(page, model, spec, shape_of(at, spec), own_markup(at), values)


def shape_of(at, spec: str) -> fv.Shape:
    """The legal ranges of a link on this model: read from the model the app loaded (shared cache)."""
    lm = models.load_lm(models.checked_spec(spec), "cpu")
    ids = lm.tokenizer.prompt_ids(PROMPT)
    words = n_words(lm)
    pieces = tuple(dict.fromkeys(lm.tokenizer.decode([i]) for i in ids if i < words))
    feature = [el for el in at.get("number_input") if getattr(el, "key", None) == "features.feature"]
    n_features = int(feature[0].max) + 1 if feature else 0
    return fv.Shape(lm.config.n_layer, lm.config.n_head, len(ids), words, n_features, pieces)


def page_params(page: str) -> list[str]:
    own = [p for pg, p, _ in LINK_PARAMS if pg == page and p != "model"]
    return list(dict.fromkeys([*own, *fv.SIDEBAR]))


def draw_link(s: Session, rng: random.Random) -> Link:
    names = page_params(s.page)
    params, verdicts = {}, {}
    for name in rng.sample(names, rng.randint(1, min(3, len(names)))):
        params[name], verdicts[name] = fv.link_value(name, s.shape, rng, rng.random() < LEGAL_SHARE)
    illegal = tuple(name for name, v in verdicts.items() if v == fv.ILLEGAL)
    verdict = fv.ILLEGAL if illegal else fv.FREE if fv.FREE in verdicts.values() else fv.LEGAL
    return Link(s.page, s.model, params, verdict, illegal)


def draw(s: Session, rng: random.Random) -> Link | Move:
    """The next step: a new link, or a move of one control the page shows now."""
    controls = [c for c in keyed(s.at) if not control(s.at, *c).disabled] if s.at is not None else []
    tabs = [t.label for t in s.at.tabs] if s.at is not None and s.page in fv.TABS else []
    if s.at is None or rng.random() < LINK_SHARE or not (controls or tabs):
        return draw_link(s, rng)
    if tabs and rng.random() < 1 / (len(controls) + 1):
        return Move("tabs", fv.TABS[s.page], rng.choice(tabs))
    kind, key = rng.choice(controls)
    value, verdict = fv.control_value(kind, key, control(s.at, kind, key), rng, s.values, s.shape)
    return Move(kind, key, value, verdict)


def take(s: Session, step: Link | Move) -> None:
    """Run one step in the session (a link opens a fresh one, as a shared link does)."""
    if isinstance(step, Link):
        s.at = open_cell(step.page, s.spec, params=step.params, setup=PAGES[step.page].setup)
        s.touched = {fv.KEYS[k] for k in step.params if k in fv.KEYS}
        s.dirty = set(s.touched) if step.verdict != fv.LEGAL else set()
    else:
        if step.kind == "tabs":
            set_view(s.at, {step.key: step.value})
        else:
            choose(control(s.at, step.kind, step.key), step.value).run()
        (s.dirty.discard if step.verdict == fv.LEGAL else s.dirty.add)(step.key)
        s.touched.add(step.key)
    for kind, key in keyed(s.at):  # a control a tab or mode showed now: its value as offered
        if key not in s.values and key not in s.touched:
            s.values[key] = control(s.at, kind, key).value


def problems(s: Session, step: Link | Move) -> list[str]:
    """What is wrong with the page after `step`, as sentences (empty: nothing)."""
    at, out = s.at, []
    out += [f"exception {e.proto.type}: {e.message[:300]} at {e.stack_trace[-1:]}" for e in at.exception]
    errors = [e.value for e in at.error]
    expected = [m for m in (EXPECTED.get((s.page, s.model)), fv.BY_DESIGN.get(s.page)) if m]
    unexpected = [e for e in errors if not any(m in e for m in expected)]
    if step.verdict == fv.LEGAL and not s.dirty and unexpected:
        out.append(f"error box after legal values: {[e[:300] for e in unexpected]}")
    if isinstance(step, Link) and step.illegal:
        said = [as_shown(m.value).lower() for m in [*at.error, *at.warning, *at.info]]
        # a page that says it needs what this model lacks (matrix.NEEDS) reads only the sidebar's values
        unread = () if not needs(s.page, s.model) else tuple(n for n in step.illegal if n not in SIDEBAR_PARAMS)
        out += [
            f"no message names the illegal link value {name}={_literal(step.params[name])[:80]}"
            for name in step.illegal
            if name not in unread and not any(w in m for w in fv.named(name) for m in said)
        ]
    out += [f"markup from a value: {found} in {text!r}" for found, text in markup_problems(at, s.baseline)]
    out += [f"message of {n:,} characters: {start!r}" for n, start in long_messages(at)]
    return out


@dataclass
class Walk:
    page: str
    model: str
    seed: int
    steps: list
    failure: list[str] | None
    seconds: float

    def report(self) -> str:
        if not self.failure:
            return f"{self.page} on {self.model}, seed {self.seed}: {len(self.steps)} steps, {self.seconds:.1f} s, ok"
        return (
            f"{self.page} on {self.model}, seed {self.seed}: failed at step {len(self.steps)} "
            f"({self.seconds:.1f} s): {'; '.join(self.failure)}\n"
            f"replay(steps) with steps = {self.steps!r}"
        )


def cell_seed(seed: int, page: str, model: str, again: int = 0) -> int:
    """Each (page, model) its own walk: a change to one cell's walk leaves the others' as they were;
    `again`: the walk after `again` failed ones (the command line goes on after a failure)."""
    return zlib.crc32(f"{seed}/{page}/{model}{f'/{again}' if again else ''}".encode())


@contextmanager
def fuzzing():
    """Exceptions with their message and stack in AppTest (the app's config shows only the type), and
    the server's prompt cap at PROMPT_CHARS (a cut prompt is the same path; a trace of 20,000
    characters on SmolLM2 takes a minute)."""
    before = config.get_option("client.showErrorDetails")
    config.set_option("client.showErrorDetails", "full")
    settings = server.settings()
    server.configure(replace(settings, limits=settings.limits.replace(max_prompt_chars=PROMPT_CHARS)))
    try:
        yield
    finally:
        config.set_option("client.showErrorDetails", before)
        server.configure(settings)


@fuzzing()
def walk(page: str, model: str, seed: int, n_steps: int, root: Path | None = None) -> Walk:
    """A random walk of up to `n_steps` steps; stops at the first step with a problem (an exception
    of AppTest itself, e.g. a run over its time limit, is one too)."""
    started, rng = time.perf_counter(), random.Random(seed)
    s, steps = Session.open(page, model, root), []
    for _ in range(n_steps):
        steps.append(step := draw(s, rng))
        try:
            take(s, step)
            found = problems(s, step)
        except Exception as e:  # noqa: BLE001 (reported with the steps that led to it)
            found = [f"the step itself failed: {type(e).__name__}: {str(e)[:300]}"]
        if found:
            return Walk(page, model, seed, steps, found, time.perf_counter() - started)
    return Walk(page, model, seed, steps, None, time.perf_counter() - started)


@fuzzing()
def replay(steps: list, root: Path | None = None):
    """Run recorded steps again (the first is a Link); AssertionError at the first with a problem.
    Returns the AppTest after the last step."""
    first = steps[0]
    s = Session.open(first.page, first.model, root)
    for i, step in enumerate(steps):
        take(s, step)
        found = problems(s, step)
        assert not found, (f"step {i + 1}/{len(steps)}", step, found)
    return s.at


def ci_steps(page: str, model: str) -> int:
    return min(CI_STEPS.get(model, CI_STEPS_SMALL), CI_SLOW_PAGES.get(page, CI_STEPS_SMALL))


def cells() -> list[tuple[str, str]]:
    """(page, model) of every walk CI runs."""
    out = [
        (page, model)
        for model in WALK_MODELS
        for page, p in PAGES.items()
        if not (p.model_free and model != WALK_MODELS[0])
    ]
    return (
        out
        + [(page, "real") for page in REAL_PAGES]
        + [(page, model) for model in ENCODER_MODELS for page in ENCODER_PAGES]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.app.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100, help="steps per (page, model); a failed walk restarts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--page", action="append", choices=sorted(PAGES), help="(repeatable) default: CI's pages")
    ap.add_argument(
        "--model",
        action="append",
        choices=sorted({*MODELS, *ALIASES}),
        metavar="MODEL",
        help=f"(repeatable) a tests/app/matrix.py MODELS name or {sorted(ALIASES)}",
    )
    a = ap.parse_args(argv)
    models = [ALIASES.get(m, m) for m in a.model] if a.model else None
    todo = [(p, m) for p, m in cells() if (not a.page or p in a.page) and (not models or m in models)]
    if a.page and models:
        todo = [(p, m) for p in a.page for m in models]
    failed = 0
    for page, model in todo:
        done, seconds, k = 0, 0.0, 0
        while done < a.steps:
            w = walk(page, model, cell_seed(a.seed, page, model, k), a.steps - done)
            done, seconds, k = done + len(w.steps), seconds + w.seconds, k + 1
            if w.failure:
                failed += 1
                print(w.report(), flush=True)
        print(f"== {page} on {model}: {done} steps in {seconds:.1f} s ({k} walk(s))", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
