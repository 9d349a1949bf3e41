"""The generation page's controls: the prompt prepared for generating, and the page's view
(`ui.views.generate.GenerateView`) from its widgets, put in range for this model and server."""

from __future__ import annotations

import streamlit as st

import tfm
from tfm.generation.generate import PromptInfo, n_words, prepare_prompt
from tfm.generation.sampling import SamplingSettings, usable_settings
from tfm.loaders.limits import check_generation
from tfm.viz import sampling as sampling_figs
from services import server
from ui import links
from ui.text import message
from ui.views.generate import GenerateView

KEYS = (
    "gen.max_new",
    "gen.temperature",
    "gen.top_k",
    "gen.top_p",
    "gen.n_samples",
    "gen.use_cache",
    "cmp.t_left",
    "cmp.t_right",
)
DEFAULTS = dict(zip(KEYS, (40, 0.8, 0, 1.0, 1, True, 0.2, 1.5)))


def prepared(lm: tfm.LM, prompt: str | tuple[int, ...]) -> PromptInfo:
    """The prompt cut to leave room to generate (`prepare_prompt`), saying so; a bad one stops the page."""
    try:
        info = prepare_prompt(lm, prompt)
    except ValueError as e:
        st.error(f"This prompt cannot be used: {message(e)}")
        st.stop()
    if info.notice:
        st.warning(f"Prompt: {message(info.notice)}.")
    return info


def room(lm: tfm.LM, info: PromptInfo) -> tuple[int, str]:
    """How many tokens may be generated after the prompt, and why no more."""
    ctx, max_new_limit = lm.config.context_length, server.limits().max_new_tokens  # long runs are slow on a CPU
    cap = max(1, min(max_new_limit, ctx - len(info.ids)))
    return cap, (
        "this server's limit"
        if cap == max_new_limit
        else f"the context holds {ctx} tokens and the prompt uses {len(info.ids)}"
    )


def _in_range(lm: tfm.LM, cap: int) -> None:
    """Remembered values (another model's, a link's) put where this model's widgets accept them."""
    ss = st.session_state
    links.restore(*KEYS)
    for key, value in DEFAULTS.items():
        ss.setdefault(key, value)
    links.put("gen.max_new", min(max(int(ss["gen.max_new"]), 1), cap))
    s0 = usable_settings(ss["gen.temperature"], ss["gen.top_k"], ss["gen.top_p"], n_words(lm))
    links.put("gen.temperature", sampling_figs.nearest_temperature(s0.temperature))
    links.put("gen.top_k", s0.top_k)
    links.put("gen.top_p", s0.top_p)
    for key in ("cmp.t_left", "cmp.t_right"):
        links.put(key, sampling_figs.nearest_temperature(ss[key]))


def controls(lm: tfm.LM, cap: int, why: str, seed: int) -> GenerateView:
    """The page's view from its row of widgets."""
    _in_range(lm, cap)
    c = st.columns([2, 4, 2, 3, 1.6, 2.4])
    max_new = c[0].number_input("New tokens", 1, cap, **links.keep("gen.max_new"), help=f"At most {cap}: {why}.")
    temperature = c[1].select_slider(
        "Temperature",
        sampling_figs.TEMPERATURES,
        format_func=sampling_figs.temperature_label,
        **links.keep("gen.temperature"),
        help="0 is greedy: always the most likely token.",
    )
    top_k = c[2].number_input("Top-k (0 = off)", 0, n_words(lm), step=1, **links.keep("gen.top_k"))
    top_p = c[3].slider("Top-p (1 = off)", 0.0, 1.0, step=0.01, **links.keep("gen.top_p"))
    n_samples = c[4].number_input(
        "Samples",
        1,
        4,
        **links.keep("gen.n_samples"),
        help="Side by side, with seeds seed, seed+1, …: how different can runs be?",
    )
    use_cache = c[5].toggle(
        "KV cache",
        **links.keep("gen.use_cache"),
        help="Reuse the keys and values of earlier positions instead of re-running the prefix.",
    )
    st.caption(
        f"At most **{cap}** new tokens here ({why}). Seed {seed} (sidebar); the same seed and "
        "settings always give the same text."
    )
    return GenerateView(int(max_new), temperature, int(top_k), float(top_p), int(n_samples), use_cache)


def sampling(view: GenerateView) -> SamplingSettings:
    """The view's sampling settings; refused (the page stops) with a word if they cannot be used."""
    try:  # widgets cannot produce bad values; anything else is still refused politely
        return SamplingSettings(view.temperature, view.top_k, view.top_p)
    except ValueError as e:
        st.error(f"These sampling settings cannot be used: {message(e)}")
        st.stop()


def allowed(lm: tfm.LM, info: PromptInfo, view: GenerateView) -> bool:
    """Whether the server's bounds allow this generation, whatever the widgets sent (else why)."""
    try:
        check_generation(lm.config, server.limits(), len(info.ids), view.max_new, view.n_samples)
        return True
    except ValueError as e:
        st.error(f"Not generated: {message(e)}.")
        return False
