"""End-to-end tests of `python -m tfm.train` on tiny texts and a byte-level tokenizer."""

from __future__ import annotations

import base64
import gzip
import json
import math

import numpy as np
import pytest
import torch

from tfm.core.config import ModelConfig
from tfm.loaders.loading import load
from tfm.core.model import GPT
from tfm.train.cli import main
from tfm.train.trainer import lr_at
from tfm.train.data import EvalText, chunk_bounds, encode_text, load_tokenizer

STORY = "the cat sat on the mat. the dog sat on the log. "


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A byte-level tokenizer folder (256 bytes + <|endoftext|>) and three small texts."""
    root = tmp_path_factory.mktemp("data")
    tok = root / "tok"
    tok.mkdir()
    lines = [f"{base64.b64encode(bytes([b])).decode()} {b}\n" for b in range(256)]
    (tok / "tokenizer.tiktoken").write_text("".join(lines))
    (tok / "special_tokens.json").write_text(json.dumps({"<|endoftext|>": 256}))
    (root / "a.txt").write_text((STORY * 4 + "<|endoftext|>") * 12)
    (root / "b.txt.gz").write_bytes(gzip.compress(("a b c d e f g h\n" * 150).encode()))
    (root / "valid.txt").write_text(STORY * 10)
    return root


def argv(files, run, *extra):
    base = (["--run", str(run)] if run else []) + [
        "--tokenizer",
        str(files / "tok"),
        "--data",
        f"{files / 'a.txt'}:3",
        str(files / "b.txt.gz"),
        "--eval-file",
        str(files / "valid.txt"),
    ]
    return (
        base
        + (
            "--eval-bytes 300 --val-frac 0.05 --d-model 32 --n-layer 2 --n-head 2 --d-ff 64 "
            "--context-length 32 --batch-size 8 --lr 3e-3 --warmup-steps 3 --log-every 1 --eval-every 5 "
            "--ckpt-every 5 --threads 1 --device cpu"
        ).split()
        + list(extra)
    )


def train_losses(run) -> list[float]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [x["loss"] for x in lines if x["kind"] == "train"]


def test_loss_decreases_export_loads_and_ckpt_is_plain(files, tmp_path):
    run = tmp_path / "run"
    assert main(argv(files, run, "--max-steps", "30", "--dropout", "0.1")) == 0
    losses = train_losses(run)
    assert len(losses) == 30 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0
    ckpt = torch.load(run / "ckpt.pt", weights_only=True)  # plain tensors and containers only
    assert ckpt["step"] == 30 and ckpt["tokens"] == 30 * 8 * 32
    cfg = ModelConfig.from_dict(ckpt["config"])
    assert cfg.vocab_size == 257 and cfg.dropout == 0.1
    trained = GPT(cfg).eval()
    trained.load_state_dict(ckpt["model"])
    lm = load(run / "model", device="cpu")
    idx = torch.tensor([lm.tokenizer.encode("the cat sat on")])
    assert torch.equal(lm.model(idx).logits, trained(idx).logits)
    meta = lm.meta
    assert meta["tokens_seen"] == ckpt["tokens"] and meta["steps"] == 30
    assert [d["weight"] for d in meta["data"]] == [3.0, 1.0]
    assert "--max-steps 30" in meta["command"] and 0 < meta["final_eval"]["eval_bpb"] < 8.1
    assert sorted(p.name for p in run.iterdir()) == ["cache", "ckpt.pt", "metrics.jsonl", "model"]


def test_same_seed_same_losses_and_resume_equals_uninterrupted(files, tmp_path):
    whole, again, other, chunked = (tmp_path / n for n in ("whole", "again", "other", "chunked"))
    flags = ["--max-steps", "12", "--dropout", "0.1", "--grad-accum", "2"]
    assert main(argv(files, whole, *flags)) == 0
    assert main(argv(files, again, *flags)) == 0
    assert main(argv(files, other, *flags, "--seed", "7")) == 0
    assert train_losses(whole) == train_losses(again) != train_losses(other)
    # Chunks of one step each (a tiny time budget), then the rest: exactly the same run.
    assert main(argv(files, chunked, *flags, "--time-budget", "1e-9")) == 0
    for _ in range(2):
        assert main(["--run", str(chunked), "--resume"]) == 0  # flags come from the checkpoint
    assert len(train_losses(chunked)) == 3
    assert main(["--run", str(chunked), "--resume", "--time-budget", "1000"]) == 0
    assert train_losses(chunked) == train_losses(whole)
    a, b = (torch.load(r / "ckpt.pt", weights_only=True) for r in (whole, chunked))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert len(b["commands"]) == 4


def test_json_config_equals_flags(files, tmp_path):
    config = tmp_path / "run.json"
    config.write_text(
        json.dumps({"run": str(tmp_path / "json"), "max_steps": 3, "eval-every": 0, "bias": False, "seed": 3})
    )
    assert main(argv(files, None, "--config", str(config))) == 0
    assert (
        main(argv(files, tmp_path / "flags", "--max-steps", "3", "--eval-every", "0", "--no-bias", "--seed", "3")) == 0
    )
    assert train_losses(tmp_path / "json") == train_losses(tmp_path / "flags")
    assert json.loads((tmp_path / "json/model/config.json").read_text())["model"]["bias"] is False


@pytest.mark.parametrize(
    "extra, config, message",
    [
        (["--max-steps", "2", "--d-modle", "8"], None, "unrecognized arguments"),
        ([], None, "--max-steps or --max-tokens"),
        (["--max-steps", "2", "--pos-encoding", "alibi"], None, "invalid choice"),
        (["--max-steps", "2", "--batch-size", "0"], None, "must be positive"),
        ([], {"max_steps": 2, "d_modle": 8}, "unknown key 'd_modle'"),
        ([], {"max_steps": "2"}, "expected an integer"),
        ([], {"max_steps": 2, "bias": "no"}, "expected true or false"),
        ([], [1, 2], "expected a JSON object"),
        ([], {"max_steps": 2, "run": None}, "--run is required"),
    ],
)
def test_bad_flags_and_json_keys_exit_with_usage_errors(files, tmp_path, capsys, extra, config, message):
    if config is not None:
        (tmp_path / "c.json").write_text(json.dumps(config))
        extra = extra + ["--config", str(tmp_path / "c.json")]
    with pytest.raises(SystemExit) as e:
        main(argv(files, None if config and "run" in config else tmp_path / "run", *extra))
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--vocab-size", "300"], "does not match the tokenizer"),
        (["--n-head", "5"], "not divisible by n_head"),
        (["--context-length", "4096"], "need at least"),
        (["--eval-file", "/nonexistent.txt"], "file not found"),
    ],
)
def test_bad_values_give_clear_errors(files, tmp_path, capsys, extra, message):
    assert main(argv(files, tmp_path / "run", "--max-steps", "2", *extra)) == 2
    assert message in capsys.readouterr().err


def test_resume_refuses_other_shapes_tokenizers_and_unreadable_checkpoints(files, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(argv(files, run, "--max-steps", "1")) == 0
    assert main(["--run", str(run), "--resume", "--d-model", "64"]) == 2
    assert "cannot change" in capsys.readouterr().err
    other = tmp_path / "tok"
    other.mkdir()
    (other / "tokenizer.tiktoken").write_text((files / "tok/tokenizer.tiktoken").read_text())
    (other / "special_tokens.json").write_text(json.dumps({"<|endoftext|>": 256, "<|pad|>": 257}))
    assert main(["--run", str(run), "--resume", "--tokenizer", str(other)]) == 2
    assert "not the tokenizer" in capsys.readouterr().err
    (run / "ckpt.pt").write_bytes(b"not a zip")
    with pytest.raises(SystemExit):
        main(["--run", str(run), "--resume"])
    assert "cannot read" in capsys.readouterr().err


def test_chunked_encoding_equals_whole_and_cache_is_reused(files, tmp_path):
    tok, _ = load_tokenizer(files / "tok")
    text = "x \n\nb. A\nB <|endoftext|>\nC  \n d\n" * 50
    assert len(chunk_bounds(text, 16)) > 10
    assert encode_text(tok, text, 16).tolist() == tok.encode(text, allow_special=True)
    run = tmp_path / "run"
    assert main(argv(files, run, "--max-steps", "1")) == 0
    cached = sorted((run / "cache").iterdir())
    assert len(cached) == 2 and all(np.load(p).dtype == np.uint16 for p in cached)
    stamps = [p.stat().st_mtime_ns for p in cached]
    assert main(argv(files, run, "--max-steps", "1")) == 0
    assert [p.stat().st_mtime_ns for p in sorted((run / "cache").iterdir())] == stamps


def test_bits_per_byte_of_a_uniform_model_is_log2_vocab(files):
    tok, _ = load_tokenizer(files / "tok")
    ev = EvalText(files / "valid.txt", tok, 100, ctx=16)

    class Uniform(torch.nn.Module):
        def forward(self, idx):
            return type("Out", (), {"logits": torch.zeros(*idx.shape, 257)})()

    assert ev.n_bytes == 100
    assert ev.bits_per_byte(Uniform(), "cpu") == pytest.approx(math.log2(257))


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    lrs = [lr_at(s, 1.0, 10, 100, 0.1) for s in range(120)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[99] == pytest.approx(0.1, abs=1e-3) and lrs[119] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))


def test_stop_at_step_keeps_the_full_schedule(files, tmp_path):
    """A run cut at step N reproduces the first N steps of the full run, not a shorter schedule."""
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    flags = ["--max-steps", "10", "--dropout", "0.0"]
    assert main(argv(files, whole, *flags)) == 0
    assert main(argv(files, cut, *flags, "--stop-at-step", "4")) == 0
    assert train_losses(cut) == train_losses(whole)[:4]
    assert torch.load(cut / "ckpt.pt", weights_only=True)["step"] == 4
    assert load(cut / "model", device="cpu").meta["steps"] == 4


def test_repeat_frac_rows_restart_their_text_and_zero_keeps_the_old_batches(files):
    from tfm.train.data import IGNORE, MIN_SPAN, Mix, Source

    arr = np.arange(1000, dtype=np.int64)  # distinct ids: a repeat is unambiguous
    src = [Source("a", files / "a.txt", 1.0, arr, arr[:40])]
    x, y = Mix(src, 32, repeat_frac=1.0).batch(torch.Generator().manual_seed(0), 16)
    for row, nxt in zip(x, y):
        full = torch.cat([row, nxt[-1:]])  # the ctx+1 tokens of the row (last is never the jump)
        n = int((full[1:] != full[:-1] + 1).nonzero()[0]) + 1  # where the text jumps back
        assert MIN_SPAN <= n <= 16
        assert torch.equal(full[n : 2 * n], full[:n])  # A B C | A B C: the span again
        assert torch.equal(full[n:], full[0] + torch.arange(33 - n))  # then the text goes on
        assert nxt[n - 1] == IGNORE and (nxt != IGNORE).sum() == 31  # only the jump is not learned
    assert torch.equal(torch.where(y[:, :-1] == IGNORE, x[:, 1:], y[:, :-1]), x[:, 1:])
    plain = Mix(src, 32).batch(torch.Generator().manual_seed(0), 16)  # no extra draws at 0
    zero = Mix(src, 32, repeat_frac=0.0).batch(torch.Generator().manual_seed(0), 16)
    assert torch.equal(plain[0], zero[0])
    assert all(bool((r[1:] == r[:-1] + 1).all()) for r in plain[0])
    with pytest.raises(ValueError, match="--repeat-frac 1.5: must be in"):
        Mix(src, 32, repeat_frac=1.5)


def test_init_from_starts_at_the_exported_weights_and_refuses_other_shapes(files, tmp_path, capsys):
    first = tmp_path / "first"
    assert main(argv(files, first, "--max-steps", "5")) == 0
    second = tmp_path / "second"
    assert (
        main(
            argv(
                files,
                second,
                "--max-steps",
                "5",
                "--init-from",
                str(first / "model"),
                "--lr",
                "0",
                "--warmup-steps",
                "0",
                "--min-lr-frac",
                "1",
            )
        )
        == 0
    )  # lr 0: weights stay put
    a, b = load(str(first / "model")).model.state_dict(), load(str(second / "model")).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    ckpt = torch.load(second / "ckpt.pt", weights_only=True)
    assert ckpt["step"] == 5  # a new run, own schedule
    assert (
        main(
            argv(files, tmp_path / "third", "--max-steps", "5", "--init-from", str(first / "model"), "--d-model", "64")
        )
        == 2
    )
    assert "--init-from" in capsys.readouterr().err


def write_card(run, tmp_path) -> tuple:
    """`python -m tfm.train.model_card RUN` with a small stand-in corpus; (card text, out folder)."""
    from tfm.train import model_card

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "tinystories_valid.txt").write_text(STORY * 200)
    out = tmp_path / "card"
    model_card.main([str(run), "--out", str(out), "--corpus", str(corpus)])
    return (out / "README.md").read_text(), out


def test_model_card_reports_the_runs_own_figures(files, tmp_path):
    run = tmp_path / "run"
    assert main(argv(files, run, "--max-steps", "10", "--repeat-frac", "0.5")) == 0
    card, out = write_card(run, tmp_path)
    last = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["kind"] == "eval" and f"**{last['eval_bpb']:.3f} bits per byte**" in card
    assert "--stop-at-step 10" in card and "--repeat-frac 0.5" in card and "(`--repeat-frac`: 50% of rows)" in card
    data = json.loads((out / "card.json").read_text())
    lm = load(str(out))
    assert np.array(data["heads"]["induction"]).shape == (lm.config.n_layer, lm.config.n_head)
    cp = data["heads"]["copy"]
    assert cp["n"] > 0 and f"**{cp['second']:.2f}**" in card
    assert (out / "loss_curve.svg").read_text().startswith("<svg")


def test_copy_frac_rows_repeat_random_tokens_and_learn_only_the_repeats(files):
    from tfm.train.data import IGNORE, MIN_SPAN, Mix, Source

    arr = np.arange(1000, dtype=np.int64)
    src = [Source("a", files / "a.txt", 1.0, arr, arr[:40])]
    x, y = Mix(src, 32, copy_frac=1.0, vocab=50).batch(torch.Generator().manual_seed(0), 16)
    assert int(x.max()) < 50  # drawn from the ordinary tokens
    for row, tgt in zip(x, y):
        n = int((tgt != IGNORE).nonzero()[0])  # the period: first learned target
        assert MIN_SPAN <= n <= 16 and bool((tgt[:n] == IGNORE).all())
        assert torch.equal(row[n:], row[: 32 - n])  # it repeats with period n
        assert torch.equal(tgt[n:-1], row[n + 1 :])  # targets are the next tokens
    with pytest.raises(ValueError, match="--copy-frac 2.0: must be in"):
        Mix(src, 32, copy_frac=2.0, vocab=50)


def test_model_card_of_a_two_stage_run_lists_both_stages_and_commands(files, tmp_path):
    first, second = tmp_path / "runs" / "first", tmp_path / "runs" / "second"
    assert main(argv(files, first, "--max-steps", "6")) == 0
    assert main(argv(files, second, "--max-steps", "4", "--init-from", str(first / "model"), "--copy-frac", "0.5")) == 0
    card, out = write_card(second, tmp_path)
    assert "- Stage 1, from scratch: 1,536 tokens in 6 steps" in card
    assert "- Stage 2, from the previous stage's weights: 1,024 tokens in 4 steps" in card
    assert "2,560 tokens in 10 steps" in card and "(`--copy-frac`: 50% of rows in stage 2)" in card
    cmds = card.split("```bash\n")[1].split("```")[0].splitlines()
    assert cmds[0].endswith("--stop-at-step 6") and "--run runs/first" in cmds[0]
    assert "--init-from runs/first/model" in cmds[1] and cmds[1].endswith("--stop-at-step 4")
    assert cmds[2].endswith("tfm.train.model_card runs/second --out assets/models/default")
    evals = json.loads((out / "card.json").read_text())["evals"]
    assert [e["step"] for e in evals] == [5, 6, 10]  # stage 2's evals counted after stage 1
