"""A process-wide cache bounded by bytes, and the memory budget the app keeps to.

Streamlit's `cache_resource(max_entries=...)` counts entries, but a GPT-2 trace of 1024 tokens
and one of 5 tokens differ by a factor of 10^4 in size: counting entries cannot keep a shared
server alive. `ByteLRU` measures what it holds (a value once; a value holding something that grows,
such as a lazy trace read by pages, again on every insertion) and drops the least recently used
values beyond its budget.
A dropped value is simply recomputed when asked for again. No streamlit here: `ui.models` holds the two caches.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import fields, is_dataclass

import numpy as np
import torch

from tfm.core import cancel
from tfm.core.cancel import ShouldStop


BUDGET_ENV = "TFM_MEMORY_BUDGET"
DEFAULT_SHARE = 0.5  # of the machine's RAM: the rest is for the OS, Streamlit, and work in flight
UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_bytes(text: str) -> int:
    """'6GB', '512 MiB', '2.5gb' or a plain byte count -> bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise ValueError(f"{BUDGET_ENV}={text!r}: write a size such as 6GB, 512MiB or 2000000000")
    value = int(float(m.group(1)) * UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"{BUDGET_ENV}={text!r}: the budget must be more than 0 bytes")
    return value


def total_ram() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_budget(environ: dict | None = None) -> int:
    """Bytes the app may keep cached (models + traces + derived numbers): `TFM_MEMORY_BUDGET`
    when set, else half the machine's RAM."""
    env = os.environ if environ is None else environ
    if env.get(BUDGET_ENV):
        return parse_bytes(env[BUDGET_ENV])
    return int(total_ram() * DEFAULT_SHARE)


try:
    _MALLOC_TRIM = ctypes.CDLL(None).malloc_trim  # glibc's, in the process's own C library
except (OSError, AttributeError, TypeError):  # macOS, Windows, musl: none (nor glibc's arenas)
    _MALLOC_TRIM = None


def release_freed() -> bool:
    """Hand the heap's free pages back to the OS (glibc's `malloc_trim(0)`); False where the C
    library has none. Freed tensors of a few MB stay in glibc's arenas otherwise: a dropped float
    copy of SmolLM2 (540 MB) left the server ~450 MB bigger (bench/bench_quant_memory.py)."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


def sizeof(value) -> int:
    """Bytes of tensor/array data a cached value holds: tensors' storage, `.nbytes` of arrays and
    of values that report it (traces, graph files), and the contents of dicts, lists, tuples and
    dataclasses (numbers count 0)."""
    return measure(value)[0]


def measure(value) -> tuple[int, bool]:
    """(bytes as `sizeof` counts them, live): live when some part reports its own `nbytes` (a lazy
    trace, a KV cache), which may grow as pages read it; the rest of a cached value never changes."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size(), False
    if isinstance(value, np.ndarray):
        return int(value.nbytes), False
    if isinstance(value, torch.nn.Module):
        return sum(sizeof(t) for t in (*value.parameters(), *value.buffers())), False
    nbytes = getattr(value, "nbytes", None)  # a value that knows its size: not walked (a graph file
    if isinstance(nbytes, int):  # holds ~10^5 small objects)
        return nbytes, True
    if isinstance(value, dict):
        parts = [measure(v) for v in value.values()]
    elif isinstance(value, (list, tuple)):
        parts = [measure(v) for v in value]
    elif is_dataclass(value) and not isinstance(value, type):
        parts = [measure(getattr(value, f.name)) for f in fields(value)]
    else:
        return 0, False
    return sum(n for n, _ in parts), any(live for _, live in parts)


class _Flight:
    """A key being computed: its lock (one computation per key) and the `should_stop` of each
    caller waiting for it (None: a caller that cannot stop waiting)."""

    def __init__(self) -> None:
        self.lock, self.waiting = threading.Lock(), []

    def unwanted(self) -> bool:
        """True once every caller waiting for the key has stopped waiting."""
        waiting = list(self.waiting)
        return bool(waiting) and all(w is not None and w() for w in waiting)


