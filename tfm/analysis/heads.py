"""Attention heads: detection scores, the induction probe, the head table, attention rollout.

Head detection scores follow TransformerLens's `detect_head` with its default
`error_measure="mul"`: score = sum(pattern * detection) / sum(pattern) for one sequence,
i.e. the average attention mass each query puts on the positions the head type predicts.
All functions read batch element 0 unless they say otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..core import cancel
from ..core.model import GPT
from ..core.stats import entropy  # noqa: F401  (tfm.analysis.entropy: attention-row entropy)
from ..core.trace import Trace
from .encoders import bert_heads

Progress = Callable[[int, int], None]  # (done, total): called after each layer of a long loop


def previous_token_detection(t: int) -> torch.Tensor:
    """(T, T): 1 where query q looks at q - 1."""
    return torch.diag(torch.ones(t - 1), diagonal=-1)


def first_token_detection(t: int) -> torch.Tensor:
    """(T, T): 1 in column 0, the attention-sink position."""
    det = torch.zeros(t, t)
    det[:, 0] = 1
    return det


def duplicate_token_detection(tokens: torch.Tensor) -> torch.Tensor:
    """(T, T): 1 where an earlier key holds the same token as the query."""
    eq = (tokens[:, None] == tokens[None, :]).float()
    return torch.tril(eq, diagonal=-1)


def induction_detection(tokens: torch.Tensor) -> torch.Tensor:
    """(T, T): 1 where the key comes right after an earlier copy of the query's token."""
    dup = duplicate_token_detection(tokens)
    shifted = torch.zeros_like(dup)
    shifted[:, 1:] = dup[:, :-1]  # key j is marked when key j-1 duplicates the query
    return torch.tril(shifted)


def detection_score(pattern: torch.Tensor, detection: torch.Tensor) -> torch.Tensor:
    """(..., T, T) patterns against a (T, T) 0/1 detection pattern -> (...) scores."""
    det = detection.to(pattern.device, pattern.dtype)
    return (pattern * det).sum((-2, -1)) / pattern.sum((-2, -1))


def patterns(trace: Trace) -> torch.Tensor:
    """Attention patterns of every layer for batch element 0: (L, H, T, T). Large for long
    prompts (GPT-2 at 1024 tokens: 600 MB): prefer a loop over `Trace.pattern`."""
    return torch.stack([trace.pattern(i) for i in range(trace.n_layers())])


def head_scores(
    trace: Trace,
    tokens: torch.Tensor | list[int],
    progress: Progress | None = None,
    should_stop: cancel.ShouldStop = None,
) -> dict[str, torch.Tensor]:
    """Per-head (L, H) scores: previous_token, first_token, duplicate_token, induction, entropy.
    One layer's (H, T, T) pattern is read at a time; only the (L, H) scores are kept.
    `should_stop` (tfm.core.cancel) is asked before each layer."""
    tok = torch.as_tensor(tokens).flatten().cpu()
    t, n = len(tok), trace.n_layers()
    dets = {
        "previous_token": previous_token_detection(t),
        "first_token": first_token_detection(t),
        "duplicate_token": duplicate_token_detection(tok),
        "induction": induction_detection(tok),
    }
    rows: dict[str, list[torch.Tensor]] = {name: [] for name in (*dets, "entropy")}
    for layer in range(n):
        cancel.check(should_stop, "the head scores")
        pat = trace.pattern(layer).float()  # (H, T, T)
        for name, det in dets.items():
            rows[name].append(detection_score(pat, det))
        rows["entropy"].append(entropy(pat).mean(-1))
        if progress is not None:
            progress(layer + 1, n)
    return {name: torch.stack(r) for name, r in rows.items()}  # (L, H) each


