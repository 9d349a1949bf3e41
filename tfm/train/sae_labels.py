"""`python -m tfm.train.sae_labels --model smollm2 --folder assets/sae/smollm2`: label every
feature of a trained SAE from its own evidence (tfm.analysis.dictionaries.labels), check each
"says X" label by steering, and write labels.json beside features.safetensors; the card
(card.json, README.md) records the rule, the share of "says X" labels that pass and the time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from ..analysis.dictionaries import labels as FL
from ..analysis.dictionaries.features import load_features, steering_vector
from ..analysis.dictionaries.sae import CARD_FILE
from ..loaders.loading import load


def label_folder(spec: str, folder: Path, says_margin: float = FL.SAYS_MARGIN, says_gain: float = FL.SAYS_GAIN) -> dict:
    """Writes labels.json and the card's "labels" entry; returns that entry."""
    t0 = time.perf_counter()
    lm = load(spec, device="cpu")
    (folder / FL.LABELS_FILE).unlink(missing_ok=True)  # replaced: an older format must not stop it
    fs = load_features(folder, lm)
    labels = FL.compute_labels(lm, fs, says_margin, says_gain)
    t_labels = time.perf_counter() - t0
    labels = FL.steering_check(lm, labels, lambda f: steering_vector(fs, f))
    FL.save_labels(labels, folder)
    passed, checked = labels.check_share()
    kinds = [lab.label.split(" ", 1)[0] for lab in labels.features]
    entry = {
        "file": FL.LABELS_FILE,
        "says_margin": says_margin,
        "says_gain": says_gain,
        "check_prompts": list(FL.CHECK_PROMPTS),
        "says": kinds.count("says"),
        "on": kinds.count("on"),
        "dead": kinds.count("dead"),
        "says_checked": checked,
        "says_passed": passed,
        "says_pass_share": passed / checked if checked else None,
        "labels_s": round(t_labels, 1),
        "check_s": round(time.perf_counter() - t0 - t_labels, 1),
    }
    card = json.loads((folder / CARD_FILE).read_text())
    card["labels"] = entry
    (folder / CARD_FILE).write_text(json.dumps(card, indent=2) + "\n")
    readme = (folder / "README.md").read_text().split("\n## Labels", 1)[0].rstrip("\n")
    (folder / "README.md").write_text(readme + "\n\n" + labels_markdown(entry))
    return entry


def labels_markdown(e: dict) -> str:
    share = (
        'no "says" label to check'
        if not e["says_checked"]
        else f"{e['says_passed']} of {e['says_checked']} pass ({100 * e['says_pass_share']:.0f}%)"
    )
    return "\n".join(
        [
            "## Labels",
            "",
            f"`{e['file']}`: one short label per feature, from its own evidence (`tfm.analysis.dictionaries.labels`): "
            f'{e["says"]} "says X" (the decoder direction read through the unembedding puts X at least '
            f"{e['says_margin']:g} standard deviations of the scores ahead of the next token, and the feature at "
            f"its largest held-out activation pushes X's logit directly by at least {e['says_gain']:g} nat over the "
            f'average token), {e["on"]} "on ..." '
            f"(the tokens its top held-out contexts peak on), {e['dead']} dead.",
            "",
            f'Steering check of the "says X" labels (strength 1 raises p(X) after each of '
            f"{', '.join(repr(p) for p in e['check_prompts'])}): {share}. "
            f"Labels {e['labels_s']:.0f} s, check {e['check_s']:.0f} s on one CPU thread.",
            "",
        ]
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfm.train.sae_labels", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the model spec the SAE reads (default, smollm2)")
    p.add_argument("--folder", required=True, type=Path, help="the SAE folder (card.json, features.safetensors)")
    p.add_argument("--says-margin", type=float, default=FL.SAYS_MARGIN)
    p.add_argument("--says-gain", type=float, default=FL.SAYS_GAIN)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(a.threads)
    try:
        print(label_folder(a.model, a.folder, a.says_margin, a.says_gain))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
