"""Figures for notebooks (Jupyter, VS Code, Colab): the app's own builders, called on a trace.

    import tfm, tfm.viz as viz
    trace, tokens = viz.trace_prompt(tfm.load("default"), "The cat sat on the mat. The cat sat on the")
    viz.head_view(trace, tokens, layer=5, heads=[2, 5])

Every function returns a plotly `go.Figure` drawn by the builder the app's page uses
(`tfm.viz.attention`, `sampling`, `why`, `positions`, `norms`): one set of builders, not two.
A figure renders in a notebook without a server; `fig.write_html("f.html")` saves it as a
standalone page (plotly.js inside: opens offline).

The attention figures also take what Hugging Face returns with `output_attentions=True` (a tuple
of (B, H, T, T) tensors, one per layer) and its tokens as strings, as BertViz's
`head_view(attention, tokens)` does. Like the app, they draw at most `WINDOW` positions at once
(labels beyond that are unreadable, and the head view's lines grow as T²): the last ones unless
`positions=(first, last)` says which; the title names the positions drawn.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import torch

from ..analysis.attribution import direct, token_id
from ..analysis.heads import head_table as _head_table
from ..analysis.lens.compare import lens_grid, prompt_fits
from ..analysis.norms import layer_summaries
from ..analysis.lens.tuned import TunedLens
from ..analysis.positions import position_vectors, rope_angle_table
from ..core.trace import Trace
from ..core.validate import check_int
from ..generation.generate import generate, n_words
from ..generation.sampling import SamplingSettings, next_token as _next_token
from ..generation.timeline import StepRecord, step_record
from ..loaders.loading import LM
from . import attention as fa
from . import lens as fl
from . import norms as fn
from . import positions as fp
from . import sampling as fs
from . import why as fw
from .attention import WINDOW
from .notebook_attention import (
    all_heads,
    attention_pattern,
    axis_labels,
    drawn_positions,
    head_view,
    layer_heads,
    span_text,
)

LENS_WINDOW = 32  # most positions of the logit lens (its cells hold text)

__all__ = [
    "WINDOW",
    "all_heads",
    "attention_pattern",
    "attribution_bars",
    "generation_attention",
    "generation_timeline",
    "head_table",
    "head_table_frame",
    "head_view",
    "layer_heads",
    "lens_comparison",
    "logit_lens",
    "next_token",
    "norm_statistics",
    "positional_encodings",
    "record_generation",
    "residual_norms",
    "tokens",
    "trace_prompt",
]


# ---- inputs: a tfm trace or Hugging Face attentions, and token labels ------------------------
@torch.no_grad()
def trace_prompt(lm: LM, text: str) -> tuple[Trace, list[str]]:
    """One traced forward of `text` (after the model's start token, as the app and generation
    make ids): (its trace, the tokens' text). `lm.tokenizer.prompt_ids(text)` gives the ids."""
    ids = lm.tokenizer.prompt_ids(text)
    if not 0 < len(ids) <= lm.config.context_length:
        raise ValueError(
            f"the prompt is {len(ids)} tokens; this model reads 1 to {lm.config.context_length}: shorten it"
        )
    p = next(lm.model.parameters())
    return lm.model(torch.tensor([ids], device=p.device), trace=True).trace, tokens(lm, ids)


def tokens(lm: LM, ids: Sequence[int]) -> list[str]:
    """The readable piece of every id (the app's token text: spaces and control bytes shown)."""
    return lm.tokenizer.display_pieces([int(i) for i in ids])


def head_table_frame(lm: LM, trace: Trace | None = None, ids: Sequence[int] | None = None):
    """The Attention page's head table as a pandas DataFrame (one row per head, every score):
    on the traced prompt `ids` (with its `trace`) and on the repeated-random-tokens probe."""
    if (trace is None) != (ids is None):
        raise ValueError("pass both trace and ids (the prompt's scores), or neither (the probe's only)")
    return fa.head_table(_head_table(lm, trace, None if ids is None else list(ids)))


def head_table(lm: LM, trace: Trace | None = None, ids: Sequence[int] | None = None, digits: int = 3) -> go.Figure:
    """`head_table_frame` as a plotly table (scores shown with `digits` decimals; the cells hold
    the exact values)."""
    frame = head_table_frame(lm, trace, ids)
    cols = [c for c in frame.columns if c not in ("layer", "index")]
    shown = [None] + [f".{check_int('digits', digits, 0, 8)}f"] * (len(cols) - 1)
    return go.Figure(
        go.Table(
            header=dict(values=[c.replace("_", " ") for c in cols], align="left"),
            cells=dict(values=[frame[c].tolist() for c in cols], format=shown, align="left"),
        ),
        layout=dict(title="Head table: one row per head", height=min(900, 120 + 22 * len(frame))),
    )


# ---- the model's predictions ---------------------------------------------------------------
def logit_lens(
    lm: LM, trace: Trace, ids: Sequence[int], positions: tuple[int, int] | None = None, tuned: TunedLens | None = None
) -> go.Figure:
    """What each layer would predict at each position (the Logit lens page's grid): cell text the
    top token, colour its probability, bold where it is the token that really comes next. With
    `tuned` (`tfm.analysis.lens.tuned.shipped_lens("smollm2", lm)`), the tuned lens's grid."""
    ids, tok = [int(i) for i in ids], lm.tokenizer
    labels = axis_labels(tokens(lm, ids), len(ids))
    a, b = drawn_positions(len(ids), positions, LENS_WINDOW)
    lens = lens_grid(lm.model, trace, tuned, k=5, positions=slice(a, b + 1), keep_probs=False, n_words=n_words(lm))
    top_ids, top_probs = lens.top_ids.cpu(), lens.top_probs.float().cpu()  # (L+1, w, 5)
    nxt = ids[a + 1 : b + 2]
    hover = [
        [
            (
                f"actual next: {fs.esc(tok.display_piece(nxt[c])) if c < len(nxt) else '(end of prompt)'}<br>"
                + "<br>".join(
                    f"{fs.esc(tok.display_piece(int(i)))}: {p:.4f}"
                    for i, p in zip(top_ids[r, c], top_probs[r, c].tolist())
                )
            )
            for c in range(b - a + 1)
        ]
        for r in range(len(lens.labels))
    ]
    pieces = [[tok.display_piece(int(t)) for t in row[:, 0]] for row in top_ids]
    bold = (top_ids[:, :, 0] == torch.tensor(nxt + [-1] * (b - a + 1 - len(nxt)))).numpy()
    return fs.lens_grid_figure(
        top_probs[:, :, 0].numpy(),
        pieces,
        hover,
        lens.labels,
        labels[a : b + 1],
        f"{'Tuned' if tuned else 'Logit'} lens: top prediction after each layer{span_text(a, b, len(ids))}",
        "position (input token); each cell predicts the token after it",
        bold=bold,
    )


def lens_comparison(lm: LM, trace: Trace, tuned: TunedLens | None = None) -> go.Figure:
    """Each layer's reading against the final prediction (the Logit lens page's chart): KL and top-1
    agreement over the prompt's positions after the first, for the logit lens and `tuned`."""
    fits = prompt_fits(lm.model, trace, tuned, n_words(lm))
    return fl.lens_fit_figure(
        {k: f.mean_kl() for k, f in fits.items()},
        {k: f.agreement() for k, f in fits.items()},
        fits["logit"].labels,
        "Each layer's reading against the final prediction",
    )


def _token(lm: LM, token: int | str | None) -> int | None:
    if token is None or not isinstance(token, str):
        return token
    return token_id(lm.tokenizer, token, lm.config.vocab_size)


def attribution_bars(
    lm: LM,
    ids: Sequence[int],
    position: int = -1,
    token: int | str | None = None,
    versus: int | str | None = None,
    trace: Trace | None = None,
    top: int = 15,
) -> go.Figure:
    """Direct logit attribution (the Why page's bars): the `top` components by |contribution| to
    the logit of `token` (default: the top prediction; text must be one token) at `position`,
    or to logit(token) - logit(versus). `trace`: a trace of these ids to reuse."""
    attr = direct(lm, list(ids), position, _token(lm, token), _token(lm, versus), trace)
    what = f"logit({lm.tokenizer.display_piece(attr.token)!r})"
    if attr.versus is not None:
        what += f" − logit({lm.tokenizer.display_piece(attr.versus)!r})"
    return fw.contrib_bars(
        list(attr.components),
        attr.values.numpy(),
        f"Top contributions to {fa.plotly_text(what)} = {attr.target:.4f} at position {attr.position}",
        top=check_int("top", top, 1),
    )


def next_token(
    lm: LM,
    trace: Trace,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    count: int = 20,
    position: int = -1,
) -> go.Figure:
    """The next-token breakdown (the sampling page's chart) after `position`: temperature, then
    top-k, then top-p over the full vocabulary; the `count` most likely tokens drawn."""
    settings = SamplingSettings(temperature, top_k, top_p)
    bd = _next_token(trace.logits_at(position).float().cpu(), settings, n_words(lm))
    shown = fs.shown_ids(bd.logits, check_int("count", count, 1, 200))
    title = fs.next_token_title(len(shown), n_words(lm), settings.temperature, settings.top_k, settings.top_p)
    return fs.next_token_figure(bd, shown, tokens(lm, shown), title)


# ---- generation ----------------------------------------------------------------------------
def record_generation(
    lm: LM,
    prompt: str,
    max_new_tokens: int = 20,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
) -> tuple[list[int], list[StepRecord]]:
    """Generate with a trace and keep what the app's timeline keeps of each step:
    (prompt ids, one StepRecord per token with its logits, attention rows and residual streams)."""
    gen = generate(lm, prompt, max_new_tokens, temperature, top_k, top_p, seed=seed, trace=True)
    return list(gen.prompt.ids), [step_record(step) for step in gen]


def generation_timeline(records: Sequence[StepRecord], log: bool = True) -> go.Figure:
    """How likely the model (T = 1) found each generated token, step by step; hover for the value."""
    if not records:
        raise ValueError("records is empty: generate at least one token (record_generation)")
    y = np.array([r.prob_original for r in records])
    fig = fs.compare_figure(
        {"chosen token": y},
        "Generation timeline: the model's probability of each chosen token",
        "model probability (T = 1)",
        log=log,
    )
    fig.update_traces(text=[fs.esc(r.display) for r in records], textposition="top center", mode="lines+markers+text")
    return fig


def generation_attention(lm: LM, prompt_ids: Sequence[int], records: Sequence[StepRecord], step: int = -1) -> go.Figure:
    """Where the position that predicted generated token `step` looked: every layer and head
    (the timeline's attention rows; the last `WINDOW` keys)."""
    step = check_int(
        "step", step if step >= 0 else len(records) + step, 0, len(records) - 1, f" ({len(records)} generated tokens)"
    )
    r = records[step]
    if r.attn is None:
        raise ValueError("these records hold no attention rows: make them with record_generation")
    seq = list(prompt_ids) + [x.token_id for x in records[:step]]
    labels = axis_labels(tokens(lm, seq), len(seq))
    fig, _ = fs.step_attention_figure(
        r.attn,
        labels,
        WINDOW,
        f"Step {step}: where position {len(seq) - 1} looked before drawing '{fs.esc(r.display)}', every layer and head",
    )
    return fig


# ---- positions and norms -------------------------------------------------------------------
def positional_encodings(lm: LM, length: int | None = None) -> go.Figure:
    """The model's own positions: its added vectors (learned or sinusoidal; one row per position)
    or, for RoPE, the rotation angle of every pair. `length` positions (default up to 128)."""
    cfg = lm.config
    n = check_int("length", min(cfg.context_length, 128) if length is None else length, 1, cfg.context_length)
    if cfg.pos_encoding == "rope":
        return fp.rope_angle_heatmap(rope_angle_table(lm.model, n), "RoPE rotation angle per position and pair")
    table = position_vectors(lm.model, n)
    if table is None:
        raise ValueError(f"this model ({cfg.pos_encoding!r} positions) has no positional encoding to draw")
    return fp.position_heatmap(table, f"Positional vectors ({cfg.pos_encoding}), first {n} positions")


def norm_statistics(trace: Trace, tokens: Sequence[str], stat: str = "ln1.input_std") -> go.Figure:
    """One norm statistic per layer and token (the Norms page's heatmaps), e.g. ln1.input_std,
    ln2.output_mean, ln1.input_norm (RMSNorm models: ln1.input_rms)."""
    stats, _ = layer_summaries(trace)
    if stat not in stats:
        raise ValueError(f"stat {stat!r} is not one of {', '.join(sorted(stats))}")
    values = stats[stat]
    labels = axis_labels(tokens, values.shape[-1])
    blocks = [f"block {i}" for i in range(values.shape[0])]
    norm, part = stat.split(".")
    side = "input" if part.startswith("input") else "output"
    return fn.layer_token_heatmap(
        values, labels, blocks, f"{stat}: {part.split('_')[1]} of the {side} of {norm}", part.split("_")[1]
    )


def residual_norms(trace: Trace, tokens: Sequence[str]) -> go.Figure:
    """The residual stream's L2 norm per token after the embedding and after every block."""
    resid = layer_summaries(trace)[1]["resid"]
    streams = ["embed"] + [f"after block {i}" for i in range(resid.shape[0] - 1)]
    return fn.layer_token_heatmap(
        resid, axis_labels(tokens, resid.shape[-1]), streams, "Residual-stream L2 norm per token", "L2 norm", height=340
    )
