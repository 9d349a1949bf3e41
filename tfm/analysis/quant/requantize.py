"""What re-quantizing a model to a coarser GGUF type does to its predictions and attention.

`requantize(lm, "Q4_0")` returns a new LM (the shared one is never touched): a copy of the
model whose every weight matrix went through `gguf.quants.quantize` to that type and back
with `gguf.quants.dequantize`, row by row in blocks of 32, as llama.cpp quantizes a matrix
(norm gains, biases and other vectors stay float32, as llama.cpp keeps them). A q / k matrix
whose rows llama.cpp stores in another order quantizes the same, since blocks lie within a
row; so a matrix goes through in chunks of rows (`CHUNK_NUMBERS` numbers at a time), equal to
the whole matrix at once, and a vocabulary matrix's temporaries stay a few MB. Its cost is a
full copy of the weights: `copy_bytes(lm)` says how much before it is paid.

`compare(lm, requantized, ids, layer, head)` runs both on the same ids: the next-token
distributions (KL divergence at every position, the top tokens and their ranks before and
after) and one head's attention pattern from each, side by side.

`requantized_effects(lm, qtype, ids)` is what a shared server keeps instead of the copy: it
builds the copy, runs both models once, keeps every layer's and head's pattern (2·L·H·T² floats,
bounded by `MAX_PATTERN_BYTES`) and the predictions, and drops the copy before it returns.
`.effect(layer, head)` is then `compare(...)`'s `QuantEffect`, the same numbers, with no model.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gguf_quants

from ...core.encoder import final_name, head_logits, logit_chunks
from ...core.validate import check_int
from ...loaders.loading import LM
from .blocks import DECODED, BlockView, QuantTable, TensorRow, block_size, block_view, gguf_path, tensor_table

__all__ = [
    "DECODED",
    "TARGETS",
    "Target",
    "QuantEffect",
    "QuantComparison",
    "copy_bytes",
    "requantize",
    "compare",
    "requantized_effects",
    "bits_per_weight",
    "BlockView",
    "QuantTable",
    "TensorRow",
    "block_view",
    "block_size",
    "gguf_path",
    "tensor_table",
]

# What `gguf.quants.quantize` can write (K-quants it only reads), finest first.
Target = Literal["Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "MXFP4"]
TARGETS: tuple[str, ...] = ("Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "MXFP4")
CHUNK_NUMBERS = 1 << 20  # a matrix is quantized this many numbers at a time (whole rows)
MAX_PATTERN_BYTES = 64 << 20  # requantized_effects' patterns, both models (SmolLM2, 48 tokens: 5 MB)


def bits_per_weight(qtype: str) -> float:
    size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]]
    return 8 * type_size / size


def copy_bytes(lm: LM) -> int:
    """Bytes a re-quantized copy holds: every parameter once (a tied head counted once)."""
    return sum(p.numel() * p.element_size() for p in lm.model.parameters())


def _check_target(qtype: str) -> GGMLQuantizationType:
    if qtype not in TARGETS:
        raise ValueError(
            f"re-quantizing to {str(qtype)[:20]!r} is not possible here; choose one of "
            f"{', '.join(TARGETS)} (the types the gguf package can write)"
        )
    return GGMLQuantizationType[qtype]


def _round_trip(p: torch.Tensor, kind: GGMLQuantizationType, rows: int) -> None:
    """`p`'s rows quantized and dequantized in place, `rows` rows at a time."""
    for a in range(0, p.shape[0], rows):
        part = p[a : a + rows]
        back = gguf_quants.dequantize(gguf_quants.quantize(part.float().cpu().numpy(), kind), kind)
        part.copy_(torch.from_numpy(np.ascontiguousarray(back, dtype=np.float32)).reshape(part.shape))


