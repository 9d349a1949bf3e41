"""The Tour's controls: the token, block and head it follows and the step it shows, from a
shared link and the widgets (`ui.views.tour.TourView`), and its steps (`tfm.teach.tour.tour`)
on the sidebar's prompt with the Next-token page's sampling settings."""

from __future__ import annotations

import streamlit as st

from tfm.generation.sampling import SamplingSettings
from tfm.teach.checks import grade
from tfm.teach.tour import Focus, TourStep, tour
from tfm.viz import tour as tour_figs
from ui import links
from ui.run import PromptRun
from ui.text import message, plain
from ui.views.tour import TourView

__all__ = ["controls", "grade"]  # grade: a check's answer, for the page


def _from_link(run: PromptRun) -> None:
    """Settings from a shared link first, clamped to this model and prompt."""
    cfg, n = run.lm.config, len(run.ids)
    links.restore("tour.pos", "tour.layer", "tour.head", "tour.step", "next.temperature", "next.top_k", "next.top_p")
    links.url_init("tour.present", "present", lambda v: v in ("1", "true", "True"))
    links.url_init("tour.step", "step")
    for key, param in (("tour.pos", "pos"), ("tour.layer", "layer"), ("tour.head", "head")):
        links.url_init(key, param, int)
    for key, top, default, what in (
        ("tour.pos", n - 1, n - 1, "Position"),
        ("tour.layer", cfg.n_layer - 1, 0, "Block"),
        ("tour.head", cfg.n_head - 1, 0, "Head"),
    ):
        links.clamp_int(key, 0, top, default, what)


def _steps(run: PromptRun, pos: int, layer: int, head: int, seed: int) -> list[TourStep]:
    """The tour of this focus, sampled with the Next-token page's settings (a bad one stops the page)."""
    ss = st.session_state
    try:
        settings = SamplingSettings(
            ss.get("next.temperature", 1.0), int(ss.get("next.top_k", 0)), float(ss.get("next.top_p", 1.0))
        )
    except (TypeError, ValueError) as e:
        st.error(f"The sampling settings from the Next-token page cannot be used: {message(e)}")
        st.stop()
    return tour(run.lm, run.trace, run.ids, run.labels, Focus(pos, layer, head), settings, seed)


def _move(keys: list[str], delta: int) -> None:
    """Button callback: go to the previous or next step (runs before the widgets are drawn)."""
    i = keys.index(st.session_state["tour.step"])
    st.session_state["tour.step"] = keys[min(max(i + delta, 0), len(keys) - 1)]
    links.remember("tour.step")


def _step_picker(steps: list[TourStep]) -> str:
    """◀ the step ▶ (an unknown step, a link's, is said and replaced by the first)."""
    ss, keys = st.session_state, [s.key for s in steps]
    if ss.get("tour.step") not in keys:
        if "tour.step" in ss:
            st.warning(f"There is no step {plain(repr(ss['tour.step']))}; starting at the first.")
        ss["tour.step"] = keys[0]
    i = keys.index(ss["tour.step"])
    b1, b2, b3 = st.columns([1, 4, 1], vertical_alignment="bottom")
    b1.button(
        "◀ Previous",
        key="tour.prev",
        on_click=_move,
        args=(keys, -1),
        shortcut="Left",
        disabled=i == 0,
        use_container_width=True,
    )
    b2.selectbox(
        "Step",
        keys,
        format_func=lambda k: f"{keys.index(k) + 1} / {len(keys)} · {steps[keys.index(k)].title}",
        **links.keep("tour.step"),
        label_visibility="collapsed",
    )
    b3.button(
        "Next ▶",
        key="tour.next",
        on_click=_move,
        args=(keys, 1),
        shortcut="Right",
        disabled=i == len(keys) - 1,
        use_container_width=True,
    )
    return ss["tour.step"]


def controls(run: PromptRun, seed: int) -> tuple[TourView, list[TourStep]]:
    """The page's view from the link and its widgets (in the link again), and the steps it walks."""
    cfg, n = run.lm.config, len(run.ids)
    _from_link(run)
    present = st.toggle(
        "Presentation mode",
        key="tour.present",
        help="Large type, no sidebar, one step per screen. ← and → move between steps.",
    )
    st.markdown(tour_figs.TABLE_CSS + (tour_figs.PRESENT_CSS if present else ""), unsafe_allow_html=True)
    if not present:
        st.title("A tour of one forward pass")
        st.caption(
            "From text to the next token, with the real numbers of the model in the sidebar. "
            "Pick the token to follow, and which block and head to open up."
        )
    box = st.expander("Token, block and head", expanded=not present)
    c1, c2, c3 = box.columns(3)
    pos = c1.selectbox("Follow the token at", range(n), format_func=lambda i: run.labels[i], **links.keep("tour.pos"))
    layer = c2.selectbox("Block", range(cfg.n_layer), **links.keep("tour.layer"))
    head = c3.selectbox("Head", range(cfg.n_head), **links.keep("tour.head"))
    steps = _steps(run, pos, layer, head, seed)
    view = TourView(_step_picker(steps), pos, layer, head, bool(present))
    links.url_set(**view.link(), defaults=TourView(steps[0].key, n - 1, 0, 0, False).link())  # what a bare link opens
    return view, steps
