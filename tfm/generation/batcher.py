"""Continuous batching: concurrent generations, from any sessions, as rows of one decode step.

    batcher = Batcher(lm, BatchConfig(max_rows=32, per_owner=4))
    gen = batcher.submit("The cat", 20, temperature=0.8, seed=1, owner=session_id)
    for step in gen:           # the same Steps, tokens and probabilities as tfm.generate
        ...
    gen.close()                # Stop: ends this row only (also when the iterator is dropped)
    batcher.submit(..., should_stop=page_gone)   # or: the batch thread asks before each step

Decoding one row is bound by reading the weights, so one step for many rows costs far less than
a step each (docs/benchmarks.md, bench_batcher). One thread per
Batcher runs a loop: admit waiting requests (first come first served, at most `per_owner` rows
per owner, at most `max_rows` in all, their padded prompts within `prefill_tokens`), prefill
every prompt but its last token in ONE forward (`prefill.prefill_keys`), copy their keys into
the shared `RaggedKVCache`, then run ONE forward for every active row, each at its own position
with its own keys (tfm.core.kv_cache.RaggedKVCache masks the others' padding): a joining row feeds
its last prompt token there, and takes its first token from that step. Every row keeps its own
settings, `torch.Generator`, stop rule and text stream, and draws with the sampling pipeline
`tfm.generate` uses (one breakdown for rows with the same settings, then each row's own draw,
whose noise a large vocabulary's rows drew during the forward: `choice`),
so it gives what it gives alone, within the products' summation order (~1e-6 on logits). A
request joins or leaves between two steps; a cancelled or finished row's slot is reused at the
next step; so is a row whose `should_stop` (tfm.core.cancel) said yes before a step, and its
consumer reads `Cancelled`. The model is only read; the ragged cache belongs to the batcher. A batch step is
traced when any of its rows asked for a trace (then every row takes the traced attention path;
its Step.trace is a `RowTrace`, that row's attention rows and streams, which
`timeline.step_record` reads).
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from ..core import cancel
from ..core.kv_cache import RaggedKVCache
from ..core.functional import unembed
from ..core.trace import Recorder
from ..core.validate import check_int
from ..loaders.loading import LM
from .batch_rows import Row, RowTrace, row_entry, row_traces
from .choice import choose_all
from .generate import DEFAULT_NEW_TOKENS, Generation, Step, prepare_prompt
from .prefill import prefill_keys
from .sampling import SamplingSettings

__all__ = ["BatchConfig", "Batcher", "BatchedGeneration", "RowTrace"]


@dataclass(frozen=True)
class BatchConfig:
    """max_rows: rows in one decode step (the server's bound); per_owner: rows one owner (a
    browser session) may hold, so one session cannot take every slot; prefill_tokens: padded
    prompt tokens prefilled in the one forward between two decode steps (a longer lone prompt
    still runs alone), so running rows wait at most one bounded forward."""

    max_rows: int = 32
    per_owner: int = 4
    prefill_tokens: int = 1024

    def __post_init__(self) -> None:
        check_int("max_rows", self.max_rows, 1, hint=" (rows in one batched decode step)")
        check_int("per_owner", self.per_owner, 1, self.max_rows, " (at most max_rows)")
        check_int("prefill_tokens", self.prefill_tokens, 1, hint=" (padded prompt tokens in one shared prefill)")


class BatchedGeneration(Generation):
    """A `Generation` served by a Batcher. `poll(timeout)` waits at most `timeout` seconds for
    the next Step (None if none yet, StopIteration at the end), so a page can redraw while it
    waits; `queued` is the number of requests ahead of it while it waits for a row (0 once in)."""

    def __init__(self, batcher: "Batcher", row: Row) -> None:
        self._batcher, self._row, self._finished = batcher, row, False
        super().__init__(row.info, row.settings, self._iterate())

    @property
    def queued(self) -> int:
        return self._batcher.queued(self._row)

    def poll(self, timeout: float) -> Step | None:
        if self._finished:
            raise StopIteration
        try:
            item = self._row.out.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, BaseException):
            self._finished = True
            raise item
        self._finished = item.stop_reason is not None
        return item

    def close(self) -> None:
        """Stop: this row leaves the batch at the next step (a never-started iterator too)."""
        self._row.cancelled.set()
        super().close()

    def _iterate(self) -> Iterator[Step]:
        try:
            while not self._finished:
                step = self.poll(3600.0)
                if step is not None:
                    yield step
        finally:  # closed (Stop), dropped, or done: the row leaves at the next step
            self._row.cancelled.set()


_RUNNING: "weakref.WeakSet[Batcher]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    """At interpreter exit, end every batcher's thread first: a daemon thread still inside a
    torch op while torch tears down aborted the process ("terminate called without an active
    exception", about one exit in ten on 2 threads)."""
    for batcher in list(_RUNNING):
        batcher.stop(timeout=5.0)


class Batcher:
    """One per model and process. Thread-safe: any thread may `submit`; one worker thread runs
    the model, started on the first request and sleeping while there is nothing to do."""

    def __init__(self, lm: LM, config: BatchConfig = BatchConfig()) -> None:
        if lm.model.training and lm.config.dropout > 0:
            raise ValueError("the model is in training mode; batch generation needs an eval-mode model")
        self.lm, self.config = lm, config
        self._cond = threading.Condition()
        self._waiting: deque[Row] = deque()
        self._active: list[Row] = []  # row b of the cache is _active[b]
        self._joining: list[Row] = []  # being prefilled, outside the lock
        self._cache: RaggedKVCache | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.steps = 0  # batched decode steps run (tests, benches)
        self.prefills = 0  # prefill forwards run
        self.widest = 0  # most rows seen in one step

    def submit(
        self,
        prompt: str | Sequence[int],
        max_new_tokens: int | None = None,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        trace: bool = False,
        stop_at_eot: bool = True,
        owner: str = "",
        stop_ids=(),
        should_stop: cancel.ShouldStop = None,
    ) -> BatchedGeneration:
        """Queue a generation; arguments as `tfm.generate` (always with the KV cache). Checked now.
        `should_stop` is asked by the batch thread before each step (cheap, never blocking): yes
        drops this row alone, and its consumer reads `Cancelled`."""
        settings = SamplingSettings(temperature, top_k, top_p)
        row = self._checked_row(
            prompt, settings, max_new_tokens, seed, trace, stop_at_eot, owner, stop_ids, should_stop
        )
        with self._cond:
            if self._closed:
                raise ValueError("this batcher was shut down (its model left the cache): ask for the model again")
            self._waiting.append(row)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="tfm-batcher", daemon=True)
                self._thread.start()
                _RUNNING.add(self)
            self._cond.notify()
        return BatchedGeneration(self, row)

    def _checked_row(
        self,
        prompt,
        settings: SamplingSettings,
        max_new_tokens: int | None,
        seed: int,
        trace: bool,
        stop_at_eot: bool,
        owner: str,
        stop_ids,
        should_stop: cancel.ShouldStop,
    ) -> Row:
        """`submit`'s arguments checked (a ValueError names the bad one) and made into a queued row."""
        ctx = self.lm.config.context_length
        max_new = check_int(
            "max_new_tokens",
            min(DEFAULT_NEW_TOKENS, ctx) if max_new_tokens is None else max_new_tokens,
            1,
            ctx,
            f" (the context length of this model is {ctx})",
        )
        seed = check_int("seed", seed, 0, 2**64 - 1)
        stops = frozenset(check_int("stop token id", i, 0, self.lm.config.vocab_size - 1) for i in stop_ids)
        return Row(
            self.lm,
            prepare_prompt(self.lm, prompt),
            settings,
            max_new,
            seed,
            bool(trace),
            bool(stop_at_eot),
            str(owner),
            stops,
            should_stop,
        )

    def queued(self, row: Row) -> int:
        """Requests ahead of `row` in the queue (0 when it has a row)."""
        with self._cond:
            return next((i + 1 for i, r in enumerate(self._waiting) if r is row), 0)

    def shutdown(self) -> None:
        """Refuse new requests; the thread ends once the rows it has are done."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def stop(self, timeout: float) -> None:
        """Refuse new requests, cancel every row (its consumer's next read raises
        RuntimeError) and wait up to `timeout` seconds for the thread to end."""
        with self._cond:
            self._closed = True
            for r in [*self._active, *self._waiting, *self._joining]:
                r.cancelled.set()
                r.out.put(RuntimeError("generation stopped: the model's batcher was shut down"))
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def load(self) -> tuple[int, int]:
        """(rows decoding, requests waiting) now."""
        with self._cond:
            return len(self._active), len(self._waiting)

    # ------------------------------------------------------------------ the worker thread

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._active:
                    self._cache = None  # idle: the batch cache's memory goes back
                    if self._closed:
                        return
                    self._cond.wait()
                self._drop_finished()
                joining = self._joining = self._admit()
            if joining:
                self._guard(joining, lambda: self._prefill(joining))
            with self._cond:
                self._joining = []
                self._drop_finished()
                rows = list(self._active)
            if rows:
                self._guard(rows, self._decode)

    def _guard(self, rows: list[Row], fn) -> None:
        """Run fn; an exception ends the rows it concerned (each sees it), never the thread."""
        try:
            fn()
        except Exception as e:  # noqa: BLE001 (handed to every consumer that waits on these rows)
            for r in rows:
                r.done = True
                r.out.put(e)
            with self._cond:
                self._drop_finished()

    def _admit(self) -> list[Row]:
        """Waiting rows that join now, prefilled together: first come first served, skipping
        owners at their cap, while the padded prompts fit `prefill_tokens` (the first always
        joins)."""
        free, budget = self.config.max_rows - len(self._active), self.config.prefill_tokens
        held, joining = Counter(r.owner for r in self._active), []
        for r in list(self._waiting):
            if len(joining) >= free:
                break
            if r.leaves():
                self._waiting.remove(r)
                continue
            if held[r.owner] >= self.config.per_owner:
                continue
            longest = max(len(j.tokens) for j in joining + [r])
            if joining and longest * (len(joining) + 1) > budget:
                break
            self._waiting.remove(r)
            held[r.owner] += 1
            joining.append(r)
        return joining

    def _prefill(self, rows: list[Row]) -> None:
        """The joining prompts, all but their last token, in one forward; each row then joins
        the batch, and the next decode step feeds its last prompt token, so its first token,
        traced or not, comes from the step every row shares (a traced prompt prefilled alone
        made a class start one student per step)."""
        t0 = time.perf_counter()
        cache = prefill_keys(self.lm, [r.tokens[:-1] for r in rows], max(r.fed_length() for r in rows))
        self.prefills += 1
        took = time.perf_counter() - t0
        for g, r in enumerate(rows):
            r.carry = took  # its first step's time includes the prefill, as in tfm.generate
            with self._cond:
                self._cache = self._room(r.fed_length())
                self._cache.put(len(self._active), cache, g, len(r.tokens) - 1)
                self._active.append(r)
                self._cache.rows = len(self._active)

    def _room(self, length: int) -> RaggedKVCache:
        """The batch cache with room for one more row of `length` positions (grown by copying)."""
        c, rows = self._cache, len(self._active) + 1
        need = max([length] + [r.fed_length() for r in self._active])
        if c is not None and c.k.shape[1] >= rows and c.max_len >= need:
            return c
        capacity = min(self.config.max_rows, max(rows, 2 * (c.k.shape[1] if c else 1)))
        if c is None:
            p = next(self.lm.model.parameters())
            return RaggedKVCache(self.lm.config, capacity, need, p.device, p.dtype)
        return c.grown(need, capacity)

    @torch.no_grad()
    def _decode(self) -> None:
        """One forward for every active row: its last token at its own position."""
        t0 = time.perf_counter()
        rows, model = self._active, self.lm.model
        device = next(model.parameters()).device
        idx = torch.tensor([[r.tokens[-1]] for r in rows], dtype=torch.long, device=device)  # (B, 1)
        width = model.unembed.weight.shape[0]  # the logits' V
        for r in rows:
            r.noise.start(width, r.settings, r.gen)
        n_keys = (self._cache.starts + 1).tolist()  # per row, after this step
        rec = Recorder(keep=row_entry, listed=False) if any(r.trace for r in rows) else None
        x = model.hidden(idx, self._cache, rec)  # (B, 1, D)
        logits = unembed(x, model.unembed.weight)[:, -1].float()  # (B, V)
        took = time.perf_counter() - t0
        self.steps, self.widest = self.steps + 1, max(self.widest, len(rows))
        traces = row_traces(rec.finish(), n_keys, [r.trace for r in rows]) if rec else [None] * len(rows)
        for r, choice, tr in zip(rows, choose_all(logits, rows), traces):
            r.step(choice, tr, took)

    def _drop_finished(self) -> None:
        """Remove done or cancelled rows (caller holds the lock), moving the last row into each gap."""
        for r in [r for r in self._waiting if r.leaves()]:
            self._waiting.remove(r)
        b = 0
        while b < len(self._active):
            r = self._active[b]
            if r.done or r.leaves():
                last = len(self._active) - 1
                if b != last:
                    self._cache.move(last, b)
                self._active[b] = self._active[last]
                self._active.pop()
                self._cache.rows = len(self._active)
            else:
                b += 1
