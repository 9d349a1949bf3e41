"""What re-quantizing a model to a coarser GGUF type does to its predictions and attention.

`requantize(lm, "Q4_0")` returns a new LM (the shared one is never touched): a copy of the
model whose every weight matrix went through `gguf.quants.quantize` to that type and back
with `gguf.quants.dequantize`, row by row in blocks of 32, as llama.cpp quantizes a matrix
(norm gains, biases and other vectors stay float32, as llama.cpp keeps them). A q / k matrix
whose rows llama.cpp stores in another order quantizes the same, since blocks lie within a
row. Its cost is a full copy of the weights: `copy_bytes(lm)` says how much before it is paid.

`compare(lm, requantized, ids, layer, head)` runs both on the same ids: the next-token
distributions (KL divergence at every position, the top tokens and their ranks before and
after) and one head's attention pattern from each, side by side.
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

from ..core.validate import check_int
from ..loaders.loading import LM
from .quant_blocks import (DECODED, BlockView, QuantTable, TensorRow, block_view, gguf_path,
                           tensor_table)

__all__ = ["DECODED", "TARGETS", "Target", "QuantEffect", "copy_bytes", "requantize", "compare", "bits_per_weight",
           "BlockView", "QuantTable", "TensorRow", "block_view", "gguf_path", "tensor_table"]

# What `gguf.quants.quantize` can write (K-quants it only reads), finest first.
Target = Literal["Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "MXFP4"]
TARGETS: tuple[str, ...] = ("Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "MXFP4")


def bits_per_weight(qtype: str) -> float:
    size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType[qtype]]
    return 8 * type_size / size


def copy_bytes(lm: LM) -> int:
    """Bytes a re-quantized copy holds: every parameter once (a tied head counted once)."""
    return sum(p.numel() * p.element_size() for p in lm.model.parameters())


def _check_target(qtype: str) -> GGMLQuantizationType:
    if qtype not in TARGETS:
        raise ValueError(f"re-quantizing to {str(qtype)[:20]!r} is not possible here; choose one of "
                         f"{', '.join(TARGETS)} (the types the gguf package can write)")
    return GGMLQuantizationType[qtype]


@torch.no_grad()
def requantize(lm: LM, qtype: str, progress=None) -> LM:
    """A copy of `lm` with every weight matrix quantized to `qtype` and back (module doc).
    `progress(done, total)` is called after each matrix."""
    kind = _check_target(qtype)
    block = GGML_QUANT_SIZES[kind][0]
    model = copy.deepcopy(lm.model)  # the shared model is only read
    mats = [(n, p) for n, p in model.named_parameters() if p.dim() == 2]
    for i, (name, p) in enumerate(mats):
        if p.shape[-1] % block:
            raise ValueError(f"{name} has rows of {p.shape[-1]} numbers, not a multiple of {qtype}'s blocks of {block}")
        w = p.detach().float().cpu().numpy()
        back = gguf_quants.dequantize(gguf_quants.quantize(w, kind), kind)
        p.copy_(torch.from_numpy(np.ascontiguousarray(back, dtype=np.float32)).reshape(p.shape))
        if progress is not None:
            progress(i + 1, len(mats))
    meta = dict(lm.meta, requantized=qtype)
    return dataclasses.replace(lm, model=model.eval(), source=f"{lm.source} re-quantized to {qtype}", meta=meta)


@dataclass(frozen=True)
class QuantEffect:
    """Both models on the same ids."""
    kl: np.ndarray              # (T,) KL(original ‖ re-quantized) of the next-token distribution, nats
    top_ids: tuple[int, ...]    # the original's top tokens at the last position, then the re-quantized top-1 if new
    p_original: np.ndarray      # their probabilities under each model
    p_requantized: np.ndarray
    rank_original: np.ndarray   # their ranks (0 = most likely) under each model
    rank_requantized: np.ndarray
    layer: int
    head: int
    pattern_original: np.ndarray     # (T, T) that head's attention under each model
    pattern_requantized: np.ndarray

    @property
    def same_top1(self) -> bool:
        return int(self.rank_requantized[0]) == 0


def _run(lm: LM, ids: torch.Tensor, layer: int, head: int):
    out = lm.model(ids, trace=True)
    logp = torch.log_softmax(out.logits[0].float(), dim=-1)            # (T, V)
    return logp, out.trace.pattern(layer)[head].float().cpu().numpy()  # (T, T)


def _ranks(logp: torch.Tensor, ids: list[int]) -> np.ndarray:
    return np.array([int((logp > logp[i]).sum()) for i in ids])


@torch.inference_mode()
def compare(lm: LM, requantized: LM, ids, layer: int, head: int, k: int = 10) -> QuantEffect:
    """Next-token distributions and one head's pattern of both models on `ids`."""
    cfg = lm.config
    layer = check_int("layer", layer, 0, cfg.n_layer - 1)
    head = check_int("head", head, 0, cfg.n_head - 1)
    k = check_int("k", k, 1, 50)
    idx = torch.tensor([list(ids)], dtype=torch.long, device=lm.device)
    logp, pat = _run(lm, idx, layer, head)
    logq, patq = _run(requantized, idx, layer, head)
    n = min(lm.tokenizer.vocab_size, cfg.vocab_size)     # padded rows are no tokens
    logp, logq = torch.log_softmax(logp[:, :n], -1), torch.log_softmax(logq[:, :n], -1)
    kl = (logp.exp() * (logp - logq)).sum(-1).clamp_min(0).cpu().numpy()
    last_p, last_q = logp[-1].cpu(), logq[-1].cpu()
    top = last_p.topk(k).indices.tolist()
    new_top1 = int(last_q.argmax())
    top += [] if new_top1 in top else [new_top1]
    return QuantEffect(kl, tuple(top), last_p[top].exp().numpy(), last_q[top].exp().numpy(), _ranks(last_p, top),
                       _ranks(last_q, top), layer, head, pat, patq)
