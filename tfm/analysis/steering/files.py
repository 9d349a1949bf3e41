"""Steering calibrations kept as files. `calibrate.calibrate(lm)` takes seconds on SmolLM2
and gives the same answer every time for the same weights on the CPU, so the shipped models'
calibrations are measured once and shipped (assets/steer/<spec>.json) with a fingerprint of the
weights they were measured on. A file is used only for a model on the CPU whose fingerprint it
carries; any other model is measured as before. Written by

    python -m tfm.analysis.steering.files default smollm2 gemma3
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import MISSING, asdict, fields
from pathlib import Path

import torch

from ...core.files import read_json
from ...core.validate import check_int, check_number
from ...loaders.loading import ASSETS, is_asset_name, load
from .calibrate import STRENGTHS, Calibration, Trial, calibrate, check_layer

STEER_ROOT = ASSETS / "steer"
MAX_BYTES = 64 * 1024
VERSION = 1


def fingerprint(lm) -> str:
    """sha256 of the model's config and of the first 4,096 values of every parameter (float32):
    two models share it only if they share those weights. Config fields at their default are left
    out, so a field added to ModelConfig later does not orphan the shipped files."""
    model = lm.model if hasattr(lm, "model") else lm
    cfg = model.config
    defaults = {f.name: f.default for f in fields(cfg) if f.default is not MISSING}
    shown = {k: v for k, v in cfg.to_dict().items() if k not in defaults or v != _plain(defaults[k])}
    h = hashlib.sha256(json.dumps(shown, sort_keys=True).encode())
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().reshape(-1)[:4096].to("cpu", torch.float32).numpy().tobytes())
    return h.hexdigest()


def _plain(value):
    """A default as to_dict writes it (tuples as lists)."""
    return list(value) if isinstance(value, tuple) else value


def to_json(cal: Calibration, lm) -> str:
    return json.dumps({"version": VERSION, "fingerprint": fingerprint(lm), **asdict(cal)}, indent=1)


def _trial(raw: dict) -> Trial:
    if not isinstance(raw, dict) or set(raw) != {f.name for f in fields(Trial)}:
        raise ValueError(f"a trial has the fields {[f.name for f in fields(Trial)]}")
    plain = raw["plain"]
    if not (isinstance(plain, list) and len(plain) == 2):
        raise ValueError("a trial's plain counts are [positive, negative]")
    if not isinstance(raw["prompt"], str) or not isinstance(raw["fluent"], bool):
        raise ValueError("a trial's prompt is text and fluent is true or false")
    return Trial(
        raw["prompt"][:500],
        check_int("layer", raw["layer"], 0),
        _strength(raw["strength"]),
        *(check_number(k, raw[k]) for k in ("damage", "pull_toward", "pull_away")),
        check_int("toward", raw["toward"], 0),
        check_int("away", raw["away"], 0),
        tuple(check_int("plain", c, 0) for c in plain),
        check_number("distinct", raw["distinct"], 0, 1),
        raw["fluent"],
    )


def load_calibration(path: Path | str, lm) -> Calibration | None:
    """The calibration in `path` when it was measured on this model's weights (None otherwise);
    ValueError for a file that is not a calibration (size bounded before reading)."""
    data = read_json(path, MAX_BYTES)
    if (
        not isinstance(data, dict)
        or type(data.get("version")) is not int
        or data["version"] != VERSION
        or not isinstance(data.get("trials"), list)
    ):
        raise ValueError(f"{Path(path).name} is not a steering calibration (version {VERSION})")
    if data.get("fingerprint") != fingerprint(lm):
        return None
    trials = tuple(_trial(t) for t in data["trials"][:64])
    pair = data.get("pair")
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(w, str) for w in pair)):
        raise ValueError("a calibration's pair is two words")
    if not isinstance(data.get("moves"), bool) or not isinstance(data.get("prompt"), str):
        raise ValueError("a calibration's moves is true or false and its prompt is text")
    cal = Calibration(
        check_layer(lm, data.get("layer")),
        _strength(data.get("strength")),
        tuple(pair),
        data["prompt"][:500],
        trials,
        data["moves"],
    )
    if not any((t.prompt, t.layer) == (cal.prompt, cal.layer) for t in trials):
        raise ValueError("a calibration's chosen prompt and layer must be one of its trials")
    return cal


def _strength(value) -> float:
    """A measured strength: between 0 and the largest one calibrate probes (never cut silently)."""
    return check_number("strength", value, 0.0, max(STRENGTHS), " (as steer_calibrate measures it)")


def shipped_calibration(lm, spec: str, root: Path | None = None) -> Calibration | None:
    """The shipped calibration of the model of `spec` (a plain name) when it fits these weights
    on the CPU, else None."""
    root = STEER_ROOT if root is None else root
    model = lm.model if hasattr(lm, "model") else lm
    if not is_asset_name(spec) or next(model.parameters()).device.type != "cpu":
        return None
    path = root / f"{spec}.json"
    return load_calibration(path, lm) if path.is_file() else None


def main(specs: list[str]) -> None:
    STEER_ROOT.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        lm = load(spec, device="cpu")
        (STEER_ROOT / f"{spec}.json").write_text(to_json(calibrate(lm), lm))
        print(f"wrote {STEER_ROOT / f'{spec}.json'}")


if __name__ == "__main__":
    main(sys.argv[1:])
