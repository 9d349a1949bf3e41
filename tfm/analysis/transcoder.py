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
fp16), so a long training run can stop and go on. Never pickle: safetensors and JSON only, sizes
bounded before reading.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..core.config import JsonConfig
from ..core.files import read_json, reading
from ..core.validate import check_int, from_json_object
from ..loaders.weights import read_safetensors

CARD_FILE = "card.json"
MAX_LAYER_BYTES = 16 * 2**20   # one layer's file larger than this is refused before reading
MAX_CARD_BYTES = 2**20
MAX_FEATURES = 2**16


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
    model: str = ""            # the model spec it was trained on ("default", "smollm2"): informative

    def __post_init__(self) -> None:
        check_int("d_model", self.d_model, 1)
        check_int("n_layer", self.n_layer, 1, 1000)
        check_int("n_features", self.n_features, 1, MAX_FEATURES)
        check_int("k", self.k, 1, self.n_features, " (at most n_features)")
        if not isinstance(self.model, str) or len(self.model) > 200:
            raise ValueError("the transcoder set's model name must be a short string")


class Transcoder(torch.nn.Module):
    """One block's TopK transcoder (float32 parameters in memory)."""

    def __init__(self, cfg: TranscoderConfig, layer: int) -> None:
        super().__init__()
        self.cfg, self.layer = cfg, layer
        d, f = cfg.d_model, cfg.n_features
        self.W_enc = torch.nn.Parameter(torch.zeros(d, f))
        self.b_enc = torch.nn.Parameter(torch.zeros(f))
        self.W_dec = torch.nn.Parameter(torch.zeros(f, d))
        self.b_dec = torch.nn.Parameter(torch.zeros(d))

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., F) pre-activations, before TopK."""
        return x.float() @ self.W_enc + self.b_enc

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., F) sparse activations: at most k non-zero entries per row."""
        pre = self.pre(x)
        vals, idx = pre.topk(self.cfg.k, dim=-1)
        return torch.zeros_like(pre).scatter_(-1, idx, vals.relu())

    def decode(self, acts: torch.Tensor) -> torch.Tensor:
        """(..., F) -> (..., D)."""
        return acts @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))


@dataclass(frozen=True, eq=False)
class TranscoderSet:
    """One transcoder per block (index = layer), the card, and an identity naming the exact files."""

    cfg: TranscoderConfig
    layers: tuple[Transcoder, ...]
    card: dict
    identity: str


def save_layer(tc: Transcoder, folder: Path | str) -> Path:
    """Writes one finished layer (fp16); the card is written separately (`write_card`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / layer_file(tc.layer)
    save_file({n: p.detach().to(torch.float16).contiguous() for n, p in tc.named_parameters()}, path)
    return path


def write_card(folder: Path | str, cfg: TranscoderConfig, card: dict) -> None:
    (Path(folder) / CARD_FILE).write_text(json.dumps({"config": cfg.to_dict(), **card}, indent=2) + "\n")


def _bounded(path: Path, limit: int, what: str) -> Path:
    if not path.is_file():
        raise ValueError(f"{what} {path.name} is missing in {path.parent.name}: a transcoder folder holds "
                         f"{CARD_FILE} and one layer_LL.safetensors per layer (the transcoder trainer writes them)")
    if path.stat().st_size > limit:
        raise ValueError(f"{what} {path.name} is {path.stat().st_size} bytes, over the {limit} allowed")
    return path


def read_card(folder: Path | str) -> dict:
    """The card of a transcoder folder (JSON, size-bounded), with its config checked."""
    path = _bounded(Path(folder) / CARD_FILE, MAX_CARD_BYTES, "the card")
    card = read_json(path, MAX_CARD_BYTES)
    if not isinstance(card, dict) or not isinstance(card.get("config"), dict):
        raise ValueError(f"{CARD_FILE} has no \"config\" object")
    with reading(CARD_FILE):
        card["config"] = from_json_object(TranscoderConfig, card["config"], "the transcoder config")
    return card


def check_fits(cfg: TranscoderConfig, model_cfg) -> None:
    """One clear message when a transcoder set does not belong to this model."""
    if (cfg.d_model, cfg.n_layer) != (model_cfg.d_model, model_cfg.n_layer):
        raise ValueError(f"these transcoders are for a model {cfg.d_model} wide with {cfg.n_layer} layers, but this "
                         f"one is {model_cfg.d_model} wide with {model_cfg.n_layer}: pick the set trained for it")


def load_layer(folder: Path, cfg: TranscoderConfig, layer: int) -> Transcoder:
    path = _bounded(folder / layer_file(layer), MAX_LAYER_BYTES, "the weights")
    tensors = read_safetensors(path)
    d, f = cfg.d_model, cfg.n_features
    want = {"W_enc": (d, f), "b_enc": (f,), "W_dec": (f, d), "b_dec": (d,)}
    got = {n: tuple(t.shape) for n, t in tensors.items()}
    if got != want:
        raise ValueError(f"{path.name} holds {got}, but the card's config needs {want}")
    tc = Transcoder(cfg, layer)
    with torch.no_grad():
        for name, t in tensors.items():
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"{path.name}: {name} has NaN or infinite entries")
            getattr(tc, name).copy_(t.float())
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
                p.copy_(torch.randn(p.shape, generator=gen) / cfg.d_model ** 0.5)
        layers.append(tc.eval().requires_grad_(False))
    return TranscoderSet(cfg, tuple(layers), {"config": cfg}, f"random-{seed}")
