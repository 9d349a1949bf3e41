"""Transcoder features with meaning (`python -m tfm.train.transcoder_labels`,
`tfm.analysis.dictionaries.transcoder_features`): on a copy of the bundled model's shipped set, with a small
held-out budget, every stored number is recomputed from the model's own trace (top contexts,
their activations, firing rates, largest activations), the steering check is redone where the
feature writes by another route (the next block's input), a rerun resumes without redoing a
layer, a retrained set drops its stale labels, and broken files give one clear ValueError."""

from __future__ import annotations

import gzip
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

import tfm
from tfm.analysis.dictionaries import labels as FL
from tfm.analysis.dictionaries import transcoder_features as TF
from tfm.analysis.dictionaries.transcoder import layer_file, load_transcoders
from tfm.analysis.steering.vectors import reading_ids, steer_span
from tfm.core import edits as E
from tfm.loaders.loading import ASSETS
from tfm.train import mix, transcoder_labels

# One worker builds the module's labelled set (its fixture is the cost), not both.
pytestmark = pytest.mark.xdist_group("transcoder_labels")

SET = ASSETS / "transcoders" / "default"
ARGS = ["--model", "default", "--tokens-per-domain", "160", "--ctx", "32"]


@pytest.fixture(scope="module")
def lm():
    return tfm.load("default")


@pytest.fixture(scope="module")
def made(tmp_path_factory, lm):
    folder = tmp_path_factory.mktemp("labels") / "set"
    shutil.copytree(SET, folder, ignore=shutil.ignore_patterns("features_*", "labels_*", "contexts.*"))
    assert transcoder_labels.main([*ARGS, "--folder", str(folder)]) == 0
    ts = load_transcoders(folder, lm)
    return folder, ts, TF.read_features(folder, ts, lm)


@torch.no_grad()
def recomputed(lm, ts, tf, layer: int):
    """(acts (N, F), firing mask (N,) of positions the set reads) from the model's trace, every window."""
    wins = tf.tokens.view(-1, tf.ctx)
    x = lm.model(wins, trace=True, lazy=False).trace[f"blocks.{layer}.ln2.output"].float()  # (W, ctx, D)
    acts = ts.layers[layer].encode(x).flatten(0, 1)
    read = torch.ones(wins.shape, dtype=torch.bool)
    read[:, : int(ts.card["settings"]["skipped_first_positions"])] = False
    return acts, read.flatten()


