"""Lesson: watch an induction head form, by training a tiny attention-only transformer live.

The model is tfm's own parts (`Norm`, `Attention`, learned positions, an unembedding) with the
MLP left out: two layers of attention are the smallest model that can learn the induction
circuit (a previous-token head in layer 0 feeding a head in layer 1 that looks for "the token
after the last copy of me"). It trains on random token sequences in which a random segment
appears twice at a random offset, so the only way to predict the second copy is to copy from
the first. The loss (graded only on the second copies) sits on a plateau, then drops suddenly when
the model learns to copy; the induction score per head (`tfm.analysis`, TransformerLens's
definition: attention on the token right after the earlier copy) is measured on a fixed probe
at every snapshot, together with the heads' attention patterns.

Measured here: with these defaults the drop comes reliably, but the two-head model often copies
through a composition of fixed-offset heads (layer 0 gathers the tokens k and k-1 back) rather
than the textbook previous-token + induction pair, so the TransformerLens score can stay low
while the loss falls. The page says which happened, from the numbers.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import analysis
from .config import ModelConfig
from .model import Attention, ModelOutput, Norm, rope_angles
from .rope import inv_freq as rope_inv_freq
from .toy import torch_threads
from .trace import Recorder

MAX_STEPS = 5000      # server-side bound on one lesson's training steps
PROBE_SEED = 1234


@dataclass(frozen=True)
class LessonSettings:
    """What the class can change. The defaults learn the copying task in well under a minute on one CPU core."""

    seed: int = 0
    steps: int = 800
    vocab: int = 64
    seq_len: int = 40
    d_model: int = 64
    n_head: int = 2
    batch_size: int = 64
    lr: float = 3e-3
    snapshot_every: int = 20
    threshold: float = 0.5   # induction score that counts as "formed"
    positions: str = "learned"  # "learned" or "rope"

    def __post_init__(self) -> None:
        for name, lo, hi in (("seed", 0, 2**31 - 1), ("steps", 1, MAX_STEPS), ("vocab", 8, 512),
                             ("seq_len", 12, 128), ("d_model", 8, 256), ("n_head", 1, 16),
                             ("batch_size", 1, 256), ("snapshot_every", 1, MAX_STEPS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"{name}={value!r}: choose an integer from {lo} to {hi}")
        if not (0 < self.lr <= 0.1) or not (0 < self.threshold < 1):
            raise ValueError(f"lr={self.lr} must be in (0, 0.1] and threshold={self.threshold} in (0, 1)")
        if self.positions not in ("learned", "rope"):
            raise ValueError(f"positions={self.positions!r}: choose 'learned' or 'rope'")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")

    def model_config(self) -> ModelConfig:
        return ModelConfig(vocab_size=self.vocab, context_length=self.seq_len, d_model=self.d_model, n_layer=2,
                           n_head=self.n_head, d_ff=1, pos_encoding=self.positions)


class AttnOnly(nn.Module):
    """Token + learned position embedding, n_layer pre-norm attention blocks, final norm, unembedding.
    Traced calls record the same names as `GPT` (`blocks.{i}.attn.pattern`, ...), so
    `tfm.analysis` reads them unchanged."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.context_length, cfg.d_model) if cfg.pos_encoding == "learned" else None
        if cfg.pos_encoding == "rope":
            self.register_buffer("inv_freq", rope_inv_freq(cfg), persistent=False)  # as GPT: (rotary_dim/2,)
        self.norms = nn.ModuleList(Norm(cfg) for _ in range(cfg.n_layer))
        self.attns = nn.ModuleList(Attention(cfg) for _ in range(cfg.n_layer))
        self.ln_final = Norm(cfg)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, trace: bool = False) -> ModelOutput:
        rec = Recorder() if trace else None
        x, angles = self.tok_emb(idx), None                              # (B, T, D)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(idx.shape[1], device=idx.device))
        else:
            angles = rope_angles(self.inv_freq, 0, idx.shape[1])          # (T, hd/2)
        for i, (norm, attn) in enumerate(zip(self.norms, self.attns)):
            sub = rec.scoped(f"blocks.{i}") if rec else None
            x = x + attn(norm(x, sub.scoped("ln1") if sub else None), sub.scoped("attn") if sub else None, angles)
        logits = self.unembed(self.ln_final(x))                          # (B, T, V)
        if rec is not None:
            rec.add("logits", logits)
        return ModelOutput(logits, rec.finish() if rec else None)


