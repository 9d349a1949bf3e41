"""The generation page's parts that run models and draw results: streaming runs into
session state and one step's views (the temperature comparison and the KV-cache timing:
ui/gen_compare.py).
pages/generate.py owns the controls and passes what they chose as a GenPage."""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass

import streamlit as st
import torch

import tfm
from tfm.analysis.lens.logit import decode_streams
from tfm.generation.batcher import BatchedGeneration
from tfm.generation.generate import PromptInfo
from tfm.generation.sampling import SamplingSettings, breakdown
from tfm.generation.timeline import StepRecord, step_record

from tfm.text.token_view import token_labels
from tfm.viz import sampling as sampling_figs
from tfm.viz.attention import WINDOW
from ui import charts, heavy, models
from services import server

REDRAW_S = 0.2  # redraw a streaming column at most 5 times a second: each redraw resends the whole text,
# and with a class generating at once those messages were a real share of the server's CPU


@dataclass(frozen=True)
class GenPage:
    """What the page's controls chose, for one script run."""

    lm: tfm.LM
    model: tuple[str, str]  # (spec, device): stored results are shown only with this model
    prompt: str | tuple[int, ...]  # the sidebar's text, or a rendered chat's ids
    info: PromptInfo
    seed: int
    max_new: int
    settings: SamplingSettings
    stop_ids: frozenset[int] = frozenset()  # a chat model's end-of-turn tokens


def _next(run, slot, note: list, i: int):
    """(the run's next Step or None at its end, waiting): a batched run may have no step yet;
    while it waits for a row its slot says how many are ahead (redrawn when that changes)."""
    if not isinstance(run, BatchedGeneration):
        return next(run, None), False
    try:
        step = run.poll(REDRAW_S)
    except StopIteration:
        return None, False
    if step is None and note[i] != (ahead := run.queued):
        note[i] = ahead
        if ahead:  # a click still lands: the poll returns every REDRAW_S and this is an st call
            slot.info(
                f"⏳ Every generation row of this server is taken: {ahead} request(s) ahead of this one. "
                "It starts at the next free step; Stop still works."
            )
    return step, step is None


def stream(runs: list, slots: list, keep_tensors: bool, prompt_text: str):
    """Advance every Generation one step in turn, redrawing its column at most every REDRAW_S
    (and at its end); yields the record lists (filled in place, so an interrupted run keeps
    what it made)."""
    records, note = [[] for _ in runs], [0] * len(runs)
    live, drawn = list(range(len(runs))), [0.0] * len(runs)
    while live:
        for i in list(live):
            step, waiting = _next(runs[i], slots[i], note, i)
            if waiting:
                continue
            if step is not None:
                records[i].append(step_record(step, keep_tensors))
            done = step is None or step.stop_reason is not None
            if done or time.perf_counter() - drawn[i] > REDRAW_S:  # each st call is also where Stop lands
                slots[i].markdown(sampling_figs.text_html(prompt_text, records[i]), unsafe_allow_html=True)
                drawn[i] = time.perf_counter()
            if done:
                live.remove(i)
        yield records


def start_runs(g: GenPage, settings_list: list, seeds: list, keep_tensors: bool, use_cache: bool) -> list:
    """One Generation per (settings, seed): rows of the model's shared batch when the server
    batches (with the KV cache), else the session's own loop."""
    if use_cache and server.settings().batching:
        b = models.batcher(g.model[0], g.model[1], g.lm)
        run, extra = b.submit, {"owner": models.session_id()}
    else:
        run, extra = functools.partial(tfm.generate, g.lm), {"use_cache": use_cache}
    return [
        run(
            g.prompt,
            g.max_new,
            s.temperature,
            s.top_k,
            s.top_p,
            seed=sd,
            trace=keep_tensors,
            stop_ids=g.stop_ids,
            **extra,
        )
        for s, sd in zip(settings_list, seeds)
    ]


def generation_slot(use_cache: bool):
    """A heavy slot for a session's own generation loop; none for batched rows (the batcher
    bounds them, and its steps are shared)."""
    return contextlib.nullcontext() if use_cache and server.settings().batching else heavy.slot("generation")