@torch.no_grad()
def requantize(lm: LM, qtype: str, progress=None, rows_at_once: int | None = None) -> LM:
    """A copy of `lm` with every weight matrix quantized to `qtype` and back (module doc).
    `progress(done, total)` is called after each matrix; `rows_at_once` (default: `CHUNK_NUMBERS`
    numbers' worth) only bounds the temporaries, never changes a number."""
    kind = _check_target(qtype)
    block = GGML_QUANT_SIZES[kind][0]
    if rows_at_once is not None:
        check_int("rows_at_once", rows_at_once, 1, 1 << 30)
    model = copy.deepcopy(lm.model)  # the shared model is only read
    mats = [(n, p) for n, p in model.named_parameters() if p.dim() == 2]
    for i, (name, p) in enumerate(mats):
        if p.shape[-1] % block:
            raise ValueError(f"{name} has rows of {p.shape[-1]} numbers, not a multiple of {qtype}'s blocks of {block}")
        _round_trip(p.detach(), kind, rows_at_once or max(1, CHUNK_NUMBERS // p.shape[-1]))
        if progress is not None:
            progress(i + 1, len(mats))
    meta = dict(lm.meta, requantized=qtype)
    return dataclasses.replace(lm, model=model.eval(), source=f"{lm.source} re-quantized to {qtype}", meta=meta)


@dataclass(frozen=True)
class QuantEffect:
    """Both models on the same ids."""

    kl: np.ndarray  # (T,) KL(original ‖ re-quantized) of the next-token distribution, nats
    top_ids: tuple[int, ...]  # the original's top tokens at the last position, then the re-quantized top-1 if new
    p_original: np.ndarray  # their probabilities under each model
    p_requantized: np.ndarray
    rank_original: np.ndarray  # their ranks (0 = most likely) under each model
    rank_requantized: np.ndarray
    layer: int
    head: int
    pattern_original: np.ndarray  # (T, T) that head's attention under each model
    pattern_requantized: np.ndarray

    @property
    def same_top1(self) -> bool:
        return int(self.rank_requantized[0]) == 0


@dataclass(frozen=True)
class QuantComparison:
    """`requantized_effects`' result: QuantEffect's predictions and every head's patterns."""

    qtype: str
    predictions: tuple  # QuantEffect's first six fields, kl to rank_requantized
    patterns_original: np.ndarray  # (L, H, T, T) every layer's and head's attention under each model
    patterns_requantized: np.ndarray

    def effect(self, layer: int, head: int) -> QuantEffect:
        """What `compare(lm, requantize(lm, qtype), ids, layer, head)` returns."""
        layer = check_int("layer", layer, 0, self.patterns_original.shape[0] - 1)
        head = check_int("head", head, 0, self.patterns_original.shape[1] - 1)
        return QuantEffect(
            *self.predictions, layer, head, self.patterns_original[layer, head], self.patterns_requantized[layer, head]
        )


def _run(lm: LM, ids: torch.Tensor, layers: range):
    """The final hidden states (T, D), whose logits are read a few rows at a time (`_predictions`: no (T, V)
    logits held), and the patterns (len(layers), H, T, T) of `layers`."""
    out = lm.model(ids, trace=True, last_only=True, **({"keep": ("pattern",)} if len(layers) > 1 else {}))
    final = out.trace[final_name(lm.model)][0]
    return final, np.stack([out.trace.pattern(layer).float().cpu().numpy() for layer in layers])


def _log_probs(lm: LM, x: torch.Tensor, n: int) -> torch.Tensor:
    return torch.log_softmax(head_logits(lm.model, x).float()[:, :n], -1)  # (rows, n)


def _ranks(logp: torch.Tensor, ids: list[int]) -> np.ndarray:
    return np.array([int((logp > logp[i]).sum()) for i in ids])


def _predictions(lm: LM, requantized: LM, final_p: torch.Tensor, final_q: torch.Tensor, k: int) -> tuple:
    """QuantEffect's kl, top_ids, p_original, p_requantized, rank_original, rank_requantized, from both
    models' final hidden states (`_run`), their logits a chunk of rows at a time."""
    n = min(lm.tokenizer.vocab_size, lm.config.vocab_size)  # padded rows are no tokens
    kl = []
    for rows in logit_chunks(lm.model, final_p):
        logp, logq = _log_probs(lm, final_p[rows], n), _log_probs(requantized, final_q[rows], n)
        kl.append((logp.exp() * (logp - logq)).sum(-1).clamp_min(0))
    last_p, last_q = logp[-1].cpu(), logq[-1].cpu()  # the last chunk ends at the last position
    top = last_p.topk(k).indices.tolist()
    new_top1 = int(last_q.argmax())
    top += [] if new_top1 in top else [new_top1]
    return (
        torch.cat(kl).cpu().numpy(),
        tuple(top),
        last_p[top].exp().numpy(),
        last_q[top].exp().numpy(),
        _ranks(last_p, top),
        _ranks(last_q, top),
    )


def _ids(lm: LM, ids) -> torch.Tensor:
    return torch.tensor([list(ids)], dtype=torch.long, device=lm.device)


@torch.inference_mode()
def compare(lm: LM, requantized: LM, ids, layer: int, head: int, k: int = 10) -> QuantEffect:
    """Next-token distributions and one head's pattern of both models on `ids`."""
    cfg = lm.config
    layer = check_int("layer", layer, 0, cfg.n_layer - 1)
    head = check_int("head", head, 0, cfg.n_head - 1)
    k = check_int("k", k, 1, 50)
    idx, at = _ids(lm, ids), range(layer, layer + 1)
    (final_p, pat), (final_q, patq) = _run(lm, idx, at), _run(requantized, idx, at)
    return QuantEffect(*_predictions(lm, requantized, final_p, final_q, k), layer, head, pat[0, head], patq[0, head])


def requantized_effects(lm: LM, qtype: str, ids, k: int = 10, progress=None) -> QuantComparison:
    """`compare` for every layer and head at once, on a copy re-quantized here and dropped before
    returning (module doc): the result holds no model. `progress` as `requantize`'s."""
    cfg, k = lm.config, check_int("k", k, 1, 50)
    _check_target(qtype)
    need = 2 * cfg.n_layer * cfg.n_head * len(ids) ** 2 * 4
    if need > MAX_PATTERN_BYTES:
        raise ValueError(
            f"every head's pattern over {len(ids)} tokens takes {need / 2**20:.0f} MiB, over "
            f"{MAX_PATTERN_BYTES / 2**20:.0f} MiB: compare fewer tokens, or one head with compare()"
        )
    idx, layers = _ids(lm, ids), range(cfg.n_layer)
    with torch.inference_mode():  # the original first: its forward is freed before the copy exists
        final_p, pats = _run(lm, idx, layers)
    requantized = requantize(lm, qtype, progress)  # outside inference mode, as a caller's copy is made
    with torch.inference_mode():
        final_q, patsq = _run(requantized, idx, layers)
        predictions = _predictions(lm, requantized, final_p, final_q, k)
        del requantized
        return QuantComparison(qtype, predictions, pats, patsq)
