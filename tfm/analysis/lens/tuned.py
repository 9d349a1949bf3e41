"""The tuned lens (Belrose et al. 2023): one affine translator per residual stream, trained so that
the stream, translated and then decoded as the logit lens decodes it (final norm, unembedding),
matches the model's own final distribution.

    lens = load_tuned_lens("assets/lens/smollm2", lm)      # checked against the model
    streams = residual_streams(trace)                     # (L+1, T, D): "embed", "block 0", ...
    tuned = lens.translate(streams)                       # x + x @ W_l + b_l for each row l
    grid = decode_streams(lm.model, tuned)                # the same grid as the logit lens

Row l's translator is x + x @ weight + bias with `weight` (D, D) stored (in, out), so a zero weight
and bias are the identity (where training starts) and the last row, which already is what the
final norm reads, stays at or near it. A folder holds `card.json` (the config, the training
command, data, steps and per-layer held-out KL) and `translator_LL.safetensors` (LL = row: 00 the
embedding's stream, LL = i + 1 after block i) with `weight` and `bias` in fp16. Never pickle:
safetensors and JSON only, sizes checked before reading (tfm.core.files).
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
from ...loaders.loading import ASSETS, is_asset_name
from ...loaders.weights import read_safetensors
from ..dictionaries.sae import card_with_config

CARD_FILE = "card.json"
MAX_CARD_BYTES = 2**20
MAX_D_MODEL = 8192
HEADER_BYTES = 4096  # a safetensors header of two tensors is a few hundred bytes
LENS_ROOT = ASSETS / "lens"
TRAIN_COMMAND = "python -m tfm.train.tuned_lens --model MODEL --out assets/lens/MODEL"


def translator_file(row: int) -> str:
    return f"translator_{row:02d}.safetensors"


@dataclass(frozen=True)
class TunedLensConfig(JsonConfig):
    """What a tuned-lens set is: its model's width and depth (one translator per stream: n_layer + 1)."""

    _kind = "a tuned-lens config"

    d_model: int
    n_layer: int
    model: str = ""  # the model spec it was trained on ("default", "smollm2"): informative

    def __post_init__(self) -> None:
        check_int("d_model", self.d_model, 1, MAX_D_MODEL)
        check_int("n_layer", self.n_layer, 1, 1000)
        if not isinstance(self.model, str) or len(self.model) > 200:
            raise ValueError("the tuned lens's model name must be a short string")

    @property
    def n_streams(self) -> int:
        return self.n_layer + 1

    def file_bytes(self) -> int:
        """The most bytes one translator file may have: fp16 weight and bias plus the header."""
        return 2 * (self.d_model * self.d_model + self.d_model) + HEADER_BYTES


@dataclass(frozen=True, eq=False)
class TunedLens:
    """Every stream's translator as float32 (n_streams, D, D) and (n_streams, D), the card, and an
    identity naming the exact files (a cache key part)."""

    cfg: TunedLensConfig
    weight: torch.Tensor
    bias: torch.Tensor
    card: dict
    identity: str

    def translate(self, streams: torch.Tensor) -> torch.Tensor:
        """(L+1, T, D) residual streams -> the same shape, row l through translator l."""
        if streams.shape[0] != self.cfg.n_streams or streams.shape[-1] != self.cfg.d_model:
            raise ValueError(
                f"the tuned lens reads {self.cfg.n_streams} streams {self.cfg.d_model} wide, got {tuple(streams.shape)}"
            )
        w, b = self.weight.to(streams.device), self.bias.to(streams.device)
        x = streams.float()
        return (x + torch.bmm(x, w) + b[:, None, :]).to(streams.dtype)  # (L+1, T, D)


