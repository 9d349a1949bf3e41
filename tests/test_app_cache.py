"""The app's byte-bounded caches (services/memory.py, ui/models.py, ui/cache.py): budgets, LRU order, recomputation,
concurrent sessions, eager traces for short prompts and lazy ones above the server's
`eager_trace_bytes`. Traces come from a small random GPT run by `ui.cache.run_traced` itself and
are compared with a fresh traced forward of the same ids."""

from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from tfm.core import cancel
from tfm.core.config import ModelConfig
from tfm.core.lazy import LazyTrace, prefer_lazy
from tfm.core.trace import estimate_trace_bytes
from ui import cache, models
from services import memory, server

CFG = ModelConfig.preset("tiny").replace(context_length=96)
SPEC = models.random_spec(CFG, seed=3)


@pytest.fixture(autouse=True)
def clean():
    models.clear_caches()
    server.configure(None)
    yield
    models.clear_caches()
    server.configure(None)


def eager_up_to(nbytes: int, **limits) -> None:
    """Serve with eager traces only for prompts whose whole trace is at most `nbytes` (1: all lazy)."""
    s = server.settings()
    server.configure(dataclasses.replace(s, limits=s.limits.replace(eager_trace_bytes=nbytes, **limits)))


def prompt(i: int, n: int = 48) -> tuple[int, ...]:
    g = torch.Generator().manual_seed(i)
    return tuple(torch.randint(0, CFG.vocab_size, (n,), generator=g).tolist())


def fresh(ids) -> torch.Tensor:
    """Layer 0's pattern from a new traced forward (the oracle for cached values)."""
    lm = models.load_lm(SPEC, "cpu")
    with torch.inference_mode():
        return lm.model(torch.tensor([ids]), trace=True).trace.pattern(0)


def test_parse_bytes_units_and_errors():
    assert memory.parse_bytes("6GB") == 6 * 10**9
    assert memory.parse_bytes("512 MiB") == 512 * 2**20
    assert memory.parse_bytes("2.5gb") == 2_500_000_000
    assert memory.parse_bytes("1000") == 1000
    for bad in ("", "six GB", "5 parsecs", "0", "-3GB"):
        with pytest.raises(ValueError, match="TFM_MEMORY_BUDGET"):
            memory.parse_bytes(bad)


def test_budget_from_environment_or_a_share_of_ram():
    assert memory.memory_budget({"TFM_MEMORY_BUDGET": "3GB"}) == 3 * 10**9
    assert memory.memory_budget({}) == int(memory.total_ram() * memory.DEFAULT_SHARE)
    assert 0 < memory.memory_budget({}) < memory.total_ram()


def test_lru_drops_least_recently_used_first():
    lru = memory.ByteLRU(lambda: 3000)
    for k in "abc":
        lru.get(k, lambda: torch.zeros(250))  # 1000 bytes each
    lru.get("a", lambda: pytest.fail("a is cached"))  # a is now the most recent
    lru.get("d", lambda: torch.zeros(250))
    assert lru.keys() == ["c", "a", "d"]  # b was the least recently used
    assert lru.nbytes == 3000


def test_value_larger_than_the_budget_is_served_then_dropped():
    lru = memory.ByteLRU(lambda: 100)
    big = lru.get("big", lambda: torch.zeros(1000))
    assert big.numel() == 1000 and lru.keys() == ["big"]
    lru.get("small", lambda: torch.zeros(10))
    assert lru.keys() == ["small"]


def test_growing_values_are_remeasured():
    lru = memory.ByteLRU(lambda: 3000)
    grows = lru.get("grows", dict)
    lru.get("other", lambda: torch.zeros(250))
    grows["x"] = torch.zeros(600)  # a lazy entry materialising: 2400 bytes more
    lru.touch()
    assert lru.keys() == ["other"]


class _Grows:
    """A value that reports its own bytes, as a lazy trace does."""

    def __init__(self):
        self.nbytes = 0


