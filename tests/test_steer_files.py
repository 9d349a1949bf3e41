"""Shipped steering calibrations (tfm.analysis.steering.files): each equals a fresh calibrate() of
its model on the CPU; a file is used only for the weights it names; a broken file is refused."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

import tfm
from tfm.analysis.steering import calibrate as calib
from tfm.analysis.steering import files as steer_files

pytestmark = pytest.mark.usefixtures("one_thread")


def assert_same_calibration(shipped, fresh) -> None:
    """The same choice and texts; the measured floats to 1e-4 (float32 products may take BLAS or
    oneDNN by timing, tfm/core/kernels.py: last bits differ between processes)."""
    assert shipped is not None
    assert (shipped.layer, shipped.strength, shipped.pair, shipped.prompt, shipped.moves) == (
        fresh.layer,
        fresh.strength,
        fresh.pair,
        fresh.prompt,
        fresh.moves,
    )
    assert len(shipped.trials) == len(fresh.trials)
    for a, b in zip(shipped.trials, fresh.trials):
        for f in fields(a):
            x, y = getattr(a, f.name), getattr(b, f.name)
            assert x == (pytest.approx(y, rel=1e-4, abs=1e-6) if isinstance(y, float) else y), (a, f.name)


# (gemma3's file: tests/test_gemma3_real.py, on that module's one load of the model)
@pytest.mark.parametrize("spec", ["default", "smollm2"])
def test_the_shipped_file_is_what_calibrate_measures(spec):
    lm = tfm.load(spec, device="cpu")
    assert_same_calibration(steer_files.shipped_calibration(lm, spec), calib.calibrate(lm))


def test_a_file_serves_only_the_weights_it_was_measured_on(make_model, tmp_path):
    lm = tfm.load("default", device="cpu")
    (tmp_path / "default.json").write_text((steer_files.STEER_ROOT / "default.json").read_text())
    assert steer_files.shipped_calibration(lm, "default", tmp_path) is not None
    other = make_model(lm.config, seed=3)  # same shape, other weights
    assert steer_files.fingerprint(other) != steer_files.fingerprint(lm)
    assert steer_files.load_calibration(tmp_path / "default.json", other) is None
    for spec in ("../default", "path:/etc", "{}", ""):  # not a plain name: never a file
        assert steer_files.shipped_calibration(lm, spec, tmp_path) is None


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(version=9), "not a steering calibration"),
        (lambda d: d.update(layer=99), "layer"),
        (lambda d: d["trials"][0].update(damage="x"), "damage"),
        (lambda d: d["trials"][0].pop("fluent"), "fields"),
        (lambda d: d.update(trials=[d["trials"][0]], prompt="another"), "one of its trials"),  # chosen one missing
        (lambda d: d.update(pad="x" * 70_000), "bytes"),
        (lambda d: d.update(moves="no"), "moves"),
        (lambda d: d.pop("moves"), "moves"),
        (lambda d: d.update(strength=1e300), "strength"),
        (lambda d: d["trials"][0].update(strength=-2.0), "strength"),
        (lambda d: d.update(version=True), "not a steering calibration"),
    ],
)
def test_a_broken_file_is_refused(tmp_path, mutate, message):
    lm = tfm.load("default", device="cpu")
    data = json.loads((steer_files.STEER_ROOT / "default.json").read_text())
    mutate(data)
    path = tmp_path / "default.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        steer_files.load_calibration(path, lm)
