"""Lesson: watch an induction head form, by training a tiny attention-only transformer live.

The model is tfm's own parts (`Norm`, `Attention`, learned positions, an unembedding) with the
MLP left out: two layers of attention are the smallest model that can learn the induction
circuit (a previous-token head in layer 0 feeding a head in layer 1 that looks for "the token
after the last copy of me").

The data decides which circuit it learns. Each training row is random tokens in which a few
"trigger" tokens always come with the same partner right after them (`pairs` pairs, each written
`repeats` times at random places); only the partners after a trigger's second and later
appearances are graded. Nothing but the immediately preceding token predicts them, so the only
working circuit is the textbook one. (When a whole segment is repeated instead, as in the classic
repeated-random-tokens setup, any offset d gives a consistent match: measured here over 12 setups,
learned or RoPE positions, 1-4 heads, the model learned to copy through heads that look a fixed
4-6 tokens back, and the induction score stayed near 0 while the loss fell.)

The induction score of each head is TransformerLens's detection score (`tfm.analysis`: attention
on the token right after an earlier copy of the query's token) on a fixed probe of distinct random
tokens written twice, taken over the queries of the second copy, the only ones that have an earlier
copy. (Over the whole probe TransformerLens's number is exactly half of this, so it can never pass
0.5: the threshold of 0.5 is "half of a query's attention on the right token".)

Measured with the defaults (600 steps, one thread; seeds 0-7): the loss sits on a
plateau near 3.8 nats (chance: ln 64 = 4.16) until step 257-328, then falls below 1 nat within
60-90 steps while a layer-1 head's induction score climbs from 0.1-0.25 to 0.88-0.97; it crosses
0.5 at step 300-380 on every seed, and a layer-0 head becomes a previous-token head (0.65-0.73).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import analysis
from ..core.config import ModelConfig
from ..core.model import Attention, ModelOutput, Norm
from ..core.positions import add_embeddings, position_inputs
from .toy import torch_threads
from ..core.trace import Recorder
from ..core.validate import check_int, check_number

MAX_STEPS = 5000  # server-side bound on one lesson's training steps
PROBE_SEED = 1234


@dataclass(frozen=True)
class LessonSettings:
    """What the class can change. The defaults form an induction head in well under a minute on one CPU core."""

    seed: int = 0
    steps: int = 600
    vocab: int = 64
    seq_len: int = 40
    d_model: int = 64
    n_head: int = 2
    batch_size: int = 32
    lr: float = 3e-3
    snapshot_every: int = 20
    threshold: float = 0.5  # induction score (second copy of the probe) that counts as "formed"
    positions: str = "learned"  # "learned" or "rope" (RoPE: formed at step 460 on seed 0, measured)
    pairs: int = 5  # trigger tokens per row, each always followed by its own partner
    repeats: int = 3  # appearances of each trigger + partner in a row

    def __post_init__(self) -> None:
        for name, lo, hi in (
            ("seed", 0, 2**31 - 1),
            ("steps", 1, MAX_STEPS),
            ("vocab", 8, 512),
            ("seq_len", 12, 128),
            ("d_model", 8, 256),
            ("n_head", 1, 16),
            ("batch_size", 1, 256),
            ("snapshot_every", 1, MAX_STEPS),
            ("pairs", 1, 16),
            ("repeats", 2, 8),
        ):
            check_int(name, getattr(self, name), lo, hi)
        check_number("lr", self.lr, 1e-6, 0.1)
        check_number("threshold", self.threshold, 0.01, 0.99, hint=" (the induction score that counts as formed)")
        if self.positions not in ("learned", "rope"):
            raise ValueError(f"positions={self.positions!r}: choose 'learned' or 'rope'")
        if 2 * self.pairs * self.repeats > self.seq_len or self.vocab < max(self.seq_len // 2, self.pairs + 2):
            raise ValueError(
                f"pairs={self.pairs} x repeats={self.repeats} must fit seq_len={self.seq_len} twice, and "
                f"vocab={self.vocab} hold half of seq_len distinct tokens and pairs + 2"
            )
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")

    def model_config(self) -> ModelConfig:
        return ModelConfig(
            vocab_size=self.vocab,
            context_length=self.seq_len,
            d_model=self.d_model,
            n_layer=2,
            n_head=self.n_head,
            d_ff=1,
            pos_encoding=self.positions,
        )


class AttnOnly(nn.Module):
    """Token + learned position embedding, n_layer pre-norm attention blocks, final norm, unembedding.
    Traced calls record the same names as `GPT` (`blocks.{i}.attn.pattern`, ...), so
    `tfm.analysis` reads them unchanged."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        add_embeddings(self, cfg)  # as GPT: tok_emb, pos_emb or inv_freq
        self.norms = nn.ModuleList(Norm(cfg) for _ in range(cfg.n_layer))
        self.attns = nn.ModuleList(Attention(cfg) for _ in range(cfg.n_layer))
        self.ln_final = Norm(cfg)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, trace: bool = False) -> ModelOutput:
        rec = Recorder() if trace else None
        added, angles = position_inputs(self, 0, idx.shape[1])  # (T, D) or RoPE angles (T, hd/2)
        x = self.tok_emb(idx) if added is None else self.tok_emb(idx) + added  # (B, T, D)
        for i, (norm, attn) in enumerate(zip(self.norms, self.attns)):
            sub = rec.scoped(f"blocks.{i}") if rec else None
            x = x + attn(norm(x, sub.scoped("ln1") if sub else None), sub.scoped("attn") if sub else None, angles)
        logits = self.unembed(self.ln_final(x))  # (B, T, V)
        if rec is not None:
            rec.add("logits", logits)
        return ModelOutput(logits, rec.finish() if rec else None)


