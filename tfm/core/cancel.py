"""Stopping a long computation whose result nobody waits for any more.

A caller passes `should_stop`, a callable answering "has whoever asked stopped waiting?" (None:
never), to a long loop (`tfm.generate`, `steering.steered_pair` / `sweep`, `head_table`, the logit
lens, `GPT.hidden` between blocks, a batcher's row). The loop asks it between steps and raises
`Cancelled`; nothing half made is returned. The app builds `should_stop` from Streamlit's script
run (`ui/stop.py`); the engine never knows who asks. It is asked from the thread running the
loop (the batcher's own thread for its rows), often: it must be cheap and must not block.

    try:
        text = steered_pair(lm, prompt, vec, 2.0, should_stop=lambda: clicked_again.is_set())
    except Cancelled:
        ...   # the page that asked is gone: nothing to show
"""

from __future__ import annotations

from collections.abc import Callable

ShouldStop = Callable[[], bool] | None


class Cancelled(Exception):
    """Raised by a loop whose `should_stop()` said yes: its result is no longer wanted."""


def check(should_stop: ShouldStop, what: str = "the computation") -> None:
    """Raise Cancelled if `should_stop` (a callable or None) says to stop now."""
    if should_stop is not None and should_stop():
        raise Cancelled(f"{what} was stopped: nobody waits for its result any more")
