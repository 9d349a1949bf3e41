"""Transcoders (tfm.analysis.dictionaries.transcoder, python -m tfm.train.transcoders, tfm.train.transcoder_eval):
the blocks run by hand read the same MLP inputs and outputs as the model's trace; the replaced
forward's losses equal the model's own forward with the transcoders' outputs patched in (and the
error terms give back the clean loss); files round-trip in fp16 and int8 and wrong ones get one
clear message; the trainer writes a card and a rerun goes on where it stopped; the shipped set
loads and meets its card measured here again."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tfm
from tfm.analysis.dictionaries import transcoder as T
from tfm.core import edits as E
from tfm.train import mix
from tfm.train import transcoder_eval as TE
from tfm.train import transcoders as train_tc

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
SHIPPED = ROOT / "assets" / "transcoders" / "default"


@pytest.fixture(scope="module")
def lm():
    return tfm.load("default", device="cpu")


def _ids(lm, n=2, t=24, seed=0) -> torch.Tensor:
    return torch.randint(0, lm.config.vocab_size, (n, t), generator=torch.Generator().manual_seed(seed))


def test_blocks_run_by_hand_read_what_the_trace_records(lm):
    idx = _ids(lm)
    trace = lm.model(idx, trace=True, lazy=False).trace
    stream, angles = TE.embed(lm.model, idx)
    got = TE.advance(lm.model, stream, angles, range(0, 4), {1, 3}, skip=1)
    for layer in (1, 3):
        m_in, m = got[layer]
        want_in = trace[f"blocks.{layer}.ln2.output"][:, 1:].flatten(0, 1)
        want_out = trace[f"blocks.{layer}.mlp_out"][:, 1:].flatten(0, 1)
        assert torch.allclose(m_in.float(), want_in, atol=2e-3, rtol=1e-3)
        assert torch.allclose(m.float(), want_out, atol=2e-3, rtol=1e-3)
    assert torch.allclose(stream, trace["blocks.3.resid_post"], atol=1e-5)


@torch.no_grad()
def _patched_ce(lm, ts, rows, replace) -> float:
    """The model's own forward with the transcoders' outputs patched in at the `replace` layers,
    one layer after another (each reads the stream the earlier patches made)."""
    idx, patches = rows[:, :-1], []
    for layer in sorted(replace):
        tr = lm.model(idx, trace=True, edits=patches).trace
        y = ts.layers[layer](tr[f"blocks.{layer}.ln2.output"])
        patches += [E.Patch(f"blocks.{layer}.mlp_out", y[r], row=r) for r in range(len(idx))]
    logits = lm.model(idx, edits=patches).logits
    return float(F.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten()))


def test_replaced_losses_equal_the_models_forward_with_patches(lm):
    ts = T.random_transcoders(lm.config, 48, 6, seed=1)
    rows = _ids(lm, n=3, t=17, seed=2)
    ce = TE.domain_ce(lm.model, ts.layers, rows, skip=0, rows=2)
    clean = _patched_ce(lm, ts, rows, [])
    assert abs(ce["clean"] - clean) < 1e-4
    assert abs(ce["with_errors"] - clean) < 1e-4  # error terms restore the model
    assert abs(ce["replaced"] - _patched_ce(lm, ts, rows, range(6))) < 1e-3
    for layer in (0, 4):
        assert abs(ce["one_layer"][layer] - _patched_ce(lm, ts, rows, [layer])) < 1e-3
    assert abs(ce["replaced"] - clean) > 0.1  # random transcoders change the loss: the checks can fail


@pytest.mark.parametrize("storage", ["fp16", "int8"])
def test_files_round_trip_in_each_storage(tmp_path, lm, storage):
    base = T.random_transcoders(lm.config, 64, 8, seed=3)
    cfg = T.TranscoderConfig(192, 6, 64, 8, "default", storage)
    copies = []
    for tc in base.layers:
        copies.append(T.Transcoder(cfg, tc.layer))
        copies[-1].load_state_dict(tc.state_dict())
        T.save_layer(copies[-1], tmp_path)
    T.write_card(tmp_path, cfg, {"note": "x"})
    ts = T.load_transcoders(tmp_path, lm)
    assert ts.cfg == cfg and ts.card["note"] == "x"
    for a, b, c in zip(base.layers, ts.layers, copies):
        step = a.W_enc.abs().amax(0) / 127 if storage == "int8" else a.W_enc.abs() * 2**-10
        assert ((a.W_enc - b.W_enc).abs() <= step * 0.501 + 1e-7).all()
        assert torch.equal(b.W_dec, T.stored_copy(c).W_dec) and torch.equal(b.W_enc, T.stored_copy(c).W_enc)
    size = sum(p.stat().st_size for p in tmp_path.glob("layer_*"))
    assert size < 6 * 2 * 192 * 64 * (1.1 if storage == "int8" else 2.1)


def test_wrong_files_are_refused_with_one_message(tmp_path, lm, monkeypatch):
    ts = T.random_transcoders(lm.config, 64, 8)
    cfg = T.TranscoderConfig(192, 6, 64, 8, "default")
    for tc in ts.layers:
        T.save_layer(tc, tmp_path)
    T.write_card(tmp_path, cfg, {})
    T.load_transcoders(tmp_path, lm)
    T.write_card(tmp_path, cfg.replace(n_features=32, k=4), {})  # a card of another width
    with pytest.raises(ValueError, match="layer_00.safetensors holds .* but the card's config"):
        T.load_transcoders(tmp_path, lm)
    T.write_card(tmp_path, cfg.replace(d_model=576, n_layer=30), {})  # a card of another model
    with pytest.raises(ValueError, match="for a model 576 wide with 30 layers, but this one is 192 wide with 6"):
        T.load_transcoders(tmp_path, lm)
    T.write_card(tmp_path, cfg, {})
    monkeypatch.setattr(T, "MAX_LAYER_BYTES", 1000)
    with pytest.raises(ValueError, match="layer_00.safetensors is .* bytes, over the 1000 allowed"):
        T.load_transcoders(tmp_path, lm)
    with pytest.raises(ValueError, match="storage 'int4': choose one of"):
        cfg.replace(storage="int4")


needs_corpus = pytest.mark.skipif(
    not (CORPUS / "tinyshakespeare.txt").is_file(), reason="../shared/corpus is beside the repo in CI"
)


@needs_corpus
def test_training_writes_layers_and_a_rerun_goes_on(tmp_path, capsys):
    out = tmp_path / "tc"
    args = (
        "--model default --features 64 --k 8 --tokens 512 --eval-tokens 264 --ctx 32 --epochs 1 --batch 128"
    ).split() + ["--corpus", str(CORPUS), "--out", str(out)]
    assert train_tc.main(args + ["--layers", "1,3"]) == 0
    card = json.loads((out / "card.json").read_text())
    assert sorted(card["layers"]) == ["1", "3"] and "ce" not in card
    m = card["layers"]["3"]
    assert m["l0"] <= 8 and 0 <= m["dead_share"] <= 1 and m["fvu"] > 0 and card["train_tokens"] == 512
    assert sorted(p.name for p in out.glob("layer_*")) == ["layer_01.safetensors", "layer_03.safetensors"]
    before = (out / "layer_01.safetensors").read_bytes()
    capsys.readouterr()
    assert train_tc.main(args) == 0  # all layers: 1 and 3 are skipped
    assert "layers done [1, 3], to train [0, 2, 4, 5]" in capsys.readouterr().out
    assert (out / "layer_01.safetensors").read_bytes() == before
    card = json.loads((out / "card.json").read_text())
    assert len(card["layers"]) == 6 and set(card["ce"]) == set(mix.DOMAINS)
    for c in card["ce"].values():
        assert abs(c["with_errors"] - c["clean"]) < 1e-4 and len(c["one_layer"]) == 6
    assert "| stories |" in (out / "README.md").read_text()
    assert train_tc.main(args[:-1] + [str(out), "--k", "4"]) == 2  # other settings: refused, not mixed
    assert "pass the same settings to go on" in capsys.readouterr().err


def _measured_again(lm, ts, windows: int, skip: int) -> list[dict]:
    """Each layer's metrics on the first `windows` held-out windows (129 tokens) of every domain."""
    wins = mix.domain_ids(lm.tokenizer, CORPUS, "heldout", 3 * 129)
    rows = torch.cat([TE.windows(v, 129)[:windows] for v in wins.values()])[:, :-1]
    stream, angles = TE.embed(lm.model, rows)
    n = ts.cfg.n_layer
    acts = TE.advance(lm.model, stream, angles, range(n), set(range(n)), skip=skip)
    return [TE.layer_metrics(ts.layers[layer], *acts[layer]) for layer in range(n)]


