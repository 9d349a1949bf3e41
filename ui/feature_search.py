"""The Features page's search box: features found by a word or a token in their label, their
top tokens or the token they say (`tfm.analysis.dictionaries.labels`); a match opens on a click."""

from __future__ import annotations

import streamlit as st

from tfm.analysis.dictionaries.labels import MAX_QUERY
from tfm.viz import features as feature_figs
from ui.text import message, plain

MAX_SHOWN = 50


def _open(match_key: str, target_key: str) -> None:
    match = st.session_state.get(match_key)
    if isinstance(match, int):
        st.session_state[target_key] = match


def box(key: str, prompt: str, search, table, named, target_key: str) -> None:
    """A search box (widget keys `key`.search, .found, .match, .open): `search(query, limit)` finds
    matches, `table(matches)` lists them, `named(match)` names one in the picker, and Open puts the
    picked one into session state `target_key` (the page's own picker)."""
    query = st.text_input(prompt, key=f"{key}.search", max_chars=MAX_QUERY, placeholder="e.g. Paris, the, def")
    if not query.strip():
        return
    try:
        found = search(query, MAX_SHOWN)
    except ValueError as e:
        st.warning(message(e))
        return
    if not found:
        st.info(f"No feature's label or top tokens match {plain(query)}.")
        return
    st.dataframe(table(found), hide_index=True, height=min(300, 36 * len(found) + 40), key=f"{key}.found")
    c1, c2 = st.columns([3, 1])
    c1.selectbox(
        f"{len(found)} match(es){' (the first 50)' if len(found) == MAX_SHOWN else ''}: open one",
        found,
        format_func=named,
        key=f"{key}.match",
    )
    c2.button("Open", key=f"{key}.open", on_click=_open, args=(f"{key}.match", target_key))


def render(fs) -> None:
    """The Features page's box and its matches (nothing when the SAE ships no labels)."""
    if fs.labels is None:
        return
    box(
        "features",
        "Search features by a word or a token (label, top tokens, the token it says)",
        fs.labels.search,
        lambda found: feature_figs.search_table(
            found, [fs.label(f) for f in found], [float(fs.data["freq"][f]) for f in found]
        ),
        fs.named,
        "features.feature",
    )


def check_note(fs, feature: int) -> str:
    """What the steering check said about a "says X" label ("" for other labels)."""
    check = fs.labels.features[feature].check if fs.labels is not None else None
    if check is None:
        return ""
    return (
        " (checked: steering with it at strength 1 raises that token's probability after each neutral prompt)"
        if check
        else " (its steering check failed: at strength 1 it does not raise that token's probability "
        "after every neutral prompt)"
    )


def held_out(fs) -> str:
    """The held-out text the contexts come from, in words."""
    return fs.card["eval_file"].rsplit("/", 1)[-1]


def domain_note(card: dict) -> str:
    """ " Per held-out domain: books 95.1%, ..." for an SAE measured on the text mix, else ""."""
    per = card.get("domain_metrics")
    if not isinstance(per, dict) or not per:
        return ""
    parts = [
        f"{plain(d, 20)} {100 * float(m['ce_recovered']):.1f}% (L0 {float(m['l0']):.0f}, FVU {float(m['fvu']):.3f})"
        for d, m in per.items()
    ]
    return " CE loss recovered per held-out domain: " + ", ".join(parts) + "."