def run_all(
    g: GenPage, settings_list: list, seeds: list, keep_tensors: bool, use_cache: bool, slots: list, out: dict
) -> None:
    """Generate each (settings, seed) into `out` (a session_state dict), timing the whole run."""
    runs = start_runs(g, settings_list, seeds, keep_tensors, use_cache)
    start = time.perf_counter()
    out.update(
        settings=settings_list,
        seeds=seeds,
        use_cache=use_cache,
        prompt_ids=g.info.ids,
        samples=[],
        seconds=0.0,
        done=False,
        model=g.model,
    )
    try:
        for records in stream(runs, slots, keep_tensors, g.lm.tokenizer.decode(list(g.info.ids))):
            out.update(samples=records, seconds=time.perf_counter() - start)
    finally:  # Stop (or any interruption) ends this session's rows now, not at their last token
        for r in runs:
            r.close()
    out["done"] = True


def usable(g: GenPage, run: dict | None) -> bool:
    """A stored run can be shown only with the model that made it (its token ids are that
    model's): after a model change the old results are set aside, not mis-decoded."""
    if run and run.get("model") != g.model:
        st.info("The last results were made with another model: press the button again to redo them.")
        return False
    return bool(run and run["samples"] and all(run["samples"]))


def show_texts(g: GenPage, run: dict, slots: list) -> None:
    prompt_text = g.lm.tokenizer.decode(list(run["prompt_ids"]))
    for slot, recs in zip(slots, run["samples"]):
        slot.markdown(sampling_figs.text_html(prompt_text, recs), unsafe_allow_html=True)
    if not run["done"]:
        st.warning("Generation was stopped early (Stop, or a setting changed while it ran): showing the tokens made.")


def step_views(g: GenPage, i: int, r: StepRecord, settings_used: SamplingSettings, seq: list[int]) -> None:
    """One step's kept set, the attention row that predicted it, and its logit lens."""
    lm, tok = g.lm, g.lm.tokenizer
    ids = sampling_figs.shown_ids(r.logits, 15, must=r.token_id)
    pieces = tok.display_pieces(ids)
    if r.rank_original >= 15:  # the drawn token sits far down the ranking: say so on its bar
        pieces[-1] = f"… {pieces[-1]} (rank {r.rank_original + 1:,})"
    drawn = sampling_figs.esc(r.display)
    charts.show(
        sampling_figs.next_token_figure(
            breakdown(r.logits, settings=settings_used),
            ids,
            pieces,
            f"Step {i}: the distribution '{drawn}' was drawn from",
            chosen=r.token_id,
        ),
        key="gen.step_chart",
    )
    _step_attention(tok, i, r, seq)
    _step_lens(lm, i, r, drawn)


def _step_attention(tok, i: int, r: StepRecord, seq: list[int]) -> None:
    """Every layer and head's attention from the query that predicted step i's token."""
    q = r.attn.shape[-1] - 1  # the query that predicted this token: the position before it
    fig, hidden = sampling_figs.step_attention_figure(
        r.attn,
        token_labels(tok, seq[: q + 1]),
        WINDOW,
        f"Step {i}: where the last position (·{q}, '{sampling_figs.esc(tok.display_piece(seq[q]))}') looked, "
        "every layer and head",
    )
    charts.show(fig, key="gen.attn")
    if hidden is not None:
        st.caption(
            f"Showing the last {WINDOW} keys; averaged over heads, {hidden:.1%} of the attention "
            f"went to the {q + 1 - WINDOW} earlier positions."
        )


def _step_lens(lm, i: int, r: StepRecord, drawn: str) -> None:
    """The logit lens at the predicting position: what each layer would have drawn."""
    tok = lm.tokenizer
    with torch.inference_mode():  # one position through the final norm and unembedding: cheap
        lens = decode_streams(
            lm.model, r.resid[:, None], k=5, keep_probs=False, n_words=min(tok.vocab_size, lm.config.vocab_size)
        )
    top_ids = lens.top_ids[:, 0].cpu()
    charts.show(
        sampling_figs.step_lens_figure(
            top_ids,
            lens.top_probs[:, 0].float().cpu(),
            lens.labels,
            [tok.display_pieces(row.tolist()) for row in top_ids],
            r.token_id,
            f"Step {i}: logit lens, what each layer would predict (bold = '{drawn}', the token drawn)",
        ),
        key="gen.lens",
    )
