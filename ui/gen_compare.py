"""The generation page's comparisons: two temperatures on the same seed, and the same generation
timed with and without the KV cache. The runs stream through `ui.gen_views` like the page's own."""

from __future__ import annotations

import contextlib
import time

import numpy as np
import streamlit as st

import tfm
from tfm.generation.sampling import SamplingSettings
from tfm.viz import sampling as sampling_figs
from ui import charts, heavy, links
from services import server
from ui.gen_views import GenPage, run_all, show_texts, usable

WHY = (
    "Low T puts almost all probability on the top token (about one choice in play), so the text "
    "follows the model's favourite path and tends to fall into loops (repeated 3-token sequences). "
    "High T spreads the probability over hundreds of tokens, so it often picks tokens the model "
    "itself found unlikely (low points on the left chart): the text wanders off."
)


def compare(g: GenPage) -> None:
    """Two temperatures on the same seed: why low T repeats itself and high T rambles."""
    st.header("Compare two temperatures (same seed, same top-k / top-p)")
    c = st.columns([3, 3, 1])
    t_left = c[0].select_slider(
        "Left temperature",
        sampling_figs.TEMPERATURES,
        format_func=sampling_figs.temperature_label,
        **links.keep("cmp.t_left"),
    )
    t_right = c[1].select_slider(
        "Right temperature",
        sampling_figs.TEMPERATURES,
        format_func=sampling_figs.temperature_label,
        **links.keep("cmp.t_right"),
    )
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
    _compare_charts(cols, run)


def _compare_charts(cols, run: dict) -> None:
    """Each temperature's repeats and the two charts: how likely each chosen token was, tokens in play."""
    series = {}
    for col, s, recs in zip(cols, run["settings"], run["samples"]):
        name = f"T = {sampling_figs.temperature_label(s.temperature)}"
        series[name] = (np.array([x.prob_original for x in recs]), np.exp([x.entropy_after for x in recs]))
        share = sampling_figs.repeated_ngram_share([x.token_id for x in recs])
        col.markdown(
            f"**{name}** · repeated 3-token sequences: **{share:.0%}** · median model p of the chosen "
            f"tokens: **{np.median(series[name][0]):.3f}** · median tokens in play: "
            f"**{np.median(series[name][1]):,.1f}**"
        )
    g = st.columns(2)
    charts.show(
        sampling_figs.compare_figure(
            {k: v[0] for k, v in series.items()},
            "How likely the model found each chosen token (T = 1)",
            "model probability",
            log=True,
        ),
        key="cmp.prob",
        where=g[0],
    )
    charts.show(
        sampling_figs.compare_figure(
            {k: v[1] for k, v in series.items()},
            "Tokens really in play at each step",
            "effective choices (e^entropy)",
            log=True,
        ),
        key="cmp.entropy",
        where=g[1],
    )
    st.caption(WHY)


def cache_speed(g: GenPage) -> None:
    """The same generation with and without the KV cache, timed."""
    st.header("KV cache: measured speed")
    if st.button("Time this generation with and without the cache", key="gen.cache_bench"):
        speeds = {}
        for flag in (True, False):
            with (
                heavy.slot("the KV-cache timing"),
                st.spinner(f"Generating {g.max_new} tokens {'with' if flag else 'without'} the cache…"),
            ):
                start = time.perf_counter()
                steps = list(
                    tfm.generate(
                        g.lm,
                        g.prompt,
                        g.max_new,
                        g.settings.temperature,
                        g.settings.top_k,
                        g.settings.top_p,
                        seed=g.seed,
                        use_cache=flag,
                        stop_ids=g.stop_ids,
                    )
                )
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
    st.caption(
        f"{len(sp[True][1])} tokens each, {same}. The cache saves more the longer the sequence: "
        "without it every step re-reads the whole prefix."
    )