def pairs_batch(s: LessonSettings, size: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (B, T), mask (B, T-1) of the graded targets). Each row: `pairs` trigger tokens, each
    written `repeats` times at random places with the same partner right after it; filler tokens
    (never a trigger) in between. Graded: the partner after every appearance but a trigger's first."""
    n, m = s.pairs, s.pairs * s.repeats
    k = s.seq_len - m  # items: m pairs (2 tokens) + fillers
    order = torch.argsort(torch.rand(size, k, generator=g), dim=1)  # (B, K) item id in each slot
    length = torch.where(order < m, 2, 1)
    start = torch.cumsum(length, 1) - length  # (B, K) first position of each slot
    pos = torch.empty(size, k, dtype=torch.long).scatter_(1, order, start)  # (B, K) position of each item id
    vocab = torch.argsort(torch.rand(size, s.vocab, generator=g), dim=1)  # (B, V) per-row shuffle
    trig, rest = vocab[:, :n], vocab[:, n:]  # (B, n) triggers, (B, V-n) the others
    partner = rest.gather(1, torch.randint(0, s.vocab - n, (size, n), generator=g))
    tokens = rest.gather(1, torch.randint(0, s.vocab - n, (size, s.seq_len), generator=g))  # fillers
    at, pair = pos[:, :m], torch.arange(m) // s.repeats  # (B, m) trigger positions, pair of each
    tokens.scatter_(1, at, trig[:, pair]).scatter_(1, at + 1, partner[:, pair])
    first = at.view(size, n, s.repeats).min(-1).values[:, pair]  # (B, m) first appearance of its trigger
    mask = torch.zeros(size, s.seq_len, dtype=torch.bool).scatter_(1, at, at != first)
    return tokens, mask[:, :-1]


