"""Tampered files for the fuzzer (issue #51): ways a graph file, a transcoder folder, an SAE folder
or a steering calibration decodes but breaks what reads it, each with the words its one short
ValueError must hold. `walk(seed, n)` applies `n` random ones (each to a fresh copy of a shipped
file of the bundled model) and returns what went wrong; tests/app/test_fuzz.py runs it in CI and
opens the pages on tampered folders; tests/test_tampered_files.py runs every case once.

Each TAMPERED_* maps a name to (tamper, match): graph and calibration tampers change the decoded
JSON (a dict) in place; folder tampers get (the copied folder, a scratch folder beside it)."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tfm.analysis.dictionaries import transcoder as T
from tfm.analysis.dictionaries import transcoder_features as TF

SAE_DEFAULT = Path(__file__).resolve().parents[2] / "assets" / "sae" / "default"
TRANSCODERS_DEFAULT = Path(__file__).resolve().parents[2] / "assets" / "transcoders" / "default"
STEER_DEFAULT = Path(__file__).resolve().parents[2] / "assets" / "steer" / "default.json"
HUGE = "k" * 3_000_000  # a 3 MB text where a short name belongs


def _node(d: dict, **change) -> None:
    d["nodes"][0].update(change)


TAMPERED_GRAPHS = {
    "version-true": (lambda d: d.update(version=True), "not a tfm attribution graph"),
    "target-token-1e30": (lambda d: d["target"].update(token=10**30), "target token"),
    "node-kind-3mb": (lambda d: _node(d, kind=HUGE), "node kind"),
    "node-key-3mb": (lambda d: _node(d, **{HUGE: 1}), "unknown config keys"),
    "edge-weight-text": (lambda d: d["edges"][0].__setitem__(2, "x"), "edge weight"),
    "edge-to-nowhere": (lambda d: d["edges"].append([0, 10**6, 1.0]), "does not list"),
    "labels-short": (lambda d: d["labels"].pop(), "one short text label"),
    "score-missing": (lambda d: d["scores"].pop("replacement"), "score replacement"),
    "node-twice": (lambda d: d["nodes"].append(d["nodes"][0]), "unique"),
    "layer-past-model": (lambda d: _node(d, layer=999), "layers within the model"),
}


def _layer(folder: Path, i: int = 0) -> Path:
    return folder / T.layer_file(i)


def _replace(path: Path, make) -> None:
    path.unlink()
    make(path)


def _int8_scale(folder: Path, _scratch: Path) -> None:
    """The set re-saved in int8 storage, block 0's encoder scales 3e38: finite as stored, infinite
    once dequantized."""
    card = json.loads((folder / T.CARD_FILE).read_text())
    card["config"]["storage"] = "int8"
    cfg = T.TranscoderConfig(**card["config"])
    for i in range(cfg.n_layer):
        t = load_file(_layer(folder, i))
        (enc, enc_s), (dec, dec_s) = T.quantize(t["W_enc"].float(), 1), T.quantize(t["W_dec"].float(), 0)
        if i == 0:
            enc_s = torch.full_like(enc_s, 3e38)
        save_file(
            {
                "W_enc_q": enc,
                "W_enc_scale": enc_s,
                "W_dec_q": dec,
                "W_dec_scale": dec_s,
                "b_enc": t["b_enc"],
                "b_dec": t["b_dec"],
            },
            _layer(folder, i),
        )
    (folder / T.CARD_FILE).write_text(json.dumps(card))


def _no_feature_fires(folder: Path, _scratch: Path) -> None:
    for i in range(len(list(folder.glob("layer_*.safetensors")))):
        t = load_file(_layer(folder, i))
        t["b_enc"] = torch.full_like(t["b_enc"], -60000.0)
        save_file(t, _layer(folder, i))


def _link_out(folder: Path, scratch: Path) -> None:
    outside = scratch / "outside.safetensors"
    shutil.copy(_layer(folder), outside)
    _replace(_layer(folder), lambda p: os.symlink(outside, p))


def _labels_bomb(folder: Path, _scratch: Path) -> None:
    """Layer 0's labels: 20 kB of gzip that unpacks to 17 MB."""
    (folder / TF.labels_file(0)).write_bytes(gzip.compress(b" " * (TF.MAX_LABELS_JSON + 1)))


