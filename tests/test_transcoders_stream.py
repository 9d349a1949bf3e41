"""The streaming transcoder trainer (python -m tfm.train.transcoders_stream, tfm.train.topk_sparse,
tfm.train.stream_state): its sparse step gives the dense step's gradients and parameters
(tfm.train.topk with autograd, the oracle), dead features' AuxK term included; a run stopped by
SIGTERM and resumed from its checkpoint ends bit for bit where a run straight through ends; the set
it writes loads and its card's held-out figures are what the loaded files measure again."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import torch

import tfm
from tfm.analysis.dictionaries import transcoder as T
from tfm.train import topk as TK
from tfm.train import topk_sparse as S
from tfm.train import stream_state as SS
from tfm.train import transcoder_eval as TE
from tfm.train import transcoders_stream as TS

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(
    not (CORPUS / "tinyshakespeare.txt").is_file(), reason="../shared/corpus is beside the repo in CI"
)


@pytest.mark.parametrize("rows", [48, 6])  # 6 rows leave more than 2k features dead: AuxK keeps 2k
def test_sparse_step_equals_the_dense_step(monkeypatch, rows):
    monkeypatch.setattr(TK, "DEAD_AFTER", 50)
    f, d, k, gen = 64, 16, 4, torch.Generator().manual_seed(1)
    p = S.new_params(f, d, gen, torch.randn(d, generator=gen))
    p["b_enc"] += 0.1 * torch.randn(f, generator=gen)
    module = S.to_module(p, T.Transcoder(T.TranscoderConfig(d, 1, f, k), 0), (1.0, 1.0)).requires_grad_(True)
    dense_opt, sparse_opt = torch.optim.Adam(module.parameters(), lr=1e-2), S.adam(p, 1e-2)
    fired_d = torch.zeros(f, dtype=torch.long)
    fired_d[: f // 2] = 1000  # half the features start dead
    fired_s, mix = fired_d.clone(), torch.randn(d, d, generator=gen)
    n_dead = []
    for _ in range(5):
        x, y = torch.randn(rows, d, generator=gen), torch.randn(rows, d, generator=gen) @ mix
        mse, loss, fired_d = TK._batch_loss(module, x, y, fired_d)
        TK._update(dense_opt, module, loss, 1e-2)  # autograd's gradients stay in .grad
        want = {"enc": module.W_enc.grad.t(), "b_enc": module.b_enc.grad, "dec": module.W_dec.grad}
        want["b_dec"] = module.b_dec.grad
        n_dead.append(int((fired_s > 50).sum()))
        fvu, got, fired_s = S.step_grads(p, x, y, k, fired_s, dead_after=50)
        assert abs(fvu - float(mse.detach())) < 1e-5 * fvu and torch.equal(fired_s, fired_d)
        for name, g in want.items():
            assert torch.allclose(got[name], g, rtol=1e-4, atol=1e-6 * float(g.abs().max())), name
        S.apply(sparse_opt, p, got, 1e-2)
        assert torch.allclose(p["enc"], module.W_enc.t(), atol=1e-6) and torch.allclose(
            p["dec"], module.W_dec, atol=1e-6
        )
        assert torch.allclose(p["b_enc"], module.b_enc, atol=1e-6) and torch.allclose(
            p["b_dec"], module.b_dec, atol=1e-6
        )
    assert n_dead[0] > (2 * k if rows == 6 else 0)  # the AuxK term ran


@pytest.fixture(scope="module")
def lm():
    return tfm.load("default", device="cpu")


def _args(tmp: Path, name: str) -> list[str]:
    return (
        "--model default --features 64 --k 8 --tokens 6144 --eval-tokens 264 --ctx 32 --chunk 8 --log-every 1"
        " --eval-every 2000 --skip-first --storage int8"
    ).split() + ["--corpus", str(CORPUS), "--checkpoint", str(tmp / name / "ck"), "--out", str(tmp / name / "set")]


def _term_at(chunk: int, lines: list[str]):
    """A log that sends this process SIGTERM when the loop reports `chunk` (as an operator's kill would)."""

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith(f"chunk {chunk}/"):
            os.kill(os.getpid(), signal.SIGTERM)

    return log


@needs_corpus
def test_stopped_and_resumed_equals_straight_through(tmp_path, lm):
    straight = TS.run(TS._args(_args(tmp_path, "a")), "straight", log=lambda s: None)
    lines: list[str] = []
    stopped = TS.run(TS._args(_args(tmp_path, "b")), "stopped", log=_term_at(3, lines))
    assert stopped == {"stopped_at_tokens": 3 * 8 * 31} and any(s.startswith("stopped after chunk 3") for s in lines)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is given back
    with pytest.raises(ValueError, match="pass the same settings to go on"):
        TS.run(TS._args(_args(tmp_path, "b") + ["--lr", "1e-3"]), "other", log=lambda s: None)
    resumed = TS.run(TS._args(_args(tmp_path, "b")), "resumed", log=lines.append)
    assert "resuming at chunk 3, 744 tokens seen" in lines
    for i in range(6):
        name = T.layer_file(i)
        assert (tmp_path / "a/set" / name).read_bytes() == (tmp_path / "b/set" / name).read_bytes(), i
    for i in range(6):  # the same held-out figures (timings aside)
        for key in ("fvu", "l0", "dead_share", "steps", "dead_share_train", "train_fvu_last"):
            assert resumed["layers"][str(i)][key] == straight["layers"][str(i)][key], (i, key)
    assert resumed["history"] == straight["history"] and len(straight["history"]) == 2
    assert resumed["train_tokens"] == straight["train_tokens"] == 24 * 8 * 31
    a = torch.load(tmp_path / "a/ck" / SS.CHECKPOINT, weights_only=True)
    b = torch.load(tmp_path / "b/ck" / SS.CHECKPOINT, weights_only=True)
    for key in ("enc", "dec"):
        assert torch.equal(a["layers"]["4"]["params"][key], b["layers"]["4"]["params"][key])
    assert torch.equal(
        a["layers"]["4"]["adam"]["state"][0]["exp_avg_sq"], b["layers"]["4"]["adam"]["state"][0]["exp_avg_sq"]
    )


@needs_corpus
def test_written_set_loads_and_measures_what_its_card_says(tmp_path, lm):
    card = TS.run(TS._args(_args(tmp_path, "c") + ["--layers", "1,3"]), "cmd", log=lambda s: None)
    assert sorted(card["layers"]) == ["1", "3"] and "ce" not in card  # CE once every layer exists
    cfg = T.read_card(tmp_path / "c/set")["config"]
    assert (cfg.n_features, cfg.k, cfg.storage) == (64, 8, "int8")
    held = torch.cat(list(TS.heldout_windows(lm, TS._args(_args(tmp_path, "c"))).values()))[:, :-1]
    stream, angles = TE.embed(lm.model, held)
    acts = TE.advance(lm.model, stream, angles, range(4), {1, 3}, skip=1)
    for i in (1, 3):
        tc = T.load_layer(tmp_path / "c/set", cfg, i)
        again = TE.layer_metrics(tc, *acts[i])
        assert again["fvu"] == pytest.approx(card["layers"][str(i)]["fvu"], rel=1e-6)
        assert again["fvu"] < 0.9 and again["l0"] <= 8  # trained: better than the outputs' mean
    assert card["settings"]["skipped_first_positions"] == 1 and card["train_tokens"] == 24 * 8 * 31
    assert "python -m tfm.train.transcoders_stream" in (tmp_path / "c/set/README.md").read_text()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--steps-per-chunk", "0"], r"--steps-per-chunk=0 is out of range"),
        (["--chunk", "-1"], r"--chunk=-1 is out of range"),
        (["--warmup", "0.9"], r"--warmup=0.9 is out of range; .* before the last fifth"),
        (["--tokens", "10"], r"--tokens=10 is out of range; .*at least one window"),
    ],
)
def test_bad_settings_are_refused_with_one_message(tmp_path, capsys, extra, message):
    assert TS.main(_args(tmp_path, "d") + extra) == 2  # before any model or text is read
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "d").exists()