@torch.no_grad()
def induction_probe(
    model: GPT,
    seq_len: int = 40,
    seed: int = 0,
    bos: int | None = None,
    progress: Progress | None = None,
    should_stop: cancel.ShouldStop = None,
) -> dict[str, torch.Tensor]:
    """Head scores on a random token sequence repeated twice, where only induction can predict
    the second half (the standard induction-head test). Returns head_scores plus `tokens`."""
    cfg = model.config
    if 2 * seq_len + (bos is not None) > cfg.context_length:
        raise ValueError(f"seq_len={seq_len} twice does not fit the context length {cfg.context_length}")
    g = torch.Generator().manual_seed(seed)
    half = torch.randint(0, min(cfg.vocab_size, 50_000), (seq_len,), generator=g)
    tokens = torch.cat([half, half]) if bos is None else torch.cat([torch.tensor([bos]), half, half])
    device = next(model.parameters()).device
    out = model(tokens[None].to(device), trace=True, last_only=True)  # patterns only: no (T, V) logits
    scores = head_scores(out.trace, tokens, progress, should_stop)
    scores["tokens"] = tokens
    return scores


def top_head(scores: torch.Tensor) -> tuple[int, int, float]:
    """(layer, head, score) of the highest entry of an (L, H) score table."""
    flat = int(scores.argmax())
    layer, head = divmod(flat, scores.shape[1])
    return layer, head, float(scores[layer, head])


# ---- the head table: every page, the home page and the model card read heads through this ----
PROBE_LEN, PROBE_SEED = 40, 0  # the repeated-random-tokens probe: tokens per half, their seed
SCORES = {  # name -> what it measures: the prompt's scores, then the probe's ("repeat_" + prompt name)
    "entropy": "How spread out the head's attention is, in nats, averaged over queries: 0 = every "
    "token looks at exactly one token; ln(T) = looks at all earlier tokens equally.",
    "previous_token": "Share of attention each token puts on the token right before it.",
    "first_token": "Share put on position 0. Heads with nothing useful to do often park their "
    "attention there (an 'attention sink').",
    "duplicate_token": "Share put on earlier copies of the same token.",
    "induction": "Share put on the token right after an earlier copy of the current token "
    "(… A B … A → look at B): the head that continues repeated text.",
    "repeat_induction": "Induction score on random tokens repeated twice, where only induction can "
    "predict the second half: the cleanest test, independent of your prompt.",
    "repeat_previous_token": "Previous-token score on the same repeated random tokens.",
    **{f"to_{k}": v for k, v in bert_heads.HELP.items() if k in ("cls", "sep", "punctuation", "self")},
    "next_token": bert_heads.HELP["next"],
}
ENCODER_SCORES = ("to_cls", "to_sep", "to_punctuation", "to_self", "next_token")  # bidirectional models only
INDUCTION_SHOWN = 0.2  # a probe induction score that is a real induction head: an untrained model's strongest
# is a few hundredths, a trained model's induction head several tenths
BROWSABLE_HEADS = 64  # heads a student browses from layer 0 head 0; a larger model opens where something shows
PROMPT_SCORES = ("entropy", "previous_token", "first_token", "duplicate_token", "induction")
PROBE_SCORES = ("repeat_induction", "repeat_previous_token")


@dataclass(frozen=True)
class ProbeSettings:
    """The repeated-random-tokens probe: `seq_len` random tokens drawn with `seed`, twice,
    after the start token `bos` (the tokenizer's end-of-text, when the model has a row for it)."""

    seq_len: int
    seed: int
    bos: int | None


@dataclass(frozen=True)
class HeadTable:
    """(L, H) CPU float32 scores by name (`SCORES` order; only those measured), how many prompt
    tokens were scored (0: probe only) and the probe used (None: the context is too short)."""

    scores: dict[str, torch.Tensor]
    n_tokens: int
    probe: ProbeSettings | None

    def help(self) -> dict[str, str]:
        """What each score in the table measures."""
        return {name: SCORES[name] for name in self.scores}