def _tensors(name: str, change):
    def tamper(folder: Path, _scratch: Path) -> None:
        t = load_file(folder / name)
        change(t)
        save_file({k: v.contiguous() for k, v in t.items()}, folder / name)

    return tamper


def _labels_card(**change):
    def tamper(folder: Path, _scratch: Path) -> None:
        card = json.loads((folder / T.CARD_FILE).read_text())
        card["labels"].update(change)
        (folder / T.CARD_FILE).write_text(json.dumps(card))

    return tamper


TAMPERED_TRANSCODERS = {
    "labels-gzip-bomb": (_labels_bomb, "unpacks past"),
    "labels-out-of-folder": (
        lambda f, s: _replace(f / TF.labels_file(0), lambda p: os.symlink("/etc/hostname", p)),
        "link out of its folder",
    ),
    "labels-token-past-vocab": (
        _tensors(TF.CONTEXTS_FILE, lambda t: t["tokens"].__setitem__(0, 10**6)),
        "token ids must lie below",
    ),
    "labels-context-past-text": (
        _tensors(TF.features_file(1), lambda t: t["ctx_pos"].__setitem__((0, 0), 10**7)),
        "ctx_pos must be",
    ),
    "labels-identity-a-number": (_labels_card(identity=3), "naming the set's identity"),
    "int8-scale-3e38": (_int8_scale, "beyond"),
    "no-feature-fires": (_no_feature_fires, "no feature of this transcoder set fires"),
    "link-out-of-folder": (_link_out, "link out of its folder"),
    "dev-zero": (lambda f, s: _replace(_layer(f), lambda p: os.symlink("/dev/zero", p)), "link out of its folder"),
    "link-loop": (lambda f, s: _replace(_layer(f), lambda p: os.symlink(p.name, p)), "leads nowhere"),
    "a-directory": (lambda f, s: _replace(_layer(f), lambda p: p.mkdir()), "not a regular file"),
    "card-a-directory": (lambda f, s: _replace(f / T.CARD_FILE, lambda p: p.mkdir()), "not a regular file"),
}


def _card(**change):
    def tamper(folder: Path, _scratch: Path) -> None:
        card = json.loads((folder / "card.json").read_text())
        for k, v in change.items():
            card.pop(k, None) if v is None else card.__setitem__(k, v)
        (folder / "card.json").write_text(json.dumps(card))

    return tamper


def _data(change):
    def tamper(folder: Path, _scratch: Path) -> None:
        t = load_file(folder / "features.safetensors")
        change(t)
        save_file({k: v.contiguous() for k, v in t.items()}, folder / "features.safetensors")

    return tamper


def _nan_top(t: dict) -> None:
    t["hist_max"][0] = float("nan")


def _past_vocab(t: dict) -> None:
    t["ctx_ids"][0, 0, 0] = 10**6


TAMPERED_SAES = {
    "no-metrics": (_card(metrics=None), "metrics"),
    "eval-file-a-number": (_card(eval_file=3), "eval_file"),
    "domain-metrics-not-objects": (_card(domain_metrics={"books": 3}), "domain_metrics"),
    "skipped-abc": (_card(skipped_first_positions="abc"), "skipped_first_positions"),
    "zero-bins": (_data(lambda t: t.update(hist=t["hist"][:, :0])), "at least one bin"),
    "nan-hist-max": (_data(_nan_top), "hist_max"),
    "float-ctx-ids": (_data(lambda t: t.update(ctx_ids=t["ctx_ids"].float())), "ctx_ids"),
    "ctx-id-past-vocab": (_data(_past_vocab), "ctx_ids"),
    "labels-out-of-folder": (
        lambda f, s: _replace(f / "labels.json", lambda p: os.symlink("/etc/hostname", p)),
        "link out of its folder",
    ),
    "weights-a-directory": (lambda f, s: _replace(f / "sae.safetensors", lambda p: p.mkdir()), "not a regular file"),
}