def probe_tokens(s: LessonSettings) -> torch.Tensor:
    """Distinct random tokens written twice (the standard induction test), the same at every snapshot."""
    half = torch.randperm(s.vocab, generator=torch.Generator().manual_seed(PROBE_SEED))[: s.seq_len // 2]
    return torch.cat([half, half])


def induction_scores(patterns: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """(..., T, T) probe patterns -> (...) TransformerLens induction scores over the second copy's queries."""
    half = tokens.shape[0] // 2
    return analysis.detection_score(patterns[..., half:, :], analysis.induction_detection(tokens)[half:])


@dataclass(frozen=True)
class Snapshot:
    step: int
    induction: torch.Tensor  # (L, H) induction scores on the probe's second copy
    previous: torch.Tensor  # (L, H) previous-token scores on the whole probe
    patterns: torch.Tensor  # (L, H, T, T) attention of the probe
    repeat_loss: float  # loss on the probe's second copy


@dataclass
class LessonResult:
    settings: LessonSettings
    losses: list[float] = field(default_factory=list)  # training loss on the copied targets
    snapshots: list[Snapshot] = field(default_factory=list)
    seconds: float = 0.0

    def dropped_at(self, window: int = 20) -> int | None:
        """The first step where the mean loss over `window` steps fell below half its starting value."""
        if len(self.losses) < 2 * window:
            return None
        start = sum(self.losses[:window]) / window
        for end in range(window, len(self.losses) + 1):
            if sum(self.losses[end - window : end]) / window < 0.5 * start:
                return end
        return None

    def plateau(self, window: int = 40) -> tuple[int, float] | None:
        """(last step, mean loss over steps window+1..last) of the plateau: it ends where the loss falls
        fastest, i.e. the `window` steps after it have the lowest mean relative to the `window` before."""
        if len(self.losses) < 4 * window:
            return None
        sums = torch.tensor([0.0, *self.losses], dtype=torch.float64).cumsum(0)  # sums[i] = sum(losses[:i])
        means = (sums[window:] - sums[:-window]) / window  # means[t]: steps t+1..t+window
        fall = means[window:-window] - means[2 * window :]  # fall at t+window: before minus after
        end = int(fall.argmax()) + window  # the plateau's last step
        return end, float(sums[end] - sums[window]) / (end - window) if end > window else float(means[0])

    def formed_at(self) -> tuple[int, int, int] | None:
        """(step, layer, head) of the first snapshot where a head's induction score crossed the threshold."""
        for snap in self.snapshots:
            layer, head, score = analysis.top_head(snap.induction)
            if score >= self.settings.threshold:
                return snap.step, layer, head
        return None


@torch.no_grad()
def snapshot(model: AttnOnly, s: LessonSettings, step: int) -> Snapshot:
    tokens = probe_tokens(s)
    out = model(tokens[None], trace=True)
    pats = analysis.patterns(out.trace).clone()  # (L, H, T, T)
    previous = analysis.detection_score(pats, analysis.previous_token_detection(tokens.shape[0]))
    half = tokens.shape[0] // 2
    loss = F.cross_entropy(out.logits[0, half:-1], tokens[half + 1 :])
    return Snapshot(step, induction_scores(pats, tokens), previous, pats, float(loss))


def train(
    s: LessonSettings, on_step: Callable[[int, float, Snapshot | None], None] | None = None, threads: int | None = 1
) -> LessonResult:
    """Train a fresh attention-only model; `on_step(step, loss, snapshot or None)` after each step.
    Reproducible for a seed (own generators, never the global RNG)."""
    with torch_threads(threads):
        model = AttnOnly(s.model_config())
        g = torch.Generator().manual_seed(s.seed)
        with torch.no_grad():
            for name, p in model.named_parameters():  # GPT-2's N(0, 0.02); norm gains stay 1, biases 0
                if p.dim() > 1:
                    p.copy_(torch.empty(p.shape).normal_(0.0, 0.02, generator=g))
                elif name.endswith("bias"):  # nn.Linear drew these from the global RNG: not reproducible
                    p.zero_()
        data = torch.Generator().manual_seed(s.seed + 1)
        opt = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.98), weight_decay=0.0)
        res, start = LessonResult(s), time.perf_counter()
        res.snapshots.append(snapshot(model, s, 0))
        for step in range(1, s.steps + 1):
            for group in opt.param_groups:  # short warm-up, then constant: the drop comes when it comes
                group["lr"] = s.lr * min(1.0, step / 20)
            tokens, mask = pairs_batch(s, s.batch_size, data)
            logits = model(tokens[:, :-1]).logits  # (B, T-1, V)
            per_token = F.cross_entropy(logits.reshape(-1, s.vocab), tokens[:, 1:].reshape(-1), reduction="none")
            loss = per_token[mask.reshape(-1)].mean()  # graded only where copying can help
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            res.losses.append(loss.item())
            snap = snapshot(model, s, step) if step % s.snapshot_every == 0 or step == s.steps else None
            if snap is not None:
                res.snapshots.append(snap)
            if on_step is not None:
                on_step(step, res.losses[-1], snap)
        res.seconds = time.perf_counter() - start
        return res