def test_live_values_are_remeasured_at_each_insertion_static_ones_once(monkeypatch):
    lru, seen = memory.ByteLRU(lambda: 3000), []
    real = memory.measure
    monkeypatch.setattr(memory, "measure", lambda v: seen.append(type(v).__name__) or real(v))
    static = lru.get("static", lambda: [torch.zeros(250), {"t": torch.zeros(10)}])
    grows = lru.get("grows", _Grows)
    assert lru.sizes() == {"static": 1040, "grows": 0}
    grows.nbytes = 2500  # it materialised entries: the next insertion sees it, without touch()
    lru.get("other", lambda: torch.zeros(100))
    assert lru.keys() == ["grows", "other"] and static is not None
    assert seen.count("list") == 1  # the static value was walked once, when it came in


def test_failed_computation_is_not_cached():
    lru = memory.ByteLRU(lambda: 10**6)
    with pytest.raises(ValueError):
        lru.get("k", lambda: (_ for _ in ()).throw(ValueError("bad")))
    assert lru.get("k", lambda: 5) == 5


def test_traces_stay_under_the_budget_across_many_prompts(monkeypatch):
    one = memory.sizeof(cache.run_traced(SPEC, "cpu", prompt(0)))
    model_bytes = models.MODELS.nbytes
    monkeypatch.setenv(memory.BUDGET_ENV, str(model_bytes + 3 * one))
    models.PROMPTS.clear()
    for i in range(12):
        cache.run_traced(SPEC, "cpu", prompt(i))
        assert models.PROMPTS.nbytes <= 3 * one
        assert models.PROMPTS.nbytes + models.MODELS.nbytes <= memory.memory_budget()
    assert len(models.PROMPTS) == 3
    assert [k[3] for k in models.PROMPTS.keys()] == [prompt(i) for i in (9, 10, 11)]


def test_short_prompts_are_traced_eagerly_long_ones_lazily():
    ids = prompt(0)
    size = estimate_trace_bytes(CFG, len(ids))
    assert size < server.limits().eager_trace_bytes  # the default: a short prompt is traced eagerly
    eager = cache.run_traced(SPEC, "cpu", ids)
    assert not isinstance(eager, LazyTrace)
    for nbytes, limits, lazy in ((size, {}, False), (size - 1, {}, True), (10**9, {"max_trace_bytes": size - 1}, True)):
        eager_up_to(nbytes, **limits)  # just fits / just over / under the trace limit itself
        models.PROMPTS.clear()
        tr = cache.run_traced(SPEC, "cpu", ids)
        assert isinstance(tr, LazyTrace) == lazy, (nbytes, limits)
        for name in eager:
            assert torch.equal(tr[name], eager[name]), name
    with pytest.raises(ValueError, match="eager_bytes"):
        prefer_lazy(CFG, 8, -1)


def test_reading_lazy_entries_counts_against_the_budget(monkeypatch):
    eager_up_to(1)  # every trace lazy
    ids = prompt(0)
    tr = cache.run_traced(SPEC, "cpu", ids)
    before = memory.sizeof(tr)
    monkeypatch.setenv(memory.BUDGET_ENV, str(models.MODELS.nbytes + 2 * before + 1))
    cache.run_traced(SPEC, "cpu", prompt(1))
    assert len(models.PROMPTS) == 2
    for name in tr:  # materialise every lazy entry of the first (least recently used) trace
        tr[name]
    assert memory.sizeof(tr) > before
    models.PROMPTS.touch()
    assert [k[3] for k in models.PROMPTS.keys()] == [prompt(1)]


def test_dropped_trace_recomputes_to_identical_values(monkeypatch):
    ids = prompt(5)
    first = cache.run_traced(SPEC, "cpu", ids).pattern(1).clone()
    monkeypatch.setenv(memory.BUDGET_ENV, "1")  # everything but the newest value is dropped
    cache.run_traced(SPEC, "cpu", prompt(6))
    assert not cache.is_cached("trace", SPEC, "cpu", ids)
    again = cache.run_traced(SPEC, "cpu", ids).pattern(1)
    assert torch.equal(first, again)


