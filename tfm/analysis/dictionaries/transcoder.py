"""Per-layer TopK transcoders: sparse features that read an MLP's input and write its output.

    ts = load_transcoders("assets/transcoders/default", lm)   # checked against the model
    tc = ts.layers[3]                 # block 3's transcoder
    acts = tc.encode(x)               # x: (..., D) blocks.3.ln2.output, the MLP's input -> (..., F)
    y = tc.decode(acts)               # (..., D) ~ blocks.3.mlp_out

encode: pre = x W_enc + b_enc, keep the k largest entries of each row, ReLU them, zero the rest;
decode: acts W_dec + b_dec. Unlike an SAE the input and output are different spaces, so there is
no b_dec subtracted before encoding. Replacing every MLP by its transcoder (plus the error
mlp_out - decode) and freezing attention patterns and norm scales makes the model linear between
feature activations: the attribution graph (graph.py here) is built on that.

A folder holds `card.json` (the set's config, the training command, per-layer metrics) and one
`layer_LL.safetensors` per finished layer (W_enc (D, F), b_enc (F,), W_dec (F, D), b_dec (D,),
fp16), so a long training run can stop and go on. With `storage="int8"` the two matrices are kept
as int8 with one float32 scale per feature (W_enc_q (D, F) and W_enc_scale (F,), W_dec_q (F, D)
and W_dec_scale (F,): half the bytes, so twice the features in the same file size); the loader
dequantizes them to float32, so every number computed afterwards is the same code either way. Never pickle: safetensors and JSON only, sizes
bounded before reading.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from ...core.config import JsonConfig
from ...core import files
from ...core.validate import check_int
from ...loaders.weights import read_safetensors
from .sae import card_with_config
from .topk import TopKDictionary, check_fields

CARD_FILE = "card.json"
MAX_LAYER_BYTES = 16 * 2**20  # one layer's file larger than this is refused before reading
MAX_CARD_BYTES = 2**20
MAX_FEATURES = 2**16
STORAGES = ("fp16", "int8")
MAX_VALUE = 65504.0  # the largest float16: a weight of an int8 set, dequantized, stays within it


def layer_file(layer: int) -> str:
    return f"layer_{layer:02d}.safetensors"


@dataclass(frozen=True)
class TranscoderConfig(JsonConfig):
    """What a transcoder set is: its model's width and depth, the dictionary size and k per layer."""

    _kind = "a transcoder config"

    d_model: int
    n_layer: int
    n_features: int
    k: int
    model: str = ""  # the model spec it was trained on ("default", "smollm2"): informative
    storage: str = "fp16"  # how the layer files hold the matrices: "fp16" or "int8" (+ per-feature scales)

    def __post_init__(self) -> None:
        check_fields(self, MAX_FEATURES, "the transcoder set")
        check_int("n_layer", self.n_layer, 1, 1000)
        if self.storage not in STORAGES:
            raise ValueError(f"storage {str(self.storage)[:20]!r}: choose one of {list(STORAGES)}")


class Transcoder(TopKDictionary):
    """One block's TopK transcoder (float32 parameters in memory): no b_dec subtracted before encoding."""

    def __init__(self, cfg: TranscoderConfig, layer: int) -> None:
        super().__init__(cfg)
        self.layer = layer


@dataclass(frozen=True, eq=False)
class TranscoderSet:
    """One transcoder per block (index = layer), the card, and an identity naming the exact files."""

    cfg: TranscoderConfig
    layers: tuple[Transcoder, ...]
    card: dict
    identity: str


