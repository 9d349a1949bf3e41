"""`python -m tfm.train.transcoder_labels --model smollm2 --folder assets/transcoders/smollm2`: every
feature of a transcoder set gets its top-activating held-out contexts and a label by the SAE's rules
(`tfm.analysis.dictionaries.labels`: "says X", checked by steering, or "on ..."), written beside the set
(`tfm.analysis.dictionaries.transcoder_features` describes the files); the card's "labels" entry and the README
say what was read, the counts, the share of "says X" labels that pass and the time.

The held-out part of the SAE's text mix (`tfm.train.mix`, --tokens-per-domain of each domain, in
windows of --ctx tokens) runs through the model once, block by block; at each block the MLP's
input is encoded by that block's transcoder, with the first positions the set was trained without
(its card's skipped_first_positions: the attention sink) left out, as the SAE's labelling does.
Layer by layer, resumable: a rerun with the same settings on the same set skips every layer whose
files and card entry exist; a retrained set (another identity) or other settings start again.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..analysis.dictionaries import labels as FL
from ..analysis.dictionaries import transcoder_features as TF
from ..analysis.dictionaries.transcoder import CARD_FILE, MAX_CARD_BYTES, load_transcoders
from ..core.files import read_json
from ..loaders.loading import load
from . import mix
from . import transcoder_eval as TE
from .command import run_command
from .sae_eval import top_positions

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"  # beside the repository


def _args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tfm.train.transcoder_labels", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the model spec the set reads (default, smollm2)")
    p.add_argument("--folder", required=True, help="the transcoder set's folder (card.json, layer_LL.safetensors)")
    p.add_argument("--tokens-per-domain", type=int, default=6144, help="held-out tokens of each domain of the mix")
    p.add_argument("--ctx", type=int, default=128, help="window length the model reads")
    p.add_argument("--says-margin", type=float, default=FL.SAYS_MARGIN)
    p.add_argument("--says-gain", type=float, default=FL.SAYS_GAIN)
    p.add_argument("--corpus", default=str(CORPUS), help="the folder holding the mix's text files")
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args(argv)


def heldout(lm, a: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (N,) long, window_domain (N / ctx,) long): each domain's held-out ids cut to whole
    windows, domains one after another."""
    parts = mix.domain_ids(lm.tokenizer, Path(a.corpus), "heldout", a.tokens_per_domain)
    cut = [torch.from_numpy(ids[: len(ids) // a.ctx * a.ctx]) for ids in parts.values()]
    if not all(len(c) for c in cut):
        raise ValueError(f"--tokens-per-domain must give each domain at least one window of --ctx {a.ctx} tokens")
    doms = torch.cat([torch.full((len(c) // a.ctx,), i) for i, c in enumerate(cut)])
    return torch.cat(cut).long(), doms


def _settings(a: argparse.Namespace, identity: str, skip: int) -> dict:
    """What a rerun must share with the card's entry to go on where it stopped."""
    return {
        "identity": identity,
        "tokens_per_domain": a.tokens_per_domain,
        "ctx": a.ctx,
        "skip": skip,
        "says_margin": a.says_margin,
        "says_gain": a.says_gain,
        "domains": list(mix.DOMAINS),
    }


@torch.no_grad()
def encode_layer(model, tc, stream: torch.Tensor, angles, skip: int, rows: int = 16):
    """Runs block `tc.layer` on `stream` (n, ctx, D), updated in place, and returns the kept
    activations and features of its MLP inputs (float32, as the graph reads them) at every
    position but each window's first `skip`: (n * (ctx - skip), k) each."""
    vals, idx = [], []
    for r in range(0, len(stream), rows):
        x, m_in, _ = TE.step(model.blocks[tc.layer], stream[r : r + rows], angles, tc.layer)
        stream[r : r + rows] = x
        v, i = tc.topk(m_in[:, skip:].flatten(0, 1))
        vals.append(v)
        idx.append(i)
    return torch.cat(vals), torch.cat(idx)


def layer_raw(vals: torch.Tensor, idx: torch.Tensor, n_features: int, ctx: int, skip: int) -> dict[str, torch.Tensor]:
    """features_LL.safetensors' tensors from `encode_layer`'s activations: positions are in the
    held-out token array (window r, column c + skip)."""
    f = n_features
    top, counts, flat_f, flat_v = top_positions(vals, idx, f, TF.N_CONTEXTS)
    w = ctx - skip
    pos = torch.where(top >= 0, top // w * ctx + top % w + skip, -1)
    at = top.clamp_min(0)
    act = ((idx[at] == torch.arange(f)[:, None, None]) * vals[at]).sum(-1) * (top >= 0)
    return {
        "ctx_pos": pos.to(torch.int32).contiguous(),
        "ctx_act": act.half().contiguous(),
        "hist_max": torch.zeros(f).scatter_reduce_(0, flat_f, flat_v, "amax").float(),
        "freq": (counts.float() / len(vals)).float(),
    }


def label_layer(lm, tc, raw: dict, tokens, window_domain, a: argparse.Namespace) -> FL.FeatureLabels:
    """compute_labels on the layer's data as the SAE's, then the steering check where it writes."""
    fs = TF.feature_set(tc, TF.layer_data(raw, tokens, window_domain, a.ctx), mix.DOMAINS)
    labels = FL.compute_labels(lm, fs, a.says_margin, a.says_gain)
    return FL.steering_check(lm, labels, lambda f: TF.output_vector(tc, raw["hist_max"], f))


def _counts(labels: FL.FeatureLabels) -> dict:
    kinds = [lab.label.split(" ", 1)[0] for lab in labels.features]
    passed, checked = labels.check_share()
    return {
        "says": kinds.count("says"),
        "on": kinds.count("on"),
        "dead": kinds.count("dead"),
        "says_checked": checked,
        "says_passed": passed,
    }


def _start(folder: Path, settings: dict) -> tuple[dict, dict]:
    """(the card as JSON, its "labels" entry: the old one when it matches `settings`, else new)."""
    card = read_json(folder / CARD_FILE, MAX_CARD_BYTES)
    old = card.get("labels")
    if isinstance(old, dict) and {k: old.get(k) for k in settings} == settings:
        return card, old
    return card, {**settings, "layers": {}}


def _write_card(folder: Path, card: dict, entry: dict) -> None:
    card["labels"] = entry
    (folder / CARD_FILE).write_text(json.dumps(card, indent=2) + "\n")
    readme = (folder / "README.md").read_text().split("\n## Labels", 1)[0].rstrip("\n")
    (folder / "README.md").write_text(readme + "\n\n" + labels_markdown(entry))


def _contexts(folder: Path, tokens: torch.Tensor, window_domain: torch.Tensor) -> None:
    save_file(
        {"tokens": tokens.to(torch.int32).contiguous(), "window_domain": window_domain.to(torch.int8).contiguous()},
        folder / TF.CONTEXTS_FILE,
    )


def run(a: argparse.Namespace, command: str, log=print) -> dict:
    torch.set_num_threads(a.threads)
    t0, folder = time.perf_counter(), Path(a.folder)
    lm = load(a.model, device="cpu")
    ts = load_transcoders(folder, lm)
    skip = int(ts.card.get("settings", {}).get("skipped_first_positions", 0))
    card, entry = _start(folder, _settings(a, ts.identity, skip))
    entry["command"] = command
    tokens, window_domain = heldout(lm, a)
    if not entry["layers"] or not (folder / TF.CONTEXTS_FILE).is_file():
        entry["layers"] = {}
        _contexts(folder, tokens, window_domain)
    entry["tokens"] = int(tokens.numel())
    stream, angles = TE.embed(lm.model, tokens.view(-1, a.ctx))
    for layer in range(ts.cfg.n_layer):
        done = str(layer) in entry["layers"] and all(
            (folder / n).is_file() for n in (TF.features_file(layer), TF.labels_file(layer))
        )
        t1, tc = time.perf_counter(), ts.layers[layer]
        if done:
            TE.advance(lm.model, stream, angles, range(layer, layer + 1), set(), skip)
            continue
        raw = layer_raw(*encode_layer(lm.model, tc, stream, angles, skip), tc.cfg.n_features, a.ctx, skip)
        t2 = time.perf_counter()
        labels = label_layer(lm, tc, raw, tokens, window_domain, a)
        save_file(raw, folder / TF.features_file(layer))
        TF.write_layer_labels(folder, layer, ts.identity, labels)
        entry["layers"][str(layer)] = {
            **_counts(labels),
            "contexts_s": round(t2 - t1, 1),
            "labels_s": round(time.perf_counter() - t2, 1),
        }
        _write_card(folder, card, _totals(entry))
        log(f"layer {layer}: {entry['layers'][str(layer)]} ({time.perf_counter() - t0:.0f} s)")
    entry = _totals(entry)
    _write_card(folder, card, entry)
    return entry


def _totals(entry: dict) -> dict:
    per = entry["layers"].values()
    keys = ("says", "on", "dead", "says_checked", "says_passed")
    tot = {k: sum(m[k] for m in per) for k in keys}
    tot["says_pass_share"] = tot["says_passed"] / tot["says_checked"] if tot["says_checked"] else None
    tot["wall_s"] = round(sum(m["contexts_s"] + m["labels_s"] for m in per), 1)
    return {**entry, "total": tot}


def labels_markdown(e: dict) -> str:
    t = e["total"]
    share = (
        'no "says" label to check'
        if not t["says_checked"]
        else f"{t['says_passed']} of {t['says_checked']} pass ({100 * t['says_pass_share']:.0f}%)"
    )
    skipped = f"the first {e['skip']} of each left out (the attention sink); " if e["skip"] else ""
    rows = [
        f"| {i} | {m['says']} | {m['says_passed']} / {m['says_checked']} | {m['on']} | {m['dead']} |"
        for i, m in sorted(e["layers"].items(), key=lambda kv: int(kv[0]))
    ]
    return "\n".join(
        [
            "## Labels",
            "",
            "```",
            e["command"],
            "```",
            "",
            f"Per feature, its {TF.N_CONTEXTS} top-activating contexts on held-out text (the SAE's mix: "
            f"{e['tokens_per_domain']:,} tokens of each of {', '.join(e['domains'])}; windows of {e['ctx']} tokens, "
            f"{skipped}{e['tokens']:,} tokens in all) and a label by the SAE's rules "
            f'(`tfm.analysis.dictionaries.labels`): {t["says"]} "says X" (decoder read through the unembedding: margin '
            f">= {e['says_margin']:g} std, direct push >= {e['says_gain']:g} nat at its largest activation), {t['on']} "
            f'"on ...", {t["dead"]} dead. Files: `contexts.safetensors`, `features_LL.safetensors`, '
            "`labels_LL.json.gz` (`tfm.analysis.dictionaries.transcoder_features`).",
            "",
            f'Steering check of the "says X" labels (the feature\'s decoder row times its largest held-out activation '
            f"added to the stream leaving its block, at strength 1, raises p(X) after each of "
            f"{', '.join(repr(p) for p in FL.CHECK_PROMPTS)}): {share}. Wall time {t['wall_s']:.0f} s (the command's "
            "--threads).",
            "",
            "| layer | says | says passing | on | dead |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    )


def main(argv=None) -> int:
    return run_command("tfm.train.transcoder_labels", argv, _args, run, ("total",))


if __name__ == "__main__":
    raise SystemExit(main())
