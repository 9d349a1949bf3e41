"""TopK sparse autoencoders on one layer's residual stream, and the files they live in.

    sae = load_sae("assets/sae/default", lm)       # checks width and layer against the model
    acts = sae.encode(x)                            # (N, F): k non-negative entries per row
    x_hat = sae.decode(acts)                        # (N, D)

An SAE reads the residual stream entering block `layer` (`resid_pre`; the stream after
`layer` blocks). encode: pre = (x - b_dec) W_enc + b_enc, keep the k largest entries of each
row, ReLU them, zero the rest; decode: acts W_dec + b_dec. Any input normalisation used in
training is folded into the weights, so these formulas hold on raw activations.

A folder holds `sae.safetensors` (W_enc (D, F), b_enc (F,), W_dec (F, D), b_dec (D,), fp16),
`card.json` (the config, the training command and the measured metrics), `README.md`, and
`features.safetensors` (each feature's top-activating held-out contexts and activation
histogram, for the Features page). Never pickle: safetensors and JSON only, sizes bounded
before reading.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from ...core.config import JsonConfig
from ...core.files import folder_file, read_json, reading
from ...core.validate import check_int, from_json_object
from ...loaders.weights import read_safetensors
from .topk import TopKDictionary, check_fields

SAE_FILE, CARD_FILE, FEATURES_FILE = "sae.safetensors", "card.json", "features.safetensors"
MAX_SAE_BYTES = 64 * 2**20  # an SAE file larger than this is refused before reading
MAX_CARD_BYTES = 2**20
MAX_FEATURES = 2**17


@dataclass(frozen=True)
class SAEConfig(JsonConfig):
    """What an SAE is: its model's width, its layer, its dictionary size and k."""

    _kind = "an SAE config"

    d_model: int
    n_features: int
    k: int
    layer: int
    model: str = ""  # the model spec it was trained on ("default", "smollm2"): informative

    def __post_init__(self) -> None:
        check_fields(self, MAX_FEATURES, "the SAE")
        check_int("layer", self.layer, 0)


class SAE(TopKDictionary):
    """A TopK sparse autoencoder (float32 parameters in memory): it subtracts b_dec before encoding."""

    centered = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode_kept(*self.topk(x))  # only k rows of W_dec per input


def save_sae(sae: SAE, folder: Path | str, card: dict, readme: str) -> None:
    """Writes sae.safetensors (fp16) and card.json ({"config": ..., **card}) and README.md."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {n: p.detach().to(torch.float16).contiguous() for n, p in sae.named_parameters()}
    save_file(tensors, folder / SAE_FILE)
    (folder / CARD_FILE).write_text(json.dumps({"config": sae.cfg.to_dict(), **card}, indent=2) + "\n")
    (folder / "README.md").write_text(readme)


def _bounded(path: Path, limit: int, what: str) -> Path:
    try:
        folder_file(path.parent, path.name, what)
    except FileNotFoundError:
        raise ValueError(
            f"{what} {path.name} is missing in {path.parent.name}: an SAE folder holds "
            f"{SAE_FILE} and {CARD_FILE} (python -m tfm.train.sae train writes them)"
        ) from None
    if path.stat().st_size > limit:
        raise ValueError(f"{what} {path.name} is {path.stat().st_size} bytes, over the {limit} allowed")
    return path


def read_card(folder: Path | str) -> dict:
    """The card of an SAE folder (JSON, size-bounded), with its config checked."""
    return card_with_config(_bounded(Path(folder) / CARD_FILE, MAX_CARD_BYTES, "the card"), SAEConfig, "the SAE config")


def card_with_config(path: Path, config_cls, what: str) -> dict:
    """A card file (JSON, size-bounded) whose "config" object becomes a checked `config_cls`
    (SAE and transcoder cards alike)."""
    card = read_json(path, MAX_CARD_BYTES)
    if not isinstance(card, dict) or not isinstance(card.get("config"), dict):
        raise ValueError(f'{path.name} has no "config" object')
    with reading(path.name):
        card["config"] = from_json_object(config_cls, card["config"], what)
    return card


def check_fits(cfg: SAEConfig, model_cfg) -> None:
    """One clear message when an SAE does not belong to this model."""
    if cfg.d_model != model_cfg.d_model:
        raise ValueError(
            f"this SAE reads a {cfg.d_model}-wide residual stream but the model's is "
            f"{model_cfg.d_model} wide: pick the SAE trained for this model"
        )
    if not 0 <= cfg.layer < model_cfg.n_layer:
        raise ValueError(
            f"this SAE reads layer {cfg.layer} but the model has layers 0..{model_cfg.n_layer - 1}: "
            f"pick the SAE trained for this model"
        )


def load_sae(folder: Path | str, lm=None) -> tuple[SAE, dict]:
    """(SAE in float32, its card) from a folder; with `lm`, checked against that model."""
    folder = Path(folder)
    card = read_card(folder)
    cfg: SAEConfig = card["config"]
    if lm is not None:
        check_fits(cfg, lm.config)
    tensors = read_safetensors(_bounded(folder / SAE_FILE, MAX_SAE_BYTES, "the weights"))
    d, f = cfg.d_model, cfg.n_features
    want = {"W_enc": (d, f), "b_enc": (f,), "W_dec": (f, d), "b_dec": (d,)}
    got = {n: tuple(t.shape) for n, t in tensors.items()}
    if got != want:
        raise ValueError(f"{SAE_FILE} holds {got}, but its card's config needs {want}")
    sae = SAE(cfg)
    with torch.no_grad():
        for name, t in tensors.items():
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"{SAE_FILE}: {name} has NaN or infinite entries")
            getattr(sae, name).copy_(t.float())
    return sae.eval().requires_grad_(False), card


def load_feature_data(folder: Path | str) -> dict[str, torch.Tensor]:
    """features.safetensors: ctx_ids (F, n, W) int32 (-1 = no token), ctx_acts (F, n, W),
    hist (F, B) counts over [0, hist_max[f]], hist_max (F,), freq (F,) firing rate."""
    return read_safetensors(_bounded(Path(folder) / FEATURES_FILE, MAX_SAE_BYTES, "the feature data"))


@torch.no_grad()
def stream_at(model, idx: torch.Tensor, layer: int) -> torch.Tensor:
    """(B, T, D) the residual stream entering block `layer` (resid_pre), running only the
    blocks before it (the model's own code, no recorder: the same numbers as its trace)."""
    x, angles = model.embed(idx, 0, None)
    for block in model.blocks[:layer]:
        x = block(x, None, angles)
    return x
