"""Has this page run stopped waiting? The `should_stop` (tfm.core.cancel) of a Streamlit script run.

A widget change starts a new run of the page at once (Streamlit's `runner.fastReruns`, on by
default) and asks the old run to STOP; with fastReruns off it asks for a RERUN. Either way the
old run only ends at its next `st.*` call, which a torch loop inside a cached computation never
reaches: twelve clicks along a slider kept twelve generations running to their ends. Each run's
`ScriptRequests` (its context's `script_requests`) holds what was asked; `asked_to_stop` reads it
as `ScriptRequests.on_scriptrunner_yield` decides whether to interrupt, without consuming the
request (ui.st_private.asked_to_stop: Streamlit's internals, fenced there). tests/app/test_stopping.py
checks this against streamlit's own class, so a streamlit upgrade that renames it fails there.
"""

from __future__ import annotations

from functools import partial
from typing import NoReturn

import streamlit as st

from tfm.core.cancel import Cancelled, ShouldStop
from ui.st_private import asked_to_stop, run_requests

__all__ = ["asked_to_stop", "end_run", "page_stop"]


def page_stop() -> ShouldStop:
    """This script run's `should_stop` (None outside a script run: a test's or bench's thread,
    which never stops waiting)."""
    requests = run_requests()
    return None if requests is None else partial(asked_to_stop, requests)


def end_run(error: Cancelled) -> NoReturn:
    """After a Cancelled: end this run the way Streamlit would have at its next `st.*` call (that
    call raises its stop or rerun exception, so a pending rerun still runs). A run nobody asked
    to stop should never get here: then the Cancelled goes on."""
    st.empty()
    raise error
