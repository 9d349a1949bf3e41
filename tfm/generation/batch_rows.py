"""One request in a `tfm.generation.batcher.Batcher`'s shared decode batch: its `Row` (what
`tfm.generate`'s loop keeps per call: settings, generator, stop rule, text stream, plus the outbox
its consumer reads) and what a traced batch step keeps of it (`RowTrace`, made by `row_traces`)."""

from __future__ import annotations

import queue
import threading
import time

import torch

from ..core import cancel
from ..core.validate import check_int
from ..loaders.loading import LM
from .choice import Noise
from .decode import TextStream, stop_reason
from .generate import PromptInfo, Step, make_step, n_words
from .sampling import SamplingSettings


class RowTrace:
    """One row of a batched step's trace, as `timeline.step_record` reads a Step's trace: its
    attention rows (L, H, S) over its own S keys and its residual streams (L+1, D), in tensors of
    its own (a view into the batch's would keep every row's alive). `row_traces` makes them."""

    def __init__(self, attn: torch.Tensor, labels: list[str], resid: torch.Tensor) -> None:
        self._attn, self._labels, self._resid = attn, labels, resid

    def n_layers(self) -> int:
        return self._attn.shape[0]

    def pattern(self, layer: int, batch: int = 0) -> torch.Tensor:
        """(H, 1, S): the row's one query."""
        check_int("batch", batch, 0, 0, " (a row trace holds one row)")
        check_int("layer", layer, 0, self.n_layers() - 1)
        return self._attn[layer][:, None]

    def query_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(attention rows (L, H, S), residual streams (L+1, D)) of the row's one query: what
        `timeline.step_record` keeps, already in tensors of their own."""
        return self._attn, self._resid

    def residual_streams(self, batch: int = 0) -> list[tuple[str, torch.Tensor]]:
        """(label, (1, D)) for the stream entering block 0 and leaving every block."""
        check_int("batch", batch, 0, 0, " (a row trace holds one row)")
        return [(label, s[None]) for label, s in zip(self._labels, self._resid)]


def row_entry(name: str) -> bool:
    """The entries a RowTrace reads (what a traced batch step records; it lists no others)."""
    return name.endswith((".attn.pattern", ".resid_pre", ".resid_post")) or name == "ln_final.input"


def row_traces(trace, n_keys: list[int], wanted: list[bool]) -> list[RowTrace | None]:
    """The RowTrace of each row that `wanted` one, from one batched decode step's trace: the
    batch's patterns and streams stacked once, then one copy each per row (a copy per layer and
    row was a large share of a traced 30-row step)."""
    attn = trace.stack("attn.pattern")[:, :, :, -1]  # (L, B, H, S)
    labels, streams = trace.residual_stack()  # (L+1, B, 1, D)
    return [
        RowTrace(attn[:, b, :, :n].clone(), labels, streams[:, b, -1].clone()) if w else None
        for b, (n, w) in enumerate(zip(n_keys, wanted))
    ]


class Row:
    """One request: everything `tfm.generate`'s loop keeps per call, plus its outbox."""

    def __init__(
        self,
        lm: LM,
        info: PromptInfo,
        settings: SamplingSettings,
        max_new: int,
        seed: int,
        trace: bool,
        stop_at_eot: bool,
        owner: str,
        stop_ids: frozenset[int] = frozenset(),
        should_stop: cancel.ShouldStop = None,
    ) -> None:
        self.lm, self.info, self.settings, self.max_new, self.trace = lm, info, settings, max_new, trace
        self.stop_at_eot, self.owner, self.tokens = stop_at_eot, owner, list(info.ids)
        self.stop_ids, self.should_stop = stop_ids, should_stop
        self.gen, self.text, self.words = torch.Generator().manual_seed(seed), TextStream(), n_words(lm)
        self.out: queue.SimpleQueue = queue.SimpleQueue()
        self.cancelled = threading.Event()
        self.elapsed, self.carry, self.done = 0.0, 0.0, False
        self.noise = Noise()  # its next draw's noise, drawn during the step's forward

    def leaves(self) -> bool:
        """Closed, or its `should_stop` says yes (its consumer then reads Cancelled): the batch
        thread asks before each step, under its lock."""
        if not self.cancelled.is_set() and self.should_stop is not None and self.should_stop():
            self.cancelled.set()
            self.out.put(cancel.Cancelled("the generation was stopped: nobody waits for it any more"))
        return self.cancelled.is_set()

    def fed_length(self) -> int:
        """Positions its cache must hold: the prompt and every token but the last."""
        return min(self.lm.config.context_length, len(self.info.ids) + self.max_new - 1)

    def step(self, choice: tuple, tr, took: float) -> Step:
        """Take the token `choice.choose_rows` drew for this row, as tfm.generate's loop does."""
        t0 = time.perf_counter()
        bd, token, numbers = choice
        self.tokens.append(token)
        index = len(self.tokens) - len(self.info.ids) - 1
        reason = stop_reason(token, index + 1, len(self.tokens), self.lm, self.max_new, self.stop_at_eot, self.stop_ids)
        piece = self.lm.tokenizer.piece_bytes(token)
        new_text, so_far = self.text.add(piece, final=reason is not None)
        took += time.perf_counter() - t0 + self.carry
        self.carry = 0.0
        self.elapsed += took
        self.done = reason is not None
        texts, times = (new_text, so_far), (self.elapsed, took)
        step = make_step(self.lm, index, len(self.tokens) - 1, token, piece, texts, numbers, bd, tr, times, reason)
        self.out.put(step)
        return step