class ByteLRU:
    """Thread-safe least-recently-used cache bounded by the bytes its values hold.

    `get(key, compute)` returns the cached value or computes it (once per key, however many
    threads ask at the same time), then re-measures every live value (see `measure`) and drops
    the least recently used ones until the total fits `budget()`. The value just returned is never
    dropped by its own call, so one value larger than the budget is served and dropped by the next
    access.
    A computation that raises (Cancelled too) stores nothing; the next caller computes anew.
    """

    POLL_S = 0.1  # how often a caller waiting for another's computation asks its should_stop

    def __init__(self, budget: Callable[[], int], on_drop: Callable[[Hashable, object], None] | None = None) -> None:
        self._budget, self._on_drop = budget, on_drop
        self._values: OrderedDict[Hashable, object] = OrderedDict()
        # key -> (bytes, live) as last measured: walking a value of many small objects (a
        # tokenizer's vocabulary, a list of examples) on every insertion cost seconds per page
        self._sizes: dict[Hashable, tuple[int, bool]] = {}
        self._lock = threading.Lock()
        self._flights: dict[Hashable, _Flight] = {}

    def get(self, key: Hashable, compute: Callable[..., object], should_stop: ShouldStop = None):
        """The value of `key`, computed by `compute()` if missing. With `should_stop` (this
        caller's "have I stopped waiting?"), `compute(stop)` is called instead: `stop()` is True
        once EVERY caller waiting for this key has stopped waiting (a second session waiting keeps
        it going); and a caller that stops waiting for another's computation leaves with Cancelled."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
            flight = self._flights.setdefault(key, _Flight())
            flight.waiting.append(should_stop)
        try:
            return self._compute_once(key, flight, compute, should_stop)
        finally:
            with self._lock:
                flight.waiting.remove(should_stop)
                if not flight.waiting and self._flights.get(key) is flight:
                    del self._flights[key]

    def _compute_once(self, key: Hashable, flight: _Flight, compute, should_stop: ShouldStop):
        while not flight.lock.acquire(timeout=self.POLL_S if should_stop is not None else -1):
            cancel.check(should_stop, "waiting for a shared computation")
        try:  # one computation per key; others wait for it instead of repeating it
            with self._lock:
                if key in self._values:
                    self._values.move_to_end(key)
                    return self._values[key]
            cancel.check(should_stop)
            value = compute() if should_stop is None else compute(flight.unwanted)
            with self._lock:
                self._values[key], self._sizes[key] = value, measure(value)
                dropped = self._shrink(keep=key)
        finally:
            flight.lock.release()
        self._dropped(dropped)
        return value

    def touch(self) -> None:
        """Re-measure every value (one may have grown without reporting its bytes) and drop
        beyond the budget."""
        with self._lock:
            self._sizes = {k: measure(v) for k, v in self._values.items()}
            dropped = self._shrink(keep=None)
        self._dropped(dropped)

    def drop_where(self, condition: Callable[[Hashable], bool]) -> None:
        with self._lock:
            dropped = [(k, self._pop(k)) for k in list(self._values) if condition(k)]
        self._dropped(dropped)

    def _shrink(self, keep: Hashable | None) -> list[tuple[Hashable, object]]:
        """Drop oldest-first until the total fits; returns what was dropped (callbacks run
        outside the lock: they may use other caches)."""
        sizes = self._current_sizes()
        total, budget, dropped = sum(sizes.values()), self._budget(), []
        for k in list(self._values):  # oldest first
            if total <= budget:
                break
            if k != keep:
                total -= sizes[k]
                dropped.append((k, self._pop(k)))
        return dropped

    def _pop(self, key: Hashable):
        self._sizes.pop(key, None)
        return self._values.pop(key)

    def _current_sizes(self) -> dict[Hashable, int]:
        """Bytes of each value, re-measuring the live ones (cheap: they report their own)."""
        for k, (n, live) in self._sizes.items():
            if live:
                self._sizes[k] = measure(self._values[k])
        return {k: self._sizes[k][0] for k in self._values}  # least recently used first

    def _dropped(self, dropped: list[tuple[Hashable, object]]) -> None:
        if self._on_drop is not None:
            for key, value in dropped:
                self._on_drop(key, value)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(self._current_sizes().values())

    def sizes(self) -> dict:
        """Bytes of each cached value now, least recently used first."""
        with self._lock:
            return self._current_sizes()

    def keys(self) -> list:
        with self._lock:
            return list(self._values)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._sizes.clear()

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._values

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)