def repeated_batch(s: LessonSettings, size: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (B, T), mask (B, T-1) of the targets inside the second copy). Each row is random
    tokens with one random segment written twice, its length and offset random per row, so no
    fixed position or distance predicts it: only copying from the first copy does."""
    t = s.seq_len
    tokens = torch.randint(0, s.vocab, (size, t), generator=g)
    mask = torch.zeros(size, t - 1, dtype=torch.bool)
    lengths = torch.randint(t // 6, t // 2 + 1, (size,), generator=g)
    for row, n in enumerate(lengths.tolist()):
        start = int(torch.randint(0, t - 2 * n + 1, (1,), generator=g))
        tokens[row, start + n:start + 2 * n] = tokens[row, start:start + n]
        mask[row, start + n:start + 2 * n - 1] = True  # targets at start+n+1 .. start+2n-1
    return tokens, mask


def probe_tokens(s: LessonSettings) -> torch.Tensor:
    """A fixed random sequence written twice (the standard induction test), the same at every snapshot."""
    half = torch.randint(0, s.vocab, (s.seq_len // 2,), generator=torch.Generator().manual_seed(PROBE_SEED))
    return torch.cat([half, half])


@dataclass(frozen=True)
class Snapshot:
    step: int
    induction: torch.Tensor      # (L, H) induction scores on the probe
    previous: torch.Tensor       # (L, H) previous-token scores on the probe
    patterns: torch.Tensor       # (L, H, T, T) attention of the probe
    repeat_loss: float           # loss on the probe's second copy


@dataclass
class LessonResult:
    settings: LessonSettings
    losses: list[float] = field(default_factory=list)   # training loss on the copied targets
    snapshots: list[Snapshot] = field(default_factory=list)
    seconds: float = 0.0

    def dropped_at(self, window: int = 20) -> int | None:
        """The first step where the mean loss over `window` steps fell below half its starting value."""
        if len(self.losses) < 2 * window:
            return None
        start = sum(self.losses[:window]) / window
        for end in range(window, len(self.losses) + 1):
            if sum(self.losses[end - window:end]) / window < 0.5 * start:
                return end
        return None

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
    scores = analysis.head_scores(out.trace, tokens)
    half = tokens.shape[0] // 2
    loss = F.cross_entropy(out.logits[0, half:-1], tokens[half + 1:])
    return Snapshot(step, scores["induction"], scores["previous_token"], analysis.patterns(out.trace).clone(),
                    float(loss))


def train(s: LessonSettings, on_step: Callable[[int, float, Snapshot | None], None] | None = None,
          threads: int | None = 1) -> LessonResult:
    """Train a fresh attention-only model; `on_step(step, loss, snapshot or None)` after each step.
    Reproducible for a seed (own generators, never the global RNG)."""
    with torch_threads(threads):
        model = AttnOnly(s.model_config())
        g = torch.Generator().manual_seed(s.seed)
        with torch.no_grad():
            for p in model.parameters():  # GPT-2's N(0, 0.02); norm gains stay 1, biases 0
                if p.dim() > 1:
                    p.copy_(torch.empty(p.shape).normal_(0.0, 0.02, generator=g))
        data = torch.Generator().manual_seed(s.seed + 1)
        opt = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.98), weight_decay=0.0)
        res, start = LessonResult(s), time.perf_counter()
        res.snapshots.append(snapshot(model, s, 0))
        for step in range(1, s.steps + 1):
            for group in opt.param_groups:  # short warm-up, then constant: the drop comes when it comes
                group["lr"] = s.lr * min(1.0, step / 20)
            tokens, mask = repeated_batch(s, s.batch_size, data)
            logits = model(tokens[:, :-1]).logits                      # (B, T-1, V)
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