def test_contexts_rates_and_tops_equal_a_full_recomputation(made, lm):
    folder, ts, tf = made
    assert tf is not None and len(tf.labels) == ts.cfg.n_layer
    parts = mix.domain_ids(lm.tokenizer, transcoder_labels.CORPUS, "heldout", 160)  # the held-out mix, again
    parts = {d: ids[: len(ids) // 32 * 32] for d, ids in parts.items()}
    assert tf.tokens.tolist() == [int(t) for ids in parts.values() for t in ids] and tf.domains == tuple(parts)
    ends = torch.tensor([len(ids) for ids in parts.values()]).cumsum(0)

    def domain_of(p: int) -> str:
        return tf.domains[int((ends <= p).sum())]

    for layer in (0, ts.cfg.n_layer - 1):
        acts, read = recomputed(lm, ts, tf, layer)
        acts = acts[read]
        pos = torch.nonzero(read).flatten()
        torch.testing.assert_close(tf.layers[layer]["freq"], (acts > 0).float().mean(0))
        torch.testing.assert_close(tf.layers[layer]["hist_max"], acts.max(0).values, rtol=1e-4, atol=1e-5)
        top = acts.topk(TF.N_CONTEXTS, dim=0)  # (n, F) values, rows
        checked = 0
        for f in range(ts.cfg.n_features):
            contexts = tf.contexts(layer, f)
            live = int((top.values[:, f] > 0).sum())
            assert len(contexts) == live
            for j, c in enumerate(contexts):
                p = int(tf.layers[layer]["ctx_pos"][f, j])
                assert c.ids[c.peak] == int(tf.tokens[p])
                assert c.activation == pytest.approx(float(acts[(pos == p).nonzero()[0, 0], f]), rel=2e-3, abs=2e-3)
                assert c.activation == pytest.approx(float(top.values[j, f]), rel=2e-3, abs=2e-3)
                assert c.domain == domain_of(p)
                checked += 1
        assert checked > 1000


def test_on_labels_name_the_peak_tokens_and_dead_ones_never_fire(made, lm):
    _, ts, tf = made
    for layer in range(ts.cfg.n_layer):
        for f in range(ts.cfg.n_features):
            e, contexts = tf.entry(layer, f), tf.contexts(layer, f)
            if e.label.startswith("dead"):
                assert not contexts and tf.freq(layer, f) == 0
            elif e.label.startswith("on "):
                peaks = [FL.piece(lm.tokenizer, c.ids[c.peak]) for c in contexts]
                assert e.tokens[0] == max(peaks, key=peaks.count) and e.label.startswith(f"on {e.tokens[0]}")


@torch.no_grad()
def test_the_steering_check_holds_when_redone_at_the_next_blocks_input(made, lm):
    _, ts, tf = made
    says = [
        (layer, f)
        for layer in range(ts.cfg.n_layer - 1)
        for f in range(ts.cfg.n_features)
        if tf.entry(layer, f).says_id is not None
    ]
    assert says, 'the bundled set has "says X" features before its last layer'
    for layer, f in says:
        e = tf.entry(layer, f)
        vec = ts.layers[layer].W_dec[f] * float(tf.layers[layer]["hist_max"][f])
        ups = []
        for prompt in FL.CHECK_PROMPTS:
            ids, _ = reading_ids(lm, prompt, "check")
            start, stop, skip = steer_span(lm.tokenizer, ids)
            x = torch.tensor([ids])
            edit = E.Steer(layer + 1, vec, 1.0, start, stop, "resid_pre", skip=skip)
            p0, p1 = (lm.model(x, edits=e_).logits[0, -1].float().softmax(-1)[e.says_id] for e_ in ([], [edit]))
            ups.append(bool(p1 > p0))
        assert e.check == all(ups), (layer, f, ups)


def test_search_finds_every_label_naming_the_token(made):
    _, ts, tf = made
    says = next(
        (layer, f)
        for layer in range(ts.cfg.n_layer)
        for f in range(ts.cfg.n_features)
        if tf.entry(layer, f).says is not None
    )
    found = tf.search(tf.entry(*says).says, 10_000)
    assert says in found
    assert all(tf.entry(*p).matches(tf.entry(*says).says) for p in found)
    assert tf.search(tf.entry(*says).says, 10_000, among=[says]) == [says]
    with pytest.raises(ValueError, match="at most"):
        tf.search("x" * 81)


def test_a_rerun_resumes_and_a_retrained_set_drops_its_labels(made, lm, tmp_path):
    folder, ts, _ = made
    copy = tmp_path / "set"
    shutil.copytree(folder, copy)
    times = {p.name: p.stat().st_mtime_ns for p in copy.iterdir() if p.name.startswith(("features_", "labels_"))}
    assert transcoder_labels.main([*ARGS, "--folder", str(copy)]) == 0
    assert times == {p.name: p.stat().st_mtime_ns for p in copy.iterdir() if p.name in times}
    tensors = load_file(copy / layer_file(0))
    tensors["b_enc"] = (tensors["b_enc"].float() + 1.0).half()  # a retrained layer 0
    save_file(tensors, copy / layer_file(0))
    retrained = load_transcoders(copy, lm)
    assert retrained.identity != ts.identity and TF.read_features(copy, retrained, lm) is None


@pytest.mark.parametrize(
    "breakage, message",
    [
        ("bomb", "unpacks past"),
        ("not gzip", "not gzip"),
        ("position", "ctx_pos must be"),
        ("shape", "expected"),
        ("link", "link out of its folder"),
        ("missing", None),
    ],
)
def test_broken_files_give_one_clear_error(made, lm, tmp_path, breakage, message):
    folder, ts, _ = made
    copy = tmp_path / "set"
    shutil.copytree(folder, copy)
    lab, feat = copy / TF.labels_file(2), copy / TF.features_file(2)
    if breakage == "bomb":
        lab.write_bytes(gzip.compress(b" " * (TF.MAX_LABELS_JSON + 10)))
    elif breakage == "not gzip":
        lab.write_bytes(b"{}")
    elif breakage in ("position", "shape"):
        data = load_file(feat)
        data["ctx_pos"] = data["ctx_pos"] + (10**6 if breakage == "position" else 0)
        if breakage == "shape":
            data["ctx_pos"] = data["ctx_pos"][:, :3].contiguous()
        save_file(data, feat)
    elif breakage == "link":
        outside = tmp_path / "elsewhere.json.gz"
        shutil.copy(lab, outside)
        lab.unlink()
        lab.symlink_to(outside)
    else:
        lab.unlink()
    if message is None:
        assert TF.read_features(copy, ts, lm) is None  # not finished: shown without labels
        return
    with pytest.raises(ValueError, match=message):
        TF.read_features(copy, ts, lm)
