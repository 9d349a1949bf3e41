"""Has this page run stopped waiting? The `should_stop` (tfm.core.cancel) of a Streamlit script run.

A widget change starts a new run of the page at once (Streamlit's `runner.fastReruns`, on by
default) and asks the old run to STOP; with fastReruns off it asks for a RERUN. Either way the
old run only ends at its next `st.*` call, which a torch loop inside a cached computation never
reaches: twelve clicks along a slider kept twelve generations running to their ends. Each run's
`ScriptRequests` (its context's `script_requests`) holds what was asked; `asked_to_stop` reads it
as `ScriptRequests.on_scriptrunner_yield` decides whether to interrupt, without consuming the
request (reading `_state` is what that method does without its lock too). tests/app/test_stopping.py
checks this against streamlit's own class, so a streamlit upgrade that renames it fails there.
"""
from __future__ import annotations

from functools import partial
from typing import NoReturn

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx
from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequests, ScriptRequestType

from tfm.core.cancel import Cancelled, ShouldStop


def asked_to_stop(requests: ScriptRequests) -> bool:
    """True once this run was asked to stop, or to rerun the whole page (a fragment's rerun that
    does not interrupt the page does not count)."""
    state = requests._state
    if state is ScriptRequestType.STOP:
        return True
    if state is not ScriptRequestType.RERUN:
        return False
    data = requests._rerun_data
    return not (data.fragment_id_queue and not data.is_fragment_scoped_rerun)


def page_stop() -> ShouldStop:
    """This script run's `should_stop` (None outside a script run: a test's or bench's thread,
    which never stops waiting)."""
    ctx = get_script_run_ctx(suppress_warning=True)
    requests = None if ctx is None else ctx.script_requests
    return None if requests is None else partial(asked_to_stop, requests)


def end_run(error: Cancelled) -> NoReturn:
    """After a Cancelled: end this run the way Streamlit would have at its next `st.*` call (that
    call raises its stop or rerun exception, so a pending rerun still runs). A run nobody asked
    to stop should never get here: then the Cancelled goes on."""
    st.empty()
    raise error