def probe_settings(lm) -> ProbeSettings | None:
    """The probe that fits `lm` (an `LM`): PROBE_LEN tokens per half, fewer in a short context;
    None when not even 2 fit."""
    cfg, eot = lm.config, lm.tokenizer.eot_id
    seq_len = min(PROBE_LEN, (cfg.context_length - 1) // 2)  # room for the start token
    bos = eot if eot is not None and eot < cfg.vocab_size else None
    return ProbeSettings(seq_len, PROBE_SEED, bos) if seq_len >= 2 else None


def head_table(
    lm, trace: Trace | None = None, ids=None, progress: Progress | None = None, should_stop: cancel.ShouldStop = None
) -> HeadTable:
    """Every head's scores on the traced prompt `ids` (left out without a trace) and on the
    repeated-random-tokens probe. Cost: one layer's (H, T, T) pattern is read at a time (GPT-2
    at 1024 tokens: ~50 MB, plus the block a lazy trace recomputes), then the probe's forward
    on 2 * PROBE_LEN + 1 tokens; `progress(done, total)` counts the layers of both, and
    `should_stop` (tfm.core.cancel) is asked before each of them."""
    probe = probe_settings(lm)
    n_layer = lm.config.n_layer
    total = n_layer * ((trace is not None) + (probe is not None))

    def step(start: int) -> Progress | None:  # one count over both loops
        return None if progress is None else lambda done, _: progress(start + done, total)

    scores: dict[str, torch.Tensor] = {}
    if trace is not None:
        got = head_scores(trace, ids, step(0), should_stop)
        scores |= {name: got[name].cpu().float() for name in PROMPT_SCORES}
        if not lm.config.causal:  # Clark et al.'s: [CLS], [SEP], punctuation, itself, the next token
            look = bert_heads.prompt_scores(trace, lm.tokenizer, list(ids))
            scores |= {name: look[name.removeprefix("to_").replace("next_token", "next")] for name in ENCODER_SCORES}
    if probe is not None:
        got = induction_probe(lm.model, probe.seq_len, probe.seed, probe.bos, step(total - n_layer), should_stop)
        scores |= {name: got[name.removeprefix("repeat_")].cpu().float() for name in PROBE_SCORES}
    return HeadTable(scores, 0 if trace is None else len(ids), probe)


def rollout(trace: Trace, head_reduce: str = "mean", progress: Progress | None = None) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020): (L, T, T), entry l is the flow through layers 0..l.

    Each layer's heads are averaged (or maxed), the identity is added for the residual
    connection, rows are renormalised, and the layers are multiplied in order.
    """
    if head_reduce not in ("mean", "max"):
        raise ValueError(f"head_reduce={head_reduce!r}: choose 'mean' or 'max'")
    out, acc = [], None
    for layer in range(trace.n_layers()):  # one layer's (H, T, T) at a time
        pat = trace.pattern(layer).float()
        a = pat.mean(0) if head_reduce == "mean" else pat.amax(0)  # (T, T)
        eye = torch.eye(a.shape[-1], device=a.device)
        a = 0.5 * a + 0.5 * eye
        a = a / a.sum(-1, keepdim=True)
        acc = a if acc is None else a @ acc
        out.append(acc)
        if progress is not None:
            progress(layer + 1, trace.n_layers())
    return torch.stack(out)  # (L, T, T)


def strongest_heads(lm) -> dict[str, tuple[int, int, float]]:
    """The strongest previous-token and induction heads on the head table's probe (no prompt):
    {"previous_token": (layer, head, score), "induction": (...)}."""
    heads = head_table(lm)
    return {k: top_head(heads.scores[f"repeat_{k}"]) for k in ("previous_token", "induction")}


def opening_head(lm, strongest=strongest_heads) -> tuple[int, int] | None:
    """The head an attention view of `lm` opens on: its induction head when it has a real one
    (probe score at least `INDUCTION_SHOWN`) and more heads than a student browses
    (`BROWSABLE_HEADS`); None: layer 0 head 0, where browsing starts. `strongest`:
    `strongest_heads` or a cached copy of it, called only for a model that large."""
    cfg = lm.config
    if cfg.n_layer * cfg.n_head <= BROWSABLE_HEADS or probe_settings(lm) is None:
        return None
    layer, head, score = strongest(lm)["induction"]
    return (layer, head) if score >= INDUCTION_SHOWN else None
