"""The generation page's parts that run models and draw results: streaming runs into
session state, one step's views, the temperature comparison and the KV-cache timing.
pages/generate.py owns the controls and passes what they chose as a GenPage."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import numpy as np
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
from ui import charts, heavy, links, models
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
            slot.info(f"⏳ Every generation row of this server is taken: {ahead} request(s) ahead of this one. "
                      "It starts at the next free step; Stop still works.")
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
        b, sid = models.batcher(g.model[0], g.model[1], g.lm), models.session_id()
        return [b.submit(g.prompt, g.max_new, s.temperature, s.top_k, s.top_p, seed=sd, trace=keep_tensors,
                         owner=sid, stop_ids=g.stop_ids) for s, sd in zip(settings_list, seeds)]
    return [tfm.generate(g.lm, g.prompt, g.max_new, s.temperature, s.top_k, s.top_p, seed=sd, use_cache=use_cache,
                         trace=keep_tensors, stop_ids=g.stop_ids) for s, sd in zip(settings_list, seeds)]


def generation_slot(use_cache: bool):
    """A heavy slot for a session's own generation loop; none for batched rows (the batcher
    bounds them, and its steps are shared)."""
    return contextlib.nullcontext() if use_cache and server.settings().batching else heavy.slot("generation")


def run_all(g: GenPage, settings_list: list, seeds: list, keep_tensors: bool, use_cache: bool, slots: list,
            out: dict) -> None:
    """Generate each (settings, seed) into `out` (a session_state dict), timing the whole run."""
    runs = start_runs(g, settings_list, seeds, keep_tensors, use_cache)
    start = time.perf_counter()
    out.update(settings=settings_list, seeds=seeds, use_cache=use_cache, prompt_ids=g.info.ids, samples=[],
               seconds=0.0, done=False, model=g.model)
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
    charts.show(sampling_figs.next_token_figure(breakdown(r.logits, settings=settings_used), ids, pieces,
                                                f"Step {i}: the distribution '{drawn}' was drawn from",
                                                chosen=r.token_id), key="gen.step_chart")
    q = r.attn.shape[-1] - 1  # the query that predicted this token: the position before it
    fig, hidden = sampling_figs.step_attention_figure(
        r.attn, token_labels(tok, seq[:q + 1]), WINDOW,
        f"Step {i}: where the last position (·{q}, '{sampling_figs.esc(tok.display_piece(seq[q]))}') looked, "
        "every layer and head")
    charts.show(fig, key="gen.attn")
    if hidden is not None:
        st.caption(f"Showing the last {WINDOW} keys; averaged over heads, {hidden:.1%} of the attention "
                   f"went to the {q + 1 - WINDOW} earlier positions.")
    with torch.inference_mode():  # one position through the final norm and unembedding: cheap
        lens = decode_streams(lm.model, r.resid[:, None], k=5, keep_probs=False,
                              n_words=min(tok.vocab_size, lm.config.vocab_size))
    top_ids = lens.top_ids[:, 0].cpu()
    charts.show(sampling_figs.step_lens_figure(top_ids, lens.top_probs[:, 0].float().cpu(), lens.labels,
                                               [tok.display_pieces(row.tolist()) for row in top_ids], r.token_id,
                                               f"Step {i}: logit lens, what each layer would predict "
                                               f"(bold = '{drawn}', the token drawn)"), key="gen.lens")


def compare(g: GenPage) -> None:
    """Two temperatures on the same seed: why low T repeats itself and high T rambles."""
    st.header("Compare two temperatures (same seed, same top-k / top-p)")
    c = st.columns([3, 3, 1])
    t_left = c[0].select_slider("Left temperature", sampling_figs.TEMPERATURES, format_func=sampling_figs.temperature_label,
                                **links.keep("cmp.t_left"))
    t_right = c[1].select_slider("Right temperature", sampling_figs.TEMPERATURES, format_func=sampling_figs.temperature_label,
                                 **links.keep("cmp.t_right"))
    clicked = c[2].button("Compare", key="cmp.run", type="primary")
    cols = st.columns(2)
    slots = [col.empty() for col in cols]
    if clicked:
        st.session_state["cmp.last"] = {}
        pair = [SamplingSettings(t, g.settings.top_k, g.settings.top_p) for t in (t_left, t_right)]
        with contextlib.nullcontext() if server.settings().batching else heavy.slot("the temperature comparison"):
            run_all(g, pair, [g.seed, g.seed], False, True, slots, st.session_state["cmp.last"])
    run = st.session_state.get("cmp.last")
    if not usable(g, run):
        st.info("Press **Compare** to generate with both temperatures from the same seed.")
        return
    show_texts(g, run, slots)
    series = {}
    for col, s, recs in zip(cols, run["settings"], run["samples"]):
        name = f"T = {sampling_figs.temperature_label(s.temperature)}"
        series[name] = (np.array([x.prob_original for x in recs]), np.exp([x.entropy_after for x in recs]))
        share = sampling_figs.repeated_ngram_share([x.token_id for x in recs])
        col.markdown(f"**{name}** · repeated 3-token sequences: **{share:.0%}** · median model p of the chosen "
                     f"tokens: **{np.median(series[name][0]):.3f}** · median tokens in play: "
                     f"**{np.median(series[name][1]):,.1f}**")
    g = st.columns(2)
    charts.show(sampling_figs.compare_figure({k: v[0] for k, v in series.items()},
                                             "How likely the model found each chosen token (T = 1)",
                                             "model probability", log=True), key="cmp.prob", where=g[0])
    charts.show(sampling_figs.compare_figure({k: v[1] for k, v in series.items()}, "Tokens really in play at each step",
                                             "effective choices (e^entropy)", log=True), key="cmp.entropy", where=g[1])
    st.caption("Low T puts almost all probability on the top token (about one choice in play), so the text "
               "follows the model's favourite path and tends to fall into loops (repeated 3-token sequences). "
               "High T spreads the probability over hundreds of tokens, so it often picks tokens the model "
               "itself found unlikely (low points on the left chart): the text wanders off.")


def cache_speed(g: GenPage) -> None:
    """The same generation with and without the KV cache, timed."""
    st.header("KV cache: measured speed")
    if st.button("Time this generation with and without the cache", key="gen.cache_bench"):
        speeds = {}
        for flag in (True, False):
            with heavy.slot("the KV-cache timing"), st.spinner(f"Generating {g.max_new} tokens {'with' if flag else 'without'} the cache…"):
                start = time.perf_counter()
                steps = list(tfm.generate(g.lm, g.prompt, g.max_new, g.settings.temperature, g.settings.top_k,
                                          g.settings.top_p, seed=g.seed, use_cache=flag, stop_ids=g.stop_ids))
            speeds[flag] = (len(steps) / (time.perf_counter() - start), [x.token_id for x in steps])
        st.session_state["gen.cache_speed"] = dict(speeds, model=g.model)
    sp = st.session_state.get("gen.cache_speed")
    if not sp or sp["model"] != g.model:
        return
    k = st.columns(3)
    k[0].metric("With KV cache", f"{sp[True][0]:.1f} tokens/s")
    k[1].metric("Without (re-run the prefix)", f"{sp[False][0]:.1f} tokens/s")
    k[2].metric("Speed-up", f"{sp[True][0] / sp[False][0]:.2f}×")
    same = "the same tokens" if sp[True][1] == sp[False][1] else "DIFFERENT tokens"
    st.caption(f"{len(sp[True][1])} tokens each, {same}. The cache saves more the longer the sequence: "
               "without it every step re-reads the whole prefix.")