def save_translator(folder: Path | str, row: int, weight: torch.Tensor, bias: torch.Tensor) -> Path:
    """Writes one translator in fp16 (the card is written separately: `write_card`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / translator_file(row)
    save_file(
        {
            "weight": weight.detach().to(torch.float16).contiguous(),
            "bias": bias.detach().to(torch.float16).contiguous(),
        },
        path,
    )
    return path


def stored(t: torch.Tensor) -> torch.Tensor:
    """A tensor as its file will load it (fp16 rounding), float32."""
    return t.detach().to(torch.float16).float()


HOLDS = (
    f"a tuned-lens folder holds {CARD_FILE} and one translator_LL.safetensors per stream "
    "(python -m tfm.train.tuned_lens writes them)"
)


def write_card(folder: Path | str, cfg: TunedLensConfig, card: dict) -> None:
    files.write_card(Path(folder) / CARD_FILE, cfg, card)


def read_card(folder: Path | str) -> dict:
    """The card of a tuned-lens folder (JSON, size-bounded), with its config checked."""
    path = files.bounded_member(Path(folder) / CARD_FILE, MAX_CARD_BYTES, "the card", HOLDS)
    return card_with_config(path, TunedLensConfig, "the tuned-lens config")


def check_fits(cfg: TunedLensConfig, model_cfg) -> None:
    """One clear message when this set does not belong to this model."""
    files.check_width(cfg, model_cfg, "this tuned lens is", f"train one for it ({TRAIN_COMMAND})")


def load_translator(folder: Path, cfg: TunedLensConfig, row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One translator's (weight (D, D), bias (D,)) as float32, its shapes, dtype and values checked."""
    path = files.bounded_member(folder / translator_file(row), cfg.file_bytes(), "the translator", HOLDS)
    tensors = read_safetensors(path)
    d = cfg.d_model
    want = {"weight": ((d, d), "float16"), "bias": ((d,), "float16")}
    got = {n: (tuple(t.shape), str(t.dtype).removeprefix("torch.")) for n, t in tensors.items()}
    if got != want:
        raise ValueError(f"{path.name} holds {got}, but the card's config needs {want}")
    for name, t in tensors.items():
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{path.name}: {name} has NaN or infinite entries")
    return tensors["weight"].float(), tensors["bias"].float()


def load_tuned_lens(folder: Path | str, lm=None) -> TunedLens:
    """Every translator of a folder (all must be there), checked against `lm`'s config when given."""
    folder = Path(folder)
    card = read_card(folder)
    cfg: TunedLensConfig = card["config"]
    if lm is not None:
        check_fits(cfg, lm.config)
    pairs = [load_translator(folder, cfg, r) for r in range(cfg.n_streams)]
    h = hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode())
    for r in range(cfg.n_streams):
        h.update((folder / translator_file(r)).read_bytes())
    weight, bias = torch.stack([w for w, _ in pairs]), torch.stack([b for _, b in pairs])
    return TunedLens(cfg, weight, bias, card, h.hexdigest()[:16])


def identity_lens(model_cfg) -> TunedLens:
    """Every translator the identity: the tuned lens equals the logit lens (tests, and where training starts)."""
    cfg = TunedLensConfig(model_cfg.d_model, model_cfg.n_layer, "identity")
    d, n = cfg.d_model, cfg.n_streams
    return TunedLens(cfg, torch.zeros(n, d, d), torch.zeros(n, d), {"config": cfg}, "identity")


def shipped_folder(spec: str, root: Path | None = None) -> Path | None:
    """`root`/<spec> (default assets/lens) when the model of this spec text ships a tuned lens
    there (a card in it), else None. Specs that are not plain names never ship one."""
    root = LENS_ROOT if root is None else root
    if not is_asset_name(spec):
        return None
    folder = root / spec
    return folder if (folder / CARD_FILE).is_file() else None


def shipped_lens(spec: str, lm, root: Path | None = None) -> TunedLens | None:
    """The tuned lens the model of this spec ships (checked against `lm`), or None when it ships
    none (or one still training); ValueError when its files are broken or belong to another model."""
    folder = shipped_folder(spec, root)
    return None if folder is None else finished_lens(folder, lm)


def finished_lens(folder: Path | str, lm=None) -> TunedLens | None:
    """The set in `folder` once its training finished (its card holds the held-out table); None
    while `python -m tfm.train.tuned_lens` is still writing it; ValueError for a broken one."""
    return load_tuned_lens(folder, lm) if "heldout" in read_card(folder) else None