def _trial(d: dict, **change) -> None:
    d["trials"][0].update(change)


TAMPERED_CALIBRATIONS = {
    "chosen-trial-missing": (lambda d: d.update(trials=[d["trials"][0]], prompt="another"), "one of its trials"),
    "moves-no": (lambda d: d.update(moves="no"), "moves"),
    "strength-1e300": (lambda d: d.update(strength=1e300), "strength"),
    "trial-strength-negative": (lambda d: _trial(d, strength=-2.0), "strength"),
    "version-true": (lambda d: d.update(version=True), "not a steering calibration"),
}
MAX_MESSAGE = 400  # a refusal is one short sentence or two
CI_FILES = 12  # tampered files per CI run (of len(CASES); ~0.2 s each on the bundled model)


def tampered_folder(kind: str, name: str, scratch: Path) -> Path:
    """A copy of the bundled model's transcoder set ("transcoders") or SAE ("sae") under `scratch`
    with tamper `name` applied."""
    source, cases = (
        (TRANSCODERS_DEFAULT, TAMPERED_TRANSCODERS) if kind == "transcoders" else (SAE_DEFAULT, TAMPERED_SAES)
    )
    folder = scratch / "default"
    shutil.copytree(source, folder)
    cases[name][0](folder, scratch)
    return folder


def read_set(folder: Path, lm) -> None:
    """A transcoder folder as the Attribution graph page reads it: the set, its labels, a graph."""
    from tfm.analysis.graph.build import attribution_graph

    ts = T.load_transcoders(folder, lm)
    TF.read_features(folder, ts, lm)
    attribution_graph(lm, lm.tokenizer.prompt_ids("The cat sat"), ts)


def check(kind: str, name: str, lm, graph_json: str, scratch: Path) -> str | None:
    """Apply one tamper and read the result as the app does: None when it is refused with one short
    ValueError holding its words, else what happened."""
    from tfm.analysis.dictionaries.features import load_features
    from tfm.analysis.graph.files import load_graph_json
    from tfm.analysis.steering.files import load_calibration

    if kind in ("graph", "calibration"):
        tamper, match = (TAMPERED_GRAPHS if kind == "graph" else TAMPERED_CALIBRATIONS)[name]
        data = json.loads(graph_json if kind == "graph" else STEER_DEFAULT.read_text())
        tamper(data)
        path = scratch / "file.json"
        path.write_text(json.dumps(data))
        read = (lambda: load_graph_json(path.read_text())) if kind == "graph" else (lambda: load_calibration(path, lm))
    else:
        match = (TAMPERED_TRANSCODERS if kind == "transcoders" else TAMPERED_SAES)[name][1]
        folder = tampered_folder(kind, name, scratch)
        read = (lambda: read_set(folder, lm)) if kind == "transcoders" else (lambda: load_features(folder, lm))
    try:
        read()
    except ValueError as e:
        text = str(e)
        return None if match in text and len(text) < MAX_MESSAGE else f"{kind}/{name}: {text[:200]!r}"
    except Exception as e:  # noqa: BLE001 (the finding)
        return f"{kind}/{name}: {type(e).__name__}: {str(e)[:200]}"
    return f"{kind}/{name}: accepted"


CASES = [
    (kind, name)
    for kind, cases in (
        ("graph", TAMPERED_GRAPHS),
        ("transcoders", TAMPERED_TRANSCODERS),
        ("sae", TAMPERED_SAES),
        ("calibration", TAMPERED_CALIBRATIONS),
    )
    for name in cases
]


def walk(seed: int, n: int, lm, graph_json: str) -> list[str]:
    """`n` tampered files drawn at random (seeded); what went wrong with each (empty: all refused)."""
    rng, found = random.Random(seed), []
    for kind, name in rng.sample(CASES, min(n, len(CASES))):
        with tempfile.TemporaryDirectory() as scratch:
            problem = check(kind, name, lm, graph_json, Path(scratch))
        if problem:
            found.append(problem)
    return found