def test_concurrent_sessions_get_their_own_prompt():
    prompts = [prompt(i, n=40 + i) for i in range(6)]
    results: dict[int, torch.Tensor] = {}

    def session(i: int) -> None:
        results[i] = cache.run_traced(SPEC, "cpu", prompts[i]).pattern(0).clone()

    threads = [threading.Thread(target=session, args=(i,)) for i in range(len(prompts)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, ids in enumerate(prompts):
        torch.testing.assert_close(results[i], fresh(ids), rtol=0, atol=1e-6)


def test_same_key_is_computed_once_under_concurrency():
    lru, calls, gate = memory.ByteLRU(lambda: 10**6), [], threading.Event()

    def compute():
        calls.append(1)
        gate.wait(5)
        return torch.zeros(4)

    threads = [threading.Thread(target=lru.get, args=("k", compute)) for _ in range(4)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert len(calls) == 1


def test_models_are_bounded_by_parameter_bytes(monkeypatch):
    small = models.random_spec(ModelConfig.preset("tiny"), seed=0)
    lm = models.load_lm(small, "cpu")
    size = sum(p.numel() * p.element_size() for p in (*lm.model.parameters(), *lm.model.buffers()))
    assert models.MODELS.nbytes == size
    monkeypatch.setenv(memory.BUDGET_ENV, str(size + 1))
    models.load_lm(models.random_spec(ModelConfig.preset("tiny"), seed=1), "cpu")
    assert (small, "cpu") not in models.MODELS and len(models.MODELS) == 1


def test_dropping_a_model_drops_its_traces(monkeypatch):
    """A lazy trace holds its model to recompute blocks: the model's memory is only freed when
    its traces go too."""
    eager_up_to(1)  # every trace lazy
    cache.run_traced(SPEC, "cpu", prompt(0))
    cache.derived("test.n", lambda lm, ids: len(ids), SPEC, "cpu", prompt(0))
    other = models.random_spec(CFG, seed=4)
    cache.run_traced(other, "cpu", prompt(0))
    size = models.MODELS.sizes()[(SPEC, "cpu")]
    monkeypatch.setenv(memory.BUDGET_ENV, str(size + 1))  # room for one model
    models.load_lm(other, "cpu")
    models.MODELS.touch()
    assert (SPEC, "cpu") not in models.MODELS
    assert [k[1] for k in models.PROMPTS.keys()] == [other]


FREED_CHILD = """
import psutil, torch
from services import memory
me = psutil.Process()
big = torch.ones(30 << 18)     # 30 MB, mapped on its own; freeing it raises glibc's mmap threshold
del big
base = me.memory_info().rss
parts = [torch.ones(1 << 20) for _ in range(100)]   # 100 x 4 MB, now from the heap
pin = torch.ones(1 << 20)                            # above them: free() alone trims nothing below
grown = me.memory_info().rss - base
del parts
released = memory.release_freed()
print(grown, released, me.memory_info().rss - base, float(pin.sum()))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's; other allocators have none")
def test_freed_tensors_go_back_to_the_os_after_release_freed():
    """A dropped re-quantized copy (hundreds of few-MB matrices) stayed in glibc's arenas: the server
    kept ~450 MB it no longer used. `memory.release_freed` hands such pages back. Measured in a fresh
    interpreter: a long-lived test worker's heap already holds freed pages that absorb the 400 MB."""
    out = subprocess.run(
        [sys.executable, "-c", FREED_CHILD],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        cwd=Path(__file__).resolve().parents[1],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    grown, released, kept, pinned = out.stdout.split()
    assert float(grown) > 350e6
    assert released == "True"
    assert float(kept) < 50e6, "the freed 400 MB stayed resident"
    assert float(pinned) == 1 << 20


class Waiter:
    """One caller's should_stop: yes once `left` is set (its page moved on); `asked` is set the
    first time it is asked (the caller is waiting)."""

    def __init__(self) -> None:
        self.left, self.asked = threading.Event(), threading.Event()

    def __call__(self) -> bool:
        self.asked.set()
        return self.left.is_set()


def counted(steps: list, began: threading.Event, go: threading.Event, n: int = 30):
    """A computation of n steps asking its stop() before each; it starts once `go` is set."""

    def compute(stop):
        began.set()
        go.wait(10)
        for i in range(n):
            cancel.check(stop)
            steps.append(i)
            time.sleep(0.01)
        return torch.arange(n)

    return compute


def call(fn, *args) -> tuple[threading.Thread, list]:
    """fn(*args) in a thread (a session): its value or its Cancelled in the returned list."""
    out = []

    def run():
        try:
            out.append(fn(*args))
        except cancel.Cancelled as e:
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    return t, out


def two_callers(lru, steps: list, go: threading.Event):
    """A computes "k"; B asks for it while A computes and waits (its own compute must not run)."""
    a, b, began = Waiter(), Waiter(), threading.Event()
    ta, out_a = call(lru.get, "k", counted(steps, began, go), a)
    assert began.wait(10)
    tb, out_b = call(lru.get, "k", lambda stop: pytest.fail("B computed too"), b)
    assert b.asked.wait(10)
    return (a, ta, out_a), (b, tb, out_b)


def test_a_shared_computation_goes_on_while_another_session_still_waits_for_it():
    lru, steps, go = memory.ByteLRU(lambda: 10**6), [], threading.Event()
    (a, ta, out_a), (b, tb, out_b) = two_callers(lru, steps, go)
    a.left.set()  # the session that computes moved on (a click); B still waits
    go.set()
    ta.join(10), tb.join(10)
    assert len(steps) == 30 and torch.equal(out_a[0], torch.arange(30)) and out_b[0] is out_a[0]
    assert "k" in lru


def test_a_computation_nobody_waits_for_stops_and_caches_nothing():
    lru, steps, go = memory.ByteLRU(lambda: 10**6), [], threading.Event()
    (a, ta, out_a), (b, tb, out_b) = two_callers(lru, steps, go)
    go.set()
    while len(steps) < 5:
        time.sleep(0.005)
    a.left.set(), b.left.set()
    ta.join(10), tb.join(10)
    assert isinstance(out_a[0], cancel.Cancelled) and isinstance(out_b[0], cancel.Cancelled)
    assert 5 <= len(steps) < 15  # stopped within a step or two, not at its 30th
    assert "k" not in lru and lru.get("k", lambda: 5) == 5  # no partial entry: the next caller computes


def test_a_session_that_stops_waiting_leaves_while_the_computation_goes_on_for_another():
    lru, steps, go = memory.ByteLRU(lambda: 10**6), [], threading.Event()
    (a, ta, out_a), (b, tb, out_b) = two_callers(lru, steps, go)
    b.left.set()
    tb.join(10)  # B leaves while A's computation has not even started
    assert not tb.is_alive() and isinstance(out_b[0], cancel.Cancelled) and not steps
    go.set()
    ta.join(10)
    assert len(steps) == 30 and torch.equal(lru.get("k", lambda: None), torch.arange(30))


def test_a_lazy_trace_never_computes_every_position_s_logits(monkeypatch):
    """The forward behind a lazy trace unembeds the last position only (a (T, V) product is 1 GB
    for Gemma 3 at 1,024 tokens); any other row is computed when read, equal to the full forward's."""
    from tfm.core import lazy as lazy_mod

    eager_up_to(1)  # every trace lazy
    rows, real = [], lazy_mod.head_logits
    monkeypatch.setattr(lazy_mod, "head_logits", lambda model, x: rows.append(x.shape[1]) or real(model, x))
    ids = prompt(2)
    tr = cache.run_traced(SPEC, "cpu", ids)
    assert isinstance(tr, LazyTrace) and rows == [1]
    lm = models.load_lm(SPEC, "cpu")
    with torch.inference_mode():
        full = lm.model(torch.tensor([ids])).logits[0]  # (T, V)
    for pos in (0, 17, len(ids) - 1):
        torch.testing.assert_close(tr.logits_at(pos), full[pos], atol=1e-5, rtol=0)
    assert tr["logits"].shape == full[None].shape