@needs_corpus
def test_shipped_set_meets_its_card_measured_again(lm):
    ts = T.load_transcoders(SHIPPED, lm)
    card = ts.card
    assert ts.cfg.n_layer == 6 and card["settings"]["skipped_first_positions"] == 0
    for layer, again in enumerate(_measured_again(lm, ts, windows=2, skip=0)):
        want = card["layers"][str(layer)]
        assert abs(again["fvu"] - want["fvu"]) < 0.1 + 0.25 * want["fvu"], layer
        assert again["l0"] <= ts.cfg.k
    for c in card["ce"].values():
        assert abs(c["with_errors"] - c["clean"]) < 1e-3
        assert c["clean"] < min(c["one_layer"]) + 0.05 and c["replaced"] > c["clean"]


def test_shipped_smollm2_set_fits_its_budget_and_loads():
    folder = ROOT / "assets" / "transcoders" / "smollm2"
    files = sorted(folder.glob("layer_*.safetensors"))
    assert len(files) == 30 and sum(p.stat().st_size for p in files) <= 60_000_000
    ts = T.load_transcoders(folder)  # names, shapes, dtypes checked against the card
    assert (ts.cfg.d_model, ts.cfg.n_layer, ts.cfg.storage) == (576, 30, "int8")
    assert ts.card["settings"]["skipped_first_positions"] == 1
    for key, m in ts.card["layers"].items():  # int8 storage costs next to nothing
        assert abs(m["fvu"] - m["fvu_before_storage"]) < 0.01 * m["fvu_before_storage"] + 1e-3, key
    for c in ts.card["ce"].values():
        assert abs(c["with_errors"] - c["clean"]) < 1e-3 and c["replaced"] > c["clean"]


@needs_corpus
def test_shipped_smollm2_set_meets_its_card_measured_again():
    """The 1M-token set (#55 item 6): its card's median held-out FVU is at most 0.35, and each
    layer's FVU measured here again on part of the same held-out windows agrees with the card."""
    lm = tfm.load("smollm2", device="cpu")
    ts = T.load_transcoders(ROOT / "assets" / "transcoders" / "smollm2", lm)
    card = ts.card
    assert card["train_tokens"] >= 1_000_000 and statistics.median(m["fvu"] for m in card["layers"].values()) <= 0.35
    for layer, again in enumerate(_measured_again(lm, ts, windows=3, skip=1)):
        want = card["layers"][str(layer)]
        assert abs(again["fvu"] - want["fvu"]) < 0.05 + 0.25 * want["fvu"], (layer, again["fvu"], want["fvu"])
        assert again["l0"] <= ts.cfg.k
