"""The bundled model's card states the head scores the app measures (same probe, same engine)."""

import json
from pathlib import Path

import torch

from tfm import analysis, load

FOLDER = Path(__file__).resolve().parents[1] / "assets" / "models" / "default"


def test_bundled_card_heads_equal_the_apps_head_table():
    card = json.loads((FOLDER / "card.json").read_text())["heads"]
    heads = analysis.head_table(load(FOLDER, device="cpu"))  # the probe only, as the home page
    assert card["probe_tokens"] == heads.probe.seq_len
    for key, name in (("induction", "repeat_induction"), ("previous_token_probe", "repeat_previous_token")):
        torch.testing.assert_close(torch.tensor(card[key]), heads.scores[name].float(), atol=1e-5, rtol=0)
    readme = (FOLDER / "README.md").read_text()
    assert f"induction scores on {heads.probe.seq_len} random tokens" in readme
