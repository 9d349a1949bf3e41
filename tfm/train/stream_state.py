"""What `python -m tfm.train.transcoders_stream` keeps between chunks, and its checkpoint: every
layer's parameters, Adam state, scales and feature-firing counters, the data position, the
shuffling generator and the tokens seen, in one file written atomically (a temporary file, then a
rename), so a run stopped at any moment (killed, or the machine gone) goes on from the last
checkpoint exactly as if it had not stopped.

The checkpoint holds tensors and plain numbers only and is read with `torch.load(weights_only=True)`
(nothing unpickled); the run's settings are in it, and a run with other settings is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import topk_sparse as S
from .topk import mean_square_scale

CHECKPOINT = "state.pt"


@dataclass
class LayerState:
    """One layer's transcoder in training (scaled inputs and outputs; tfm.train.topk_sparse's layout)."""

    params: dict[str, torch.Tensor]
    opt: torch.optim.Adam
    last_fired: torch.Tensor  # (F,) rows since each feature last fired
    scales: tuple[float, float]  # (input, output) mean-square scales, folded in when written
    steps: int = 0
    train_s: float = 0.0
    fvu_ema: float = float("nan")  # running FVU of the training batches (before each update)

    def record(self, fvu: float, weight: float = 0.05) -> None:
        self.fvu_ema = fvu if self.fvu_ema != self.fvu_ema else (1 - weight) * self.fvu_ema + weight * fvu


@dataclass
class RunState:
    """The whole run between chunks."""

    settings: dict
    layers: dict[int, LayerState]
    gen: torch.Generator  # shuffles each chunk's rows
    chunk: int = 0  # the next chunk to read
    tokens: int = 0  # activations each layer has trained on
    elapsed_s: float = 0.0
    history: list = field(default_factory=list)  # held-out FVU per layer at checkpoints of tokens


def new_layer(n_features: int, x: torch.Tensor, y: torch.Tensor, lr: float, gen: torch.Generator) -> LayerState:
    """A layer's starting state from its first chunk (x, y raw float32): the scales give rows a
    unit mean square, b_dec starts at the mean scaled output."""
    sx, sy = mean_square_scale(x), mean_square_scale(y)
    params = S.new_params(n_features, x.shape[-1], gen, y.mean(0) / sy)
    last = torch.zeros(n_features, dtype=torch.long)
    return LayerState(params, S.adam(params, lr), last, (sx, sy))


def _layer_dict(s: LayerState) -> dict:
    return {
        "params": s.params,
        "adam": s.opt.state_dict(),
        "last_fired": s.last_fired,
        "scales": list(s.scales),
        "steps": s.steps,
        "train_s": s.train_s,
        "fvu_ema": s.fvu_ema,
    }


def _layer_from(d: dict, lr: float) -> LayerState:
    params = {n: d["params"][n].contiguous() for n in S.NAMES}
    opt = S.adam(params, lr)
    opt.load_state_dict(d["adam"])
    sx, sy = d["scales"]
    return LayerState(params, opt, d["last_fired"], (sx, sy), d["steps"], d["train_s"], d["fvu_ema"])


def save(folder: Path, state: RunState) -> Path:
    """Writes the checkpoint atomically: a reader (or a restart) sees the old file or the new one."""
    folder.mkdir(parents=True, exist_ok=True)
    path, tmp = folder / CHECKPOINT, folder / (CHECKPOINT + ".tmp")
    data = {
        "settings": state.settings,
        "layers": {str(i): _layer_dict(s) for i, s in state.layers.items()},
        "gen": state.gen.get_state(),
        "chunk": state.chunk,
        "tokens": state.tokens,
        "elapsed_s": state.elapsed_s,
        "history": state.history,
    }
    torch.save(data, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load(folder: Path, settings: dict, lr: float) -> RunState | None:
    """The checkpoint in `folder` (None when there is none), refused when its settings differ."""
    path = folder / CHECKPOINT
    if not path.is_file():
        return None
    data = torch.load(path, weights_only=True)
    if data["settings"] != settings:
        raise ValueError(
            f"the checkpoint in {folder.name} was written with {data['settings']}: pass the same "
            "settings to go on, or choose another --checkpoint folder"
        )
    gen = torch.Generator()
    gen.set_state(data["gen"])
    layers = {int(i): _layer_from(d, lr) for i, d in data["layers"].items()}
    return RunState(settings, layers, gen, data["chunk"], data["tokens"], data["elapsed_s"], data["history"])
