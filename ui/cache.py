"""What is computed from a model, cached by bytes across sessions: traces, derived values, and a
small store of finished runs. Pages never build a key here: they ask the typed run
(`ui.run.PromptRun`, `ui.model_run.ModelRun`), which owns every key of what it derives, and keep
a finished run under its frozen settings (`finished(settings)`).

The trace of a prompt is computed once per (model, device, token ids) and reused by every
page and session; traces and derived values are read-only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import nullcontext

import streamlit as st
import torch

from tfm.core.cancel import Cancelled
from tfm.core.lazy import prefer_lazy
from tfm.core.trace import Trace
from services import memory, server
from ui import heavy, stopping
from ui.models import PROMPTS, load_lm
from ui.progress import with_status


def run_traced(spec: str, device: str, ids: tuple[int, ...]) -> Trace:
    """The traced forward of `ids`, moved to the CPU in float32 and shared read-only by every
    page and session. Kept while the byte budget allows; recomputed after it was dropped.
    Eager when the whole trace fits the server's `eager_trace_bytes` (and `max_trace_bytes`):
    a short prompt's pages read every block, which a lazy trace would compute a second time.
    Lazy (`tfm.core.lazy`) above that."""

    def compute() -> Trace:
        lm = load_lm(spec, device)  # before taking a slot (ui.heavy: never load while holding one)
        limits = server.limits()
        lazy = prefer_lazy(lm.config, len(ids), min(limits.eager_trace_bytes, limits.max_trace_bytes))
        with heavy.slot("a traced forward", quiet=True), torch.inference_mode():
            # lazy: no (T, V) logits in the forward (1 GB for Gemma 3 at 1,024 tokens); rows when read
            out = lm.model(torch.tensor([ids], device=lm.device), trace=True, lazy=lazy, last_only=lazy)
        return out.trace.to("cpu", torch.float32)

    return PROMPTS.get(("trace", spec, device, ids), compute)


_ALONE = threading.Lock()  # work as large as a model (`derived(..., alone=True)`): one at a time per process


def derived(name: str, fn, spec: str, device: str, *args, alone: bool = False, stoppable: bool = False):
    """Cache a pure function of the loaded model across sessions: `fn(lm, *args)`.

    `name` identifies the function (the callable itself is not hashed); `args` must be
    hashable (tuples of ids, numbers, strings). Results are shared: treat them as read-only.
    They count against the same byte budget as traces.
    `alone`: `fn` builds something the size of the model (a re-quantized copy) and keeps only a
    small result: one such computation runs in the process at a time (the others wait before
    taking a heavy slot, as a loader does), and the freed memory goes back to the OS after it.
    `stoppable`: call `fn(lm, *args, should_stop=...)` (tfm.core.cancel), which stops once no page
    waits for the result any more (every run that asked for it was superseded, or its tab closed);
    the run then ends as Streamlit ends a stopped run, and nothing is cached.
    """

    def compute(stop=None):
        lm = load_lm(spec, device)  # before taking a slot
        with _ALONE if alone else nullcontext(), heavy.slot(name, quiet=True, should_stop=stop):
            try:
                return fn(lm, *args, should_stop=stop) if stoppable else fn(lm, *args)
            finally:
                if alone:
                    memory.release_freed()

    try:
        return PROMPTS.get(("derived", spec, device, name, *args), compute, stopping.page_stop())
    except Cancelled as e:
        stopping.end_run(e)


def derived_status(
    label: str, name: str, fn, spec: str, device: str, *args, alone: bool = False, stoppable: bool = False
):
    """`derived(...)` with a status line while it computes (for work that takes seconds)."""
    return with_status(
        label,
        is_cached("derived", spec, device, name, *args),
        derived,
        name,
        fn,
        spec,
        device,
        *args,
        alone=alone,
        stoppable=stoppable,
    )


def is_cached(kind: str, *key) -> bool:
    return (kind, *key) in PROMPTS


class _Finished:
    """A small bounded store of finished runs (the oldest goes first), shared by every session."""

    def __init__(self, size: int) -> None:
        self.size, self.items, self.lock = size, OrderedDict(), threading.Lock()


@st.cache_resource
def _finished_runs() -> _Finished:
    return _Finished(8)  # a lesson run is ~1 MB (its pattern snapshots)


def finished(settings):
    """The finished run made with `settings` (a frozen, hashable settings dataclass: its type
    tells one kind of run from another), or None."""
    store = _finished_runs()
    with store.lock:
        return store.items.get(settings)


def keep_finished(settings, value) -> None:
    store = _finished_runs()
    with store.lock:
        store.items[settings] = value
        store.items.move_to_end(settings)
        while len(store.items) > store.size:
            store.items.popitem(last=False)
