"""Tests for `python -m tfm`: run as a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tfm
from tfm import cli as tfm_cli
from tfm.loaders.weights import save_model

ROOT = Path(__file__).resolve().parents[1]


def cli(*args, check=True):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # tiny models: threads only add contention
    proc = subprocess.run([sys.executable, "-m", "tfm", *args], cwd=ROOT, env=env, capture_output=True, timeout=300)
    # bytes decoded here: text mode would turn a generated "\r" into "\n"
    proc.stdout, proc.stderr = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tfm folder holding a random rope/untied model (different from random:tiny)."""
    cfg = tfm.ModelConfig.preset("tiny", pos_encoding="rope", tied_embeddings=False)
    lm = tfm.random_model(cfg, seed=4)
    return save_model(tmp_path_factory.mktemp("models") / "m", lm.model, lm.tokenizer), lm


@pytest.mark.slow  # a python -m tfm subprocess: CI only
def test_info_total_equals_num_params(folder):
    path, lm = folder
    for source, model in (("random:tiny", tfm.load("random:tiny").model), (str(path), lm.model)):
        out = cli("info", source).stdout
        total = re.search(r"^total\s+([\d,]+)", out, re.M).group(1)
        assert int(total.replace(",", "")) == model.num_params()
        assert "context_length" in out and "attention" in out
        data = json.loads(cli("info", source, "--json").stdout)
        assert data["total"] == model.num_params() == sum(data["parameters"].values())
        assert data["config"] == model.config.to_dict()


@pytest.mark.slow  # a python -m tfm subprocess: CI only
def test_trace_json_names_match_a_direct_trace(folder):
    path, lm = folder
    data = json.loads(cli("trace", str(path), "--prompt", "The cat", "--json").stdout)
    ids = lm.tokenizer.encode("The cat")
    with torch.no_grad():
        direct = lm.model(torch.tensor([ids]), trace=True).trace
    assert data["tokens"] == ids
    assert [e["name"] for e in data["shapes"]] == [e.name for e in direct.shapes]
    assert [tuple(e["shape"]) for e in data["shapes"]] == [e.shape for e in direct.shapes]
    assert "blocks.1.attn.pattern" in [e["name"] for e in data["shapes"]]
    table = cli("trace", "random:tiny", "--prompt", "Hi").stdout
    assert re.search(r"^blocks\.0\.attn\.pattern\s+\(1, 2, 2, 2\)\s+batch, head, query_pos, key_pos", table, re.M)


@pytest.mark.slow  # a python -m tfm subprocess: CI only
def test_generate_prints_text_reproducibly(folder):
    path, lm = folder
    args = (
        "generate",
        str(path),
        "--prompt",
        "Hello",
        "--seed",
        "5",
        "--max-new-tokens",
        "12",
        "--temperature",
        "0.8",
        "--top-k",
        "20",
    )
    first, second = cli(*args), cli(*args)
    expected = [s.text_so_far for s in tfm.generate(lm, "Hello", max_new_tokens=12, temperature=0.8, top_k=20, seed=5)][
        -1
    ]
    assert first.stdout == second.stdout and first.stdout.rstrip("\n") == expected.rstrip("\n")
    assert first.stdout.strip()
    assert re.search(r"stop: (max_new_tokens|eot) after \d+ tokens .* tokens/s", first.stderr)
    other = cli(*args[:5], "6", *args[6:])
    assert other.stdout != first.stdout
    no_cache = cli(*args, "--no-cache")
    assert no_cache.stdout == first.stdout


@pytest.mark.slow  # a python -m tfm subprocess: CI only
def test_generate_reports_a_cut_prompt_and_context_full():
    proc = cli("generate", "random:tiny", "--prompt", "x" * 40, "--temperature", "0")
    assert "note: the prompt has 40 tokens" in proc.stderr and "kept its last 31" in proc.stderr
    assert "stop: context_full after 1 tokens" in proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("generate", "{missing}", "--prompt", "x"), "does not exist"),
        (("info", "{bad}"), "not a model folder"),
        (("generate", "random:tiny", "--prompt", "x", "--top-p", "2"), "top_p"),
        (("generate", "random:tiny", "--prompt", "x", "--max-new-tokens", "0"), "max_new_tokens"),
        (("generate", "random:tiny"), "--prompt"),
        (("info", "random:nope"), "unknown preset"),
    ],
)
def test_errors_exit_2_with_one_line(tmp_path, capsys, args, message):
    """The command's own code, in this process (`python -m tfm` exits with what `main` returns:
    the subprocess tests around this one show that)."""
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "notes.txt").write_text("not a model")
    args = [a.format(missing=tmp_path / "missing", bad=tmp_path / "bad") for a in args]
    assert tfm_cli.main(args) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert out == ""


def test_corrupt_folder_is_an_error_not_a_traceback(folder, tmp_path):
    path, _ = folder
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in path.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    (broken / "model.safetensors").write_bytes(b"\x00" * 10)
    proc = cli("info", str(broken), check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


def test_lens_json_equals_both_lenses_computed_from_a_trace(capsys):
    from tfm.analysis.lens import compare as lens_compare, tuned as tuned_lens

    assert tfm_cli.main(["lens", "default", "--device", "cpu", "--prompt", "The cat sat on the mat.", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    lm = tfm.load("default", device="cpu")
    ids = lm.tokenizer.prompt_ids("The cat sat on the mat.")
    assert data["tokens"] == list(ids) and set(data["lenses"]) == {"logit", "tuned"}
    with torch.no_grad():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    lens = tuned_lens.load_tuned_lens(tuned_lens.LENS_ROOT / "default", lm)
    for name, fit in lens_compare.compare_lenses(lm.model, trace, lens, slice(1, None)).items():
        assert data["lenses"][name]["kl"] == pytest.approx(fit.mean_kl(), rel=1e-5, abs=1e-6)
        assert data["lenses"][name]["top1_agreement"] == pytest.approx(fit.agreement())
        streams = lens_compare.residual_streams(trace)[:, -1:]
        top = lens_compare.decode_log_probs(lm.model, lens.translate(streams) if name == "tuned" else streams).argmax(
            -1
        )
        assert data["lenses"][name]["last_top"] == lm.tokenizer.display_pieces(top[:, 0].tolist())
