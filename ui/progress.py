"""Status lines and progress bars on the page while work of seconds runs: a long prompt on a
big model takes seconds, and a frozen page looks broken."""

from __future__ import annotations

import streamlit as st

from ui import stopping


def progress_bar(label: str):
    """A `(done, total)` callback for long loops in tfm (`progress=`): a bar on the page that
    disappears when the work is done. Once this run was asked to stop it draws nothing (an st
    call would end the shared computation that another page may still wait for)."""
    box, stopped = st.empty(), stopping.page_stop()

    def update(done: int, total: int) -> None:
        if stopped is not None and stopped():
            return
        if done >= total:
            box.empty()
        else:
            box.progress(done / total, text=f"{label}: {done} of {total}")

    return update


def with_status(label: str, cached: bool, fn, *args, **kwargs):
    """`fn(*args)`, with a status line on the page while it runs unless the result is cached."""
    if cached:
        return fn(*args, **kwargs)
    box = st.empty()
    with box.status(label, expanded=False):
        value = fn(*args, **kwargs)
    box.empty()
    return value


def fraction_bar(label: str):
    """A `(fraction, text)` callback (the attribution graph's `progress=`): a bar on the page that
    disappears at 1; like `progress_bar`, silent once this run was asked to stop."""
    box, stopped = st.empty(), stopping.page_stop()

    def update(fraction: float, text: str = "") -> None:
        if stopped is not None and stopped():
            return
        if fraction >= 1:
            box.empty()
        else:
            box.progress(min(max(float(fraction), 0.0), 1.0), text=f"{label}: {text}" if text else label)

    return update
