"""`python -m tfm.train.sae_labels` (and `python -m tfm.train`'s entry point): relabelling a copy of
the bundled SAE's folder writes what ships (the labels, their steering checks and the card's
counts, all computed afresh here), a README ending in the Labels section, and one clear error for
a folder without an SAE."""

from __future__ import annotations

import json
import runpy
import shutil
import sys

import pytest

import tfm
from tfm.analysis.dictionaries import features as FT
from tfm.analysis.dictionaries import labels as FL
from tfm.train import sae_labels

pytestmark = pytest.mark.usefixtures("one_thread")


def test_relabelling_the_bundled_sae_writes_what_ships(tmp_path, capsys):
    shipped = FT.bundled_folder("default")
    folder = tmp_path / "sae"
    shutil.copytree(shipped, folder)
    (folder / FL.LABELS_FILE).write_text("{}")  # an older format: replaced, not read
    assert sae_labels.main(["--model", "default", "--folder", str(folder)]) == 0
    lm = tfm.load("default", device="cpu")
    fresh, ships = FT.load_features(folder, lm).labels, FT.bundled(lm, "default").labels
    assert len(fresh.features) == len(ships.features) == 1536
    for f, (a, b) in enumerate(zip(fresh.features, ships.features)):
        assert (a.label, a.says_id, a.tokens, a.check) == (b.label, b.says_id, b.tokens, b.check), f
        assert a.margin == pytest.approx(b.margin, abs=2e-3) and a.gain == pytest.approx(b.gain, abs=2e-3), f
    entry = json.loads((folder / "card.json").read_text())["labels"]
    want = json.loads((shipped / "card.json").read_text())["labels"]
    counts = ("says", "on", "dead", "says_checked", "says_passed", "says_margin", "says_gain", "check_prompts")
    assert {k: entry[k] for k in counts} == {k: want[k] for k in counts}
    assert entry["says"] == sum(lab.says_id is not None for lab in fresh.features) > 0
    readme = (folder / "README.md").read_text()
    assert readme.count("## Labels") == 1 and readme.endswith(sae_labels.labels_markdown(entry))
    assert str(entry["says_passed"]) in capsys.readouterr().out


def test_a_folder_without_an_sae_is_one_error(tmp_path, capsys):
    assert sae_labels.main(["--model", "default", "--folder", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


def test_python_m_tfm_train_runs_the_trainers_command_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train", "--help"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_module("tfm.train", run_name="__main__")  # the package's __main__
    assert stop.value.code == 0 and "--max-steps" in capsys.readouterr().out