def quantize(w: torch.Tensor, feature_axis: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 with one float32 scale per feature (max |w| / 127 along the other axis)."""
    scale = w.detach().abs().amax(dim=1 - feature_axis).float().clamp_min(1e-12) / 127
    shaped = scale[None, :] if feature_axis == 1 else scale[:, None]
    return (w.detach() / shaped).round().clamp(-127, 127).to(torch.int8), scale


def _dequantize(q: torch.Tensor, scale: torch.Tensor, feature_axis: int) -> torch.Tensor:
    return q.float() * (scale.float()[None, :] if feature_axis == 1 else scale.float()[:, None])


def _stored(tc: Transcoder) -> dict[str, torch.Tensor]:
    """The tensors a layer file holds for the config's storage."""
    half = {n: p.detach().to(torch.float16) for n, p in tc.named_parameters()}
    if tc.cfg.storage == "fp16":
        return half
    (enc, enc_s), (dec, dec_s) = quantize(tc.W_enc, 1), quantize(tc.W_dec, 0)
    return {
        "W_enc_q": enc,
        "W_enc_scale": enc_s,
        "W_dec_q": dec,
        "W_dec_scale": dec_s,
        "b_enc": half["b_enc"],
        "b_dec": half["b_dec"],
    }


def _expected(cfg: TranscoderConfig) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    d, f = cfg.d_model, cfg.n_features
    if cfg.storage == "fp16":
        return {
            "W_enc": ((d, f), torch.float16),
            "b_enc": ((f,), torch.float16),
            "W_dec": ((f, d), torch.float16),
            "b_dec": ((d,), torch.float16),
        }
    return {
        "W_enc_q": ((d, f), torch.int8),
        "W_enc_scale": ((f,), torch.float32),
        "W_dec_q": ((f, d), torch.int8),
        "W_dec_scale": ((f,), torch.float32),
        "b_enc": ((f,), torch.float16),
        "b_dec": ((d,), torch.float16),
    }


def stored_copy(tc: Transcoder) -> Transcoder:
    """The transcoder exactly as its file will load (fp16 rounding or int8 quantization applied)."""
    return _from_tensors(tc.cfg, tc.layer, _stored(tc))


def save_layer(tc: Transcoder, folder: Path | str) -> Path:
    """Writes one finished layer in the config's storage; the card is written separately (`write_card`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / layer_file(tc.layer)
    save_file({n: t.contiguous() for n, t in _stored(tc).items()}, path)
    return path


HOLDS = (
    f"a transcoder folder holds {CARD_FILE} and one layer_LL.safetensors per layer (the transcoder trainer writes them)"
)


def write_card(folder: Path | str, cfg: TranscoderConfig, card: dict) -> None:
    files.write_card(Path(folder) / CARD_FILE, cfg, card)


def read_card(folder: Path | str) -> dict:
    """The card of a transcoder folder (JSON, size-bounded), with its config checked."""
    path = files.bounded_member(Path(folder) / CARD_FILE, MAX_CARD_BYTES, "the card", HOLDS)
    return card_with_config(path, TranscoderConfig, "the transcoder config")


def check_fits(cfg: TranscoderConfig, model_cfg) -> None:
    """One clear message when this set does not belong to this model."""
    files.check_width(cfg, model_cfg, "these transcoders are", "pick the set trained for it")


def load_layer(folder: Path, cfg: TranscoderConfig, layer: int) -> Transcoder:
    path = files.bounded_member(folder / layer_file(layer), MAX_LAYER_BYTES, "the weights", HOLDS)
    tensors = read_safetensors(path)
    want = {n: (shape, str(dtype).removeprefix("torch.")) for n, (shape, dtype) in _expected(cfg).items()}
    got = {n: (tuple(t.shape), str(t.dtype).removeprefix("torch.")) for n, t in tensors.items()}
    if got != want:
        raise ValueError(f"{path.name} holds {got}, but the card's config ({cfg.storage} storage) needs {want}")
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{path.name}: {name} has NaN or infinite entries")
    return _from_tensors(cfg, layer, tensors)


def _from_tensors(cfg: TranscoderConfig, layer: int, tensors: dict[str, torch.Tensor]) -> Transcoder:
    if cfg.storage == "int8":
        tensors = {
            "W_enc": _dequantize(tensors["W_enc_q"], tensors["W_enc_scale"], 1),
            "W_dec": _dequantize(tensors["W_dec_q"], tensors["W_dec_scale"], 0),
            "b_enc": tensors["b_enc"],
            "b_dec": tensors["b_dec"],
        }
    tc = Transcoder(cfg, layer)
    with torch.no_grad():
        for name, t in tensors.items():
            getattr(tc, name).copy_(t.float())
            if not bool((getattr(tc, name).abs() <= MAX_VALUE).all()):  # NaN fails too
                raise ValueError(
                    f"{layer_file(layer)}: {name} holds values beyond ±{MAX_VALUE:g} (or NaN) once "
                    "read: retrain or re-save the set"
                )
    return tc.eval().requires_grad_(False)


def load_transcoders(folder: Path | str, lm=None) -> TranscoderSet:
    """Every layer of a folder (all must be there), checked against `lm`'s config when given."""
    folder = Path(folder)
    card = read_card(folder)
    cfg: TranscoderConfig = card["config"]
    if lm is not None:
        check_fits(cfg, lm.config)
    layers = tuple(load_layer(folder, cfg, i) for i in range(cfg.n_layer))
    h = hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode())
    for i in range(cfg.n_layer):
        h.update((folder / layer_file(i)).read_bytes())
    return TranscoderSet(cfg, layers, card, h.hexdigest()[:16])


def random_transcoders(model_cfg, n_features: int, k: int, seed: int = 0) -> TranscoderSet:
    """An untrained set of the model's shape (tests: exactness does not depend on training)."""
    cfg = TranscoderConfig(model_cfg.d_model, model_cfg.n_layer, n_features, k, "random")
    gen, layers = torch.Generator().manual_seed(seed), []
    for i in range(cfg.n_layer):
        tc = Transcoder(cfg, i)
        with torch.no_grad():
            for p in tc.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) / cfg.d_model**0.5)
        layers.append(tc.eval().requires_grad_(False))
    return TranscoderSet(cfg, tuple(layers), {"config": cfg}, f"random-{seed}")
