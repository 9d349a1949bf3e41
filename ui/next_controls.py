"""The Next-token page's controls: where the prediction is read (`tfm.analysis.capability`), the
page's view (`ui.views.next_token.NextTokenView`) from a shared link and the widgets, made valid by
`tfm.generation.sampling`, and the breakdown it draws (`next_token`, on the cached logits)."""

from __future__ import annotations

import streamlit as st

from tfm.analysis.capability import predicted_position
from tfm.generation.generate import n_words as n_words_of
from tfm.generation.sampling import Breakdown, SamplingSettings, next_token, usable_settings
from tfm.text.wordpiece import mask_last_word
from tfm.viz import sampling as sampling_figs
from ui import links, sidebar
from ui.run import PromptRun
from ui.text import message, plain
from ui.views.next_token import NextTokenView

KEYS = ("next.temperature", "next.top_k", "next.top_p", "next.count")


def mask_last() -> None:
    """Button callback: the sidebar's prompt with its last word replaced by [MASK]."""
    sidebar.set_prompt(mask_last_word(st.session_state.get("sidebar.prompt", "")))


def position(run: PromptRun) -> int:
    """Where the prediction is read; without a [MASK] for a masked-LM model: why, a button, and a stop."""
    try:
        return predicted_position(run.lm.config, run.ids, getattr(run.lm.tokenizer, "mask_id", None))
    except ValueError as e:
        st.info(f"Fill the [MASK]: {message(e)}.")
        st.button("Mask the last word", key="next.mask", on_click=mask_last)
        st.stop()


def n_words(run: PromptRun) -> int:
    return n_words_of(run.lm)


def same_number(a, b) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError, OverflowError):
        return False


def _usable(run: PromptRun) -> None:
    """Widget values: remembered across pages, seeded from a shared link, made valid (saying what moved)."""
    ss = st.session_state
    links.restore(*KEYS)
    links.url_init("next.temperature", "t", float)
    links.url_init("next.top_k", "top_k", int)
    links.url_init("next.top_p", "top_p", float)
    raw = (ss.get("next.temperature", 1.0), ss.get("next.top_k", 0), ss.get("next.top_p", 1.0))
    try:
        s0 = usable_settings(*raw, n_words(run))
    except ValueError:
        s0 = SamplingSettings()
    for key, value in zip(KEYS, (sampling_figs.nearest_temperature(s0.temperature), s0.top_k, s0.top_p)):
        links.put(key, value)
    moved = [
        f"{name} {plain(r)} → {v:g}"
        for name, r, v in zip(
            ("temperature", "top-k", "top-p"), raw, (ss["next.temperature"], ss["next.top_k"], ss["next.top_p"])
        )
        if not same_number(r, v)
    ]
    if moved:
        st.info("Moved to what the controls offer: " + "; ".join(moved) + ".")
    ss.setdefault("next.count", 20)


def controls(run: PromptRun) -> NextTokenView:
    """The page's view from the link and its widgets (the sampling settings go back into the link)."""
    _usable(run)
    words = n_words(run)
    c1, c2, c3, c4 = st.columns([4, 2, 3, 2])
    t = c1.select_slider(
        "Temperature",
        sampling_figs.TEMPERATURES,
        format_func=sampling_figs.temperature_label,
        **links.keep("next.temperature"),
        help="Logits are divided by T before the softmax. T < 1 sharpens, T > 1 flattens; "
        "T = 0 is greedy: always the most likely token.",
    )
    k = c2.number_input(
        "Top-k (0 = off)",
        0,
        words,
        step=1,
        **links.keep("next.top_k"),
        help=f"Keep only the k most likely tokens (0 keeps all {words:,}).",
    )
    p = c3.slider(
        "Top-p (1 = off)",
        0.0,
        1.0,
        step=0.01,
        **links.keep("next.top_p"),
        help="Keep the smallest set of most likely tokens whose probability adds up to p.",
    )
    count = c4.slider("Tokens shown", 5, 60, **links.keep("next.count"))
    view, d = NextTokenView(t, k, p, count), SamplingSettings()  # d: what a link without t, top_k, top_p shows
    links.url_set(
        **view.link(),
        defaults=NextTokenView(sampling_figs.nearest_temperature(d.temperature), d.top_k, d.top_p, count).link(),
    )
    return view


def breakdown(run: PromptRun, at: int, view: NextTokenView) -> tuple[SamplingSettings, Breakdown]:
    """The view's settings and the next-token breakdown at `at`; settings that cannot be used stop the page."""
    try:  # the widgets cannot produce bad values, but settings from elsewhere are checked anyway
        settings = SamplingSettings(view.temperature, int(view.top_k), float(view.top_p))
        return settings, next_token(run.trace.logits_at(at), settings, n_words(run))
    except ValueError as e:
        st.error(f"These sampling settings cannot be used: {message(e)}")
        st.stop()
