"""Parity with Hugging Face for today's families: random Llama, Qwen2, Mistral and GPT-NeoX
models built with `transformers`, saved with `save_pretrained` (also fp16/bf16, sharded, and
in the older config layout), loaded by `tfm.load`, give the same logits, every attention
pattern, and the same greedy tokens with the KV cache."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import tfm
from tests.conftest import BPE_TEXT
from tfm.analysis import shapes as tfm_shapes
from tfm.analysis import param_counts
from tfm.core.kv_cache import KVCache

transformers = pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread", "every_product_onednn")

SMALL = dict(
    vocab_size=320,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=96,
    max_position_embeddings=64,
)
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
CASES = {  # name: (config class, config overrides)
    "llama-gqa": ("LlamaConfig", dict(num_key_value_heads=2)),
    "llama-mqa-tied": ("LlamaConfig", dict(num_key_value_heads=1, tie_word_embeddings=True)),
    "llama-llama3": ("LlamaConfig", dict(num_key_value_heads=2, rope_parameters={**LLAMA3, "rope_theta": 500000.0})),
    "llama-linear": (
        "LlamaConfig",
        dict(rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}),
    ),
    "qwen2-bias-tied": ("Qwen2Config", dict(num_key_value_heads=2, tie_word_embeddings=True)),
    "mistral-gqa": ("MistralConfig", dict(num_key_value_heads=2, sliding_window=None)),
    "neox-parallel": (
        "GPTNeoXConfig",
        dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}),
    ),
    "neox-sequential": ("GPTNeoXConfig", dict(use_parallel_residual=False, hidden_act="gelu_new")),
}


def hf_model(case: str, seed: int = 0, **extra):
    """A small HF model with every weight perturbed well away from its init (norm gains around
    1), so patterns are far from uniform and a mistake in any tensor would show."""
    cls_name, overrides = CASES[case]
    cfg = getattr(transformers, cls_name)(**{**SMALL, **overrides, **extra}, attn_implementation="eager")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.2 * noise if "norm" in name and name.endswith("weight") else 0.25 * noise)
    return model


def write_tokenizer(folder: Path) -> Path:
    """A byte-level BPE with all 256 byte tokens (as every published one has), end-of-text and
    merges up to 320 ids, as the tokenizer.json Hugging Face folders carry."""
    tokenizers = pytest.importorskip("tokenizers")
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        BPE_TEXT, vocab_size=SMALL["vocab_size"], special_tokens=["<|endoftext|>"], show_progress=False
    )  # the initial alphabet is all 256 bytes
    bpe.save(str(folder / "tokenizer.json"))
    assert len(json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]) == SMALL["vocab_size"]
    return folder


@pytest.fixture(scope="module")
def gpt2_vocab_folder(tmp_path_factory):
    return write_tokenizer(tmp_path_factory.mktemp("bytelevel"))


def save(model, folder: Path, vocab_folder: Path, **kw) -> Path:
    model.save_pretrained(folder, **kw)
    (folder / "tokenizer.json").write_bytes((vocab_folder / "tokenizer.json").read_bytes())
    return folder


def ids(n: int = 24, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, SMALL["vocab_size"], (1, n), generator=torch.Generator().manual_seed(seed))


def assert_parity(lm, hf, idx) -> None:
    with torch.inference_mode():
        want = hf(idx, output_attentions=True)
        got = lm.model(idx, trace=True)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-4, rtol=0)
    assert len(want.attentions) == lm.config.n_layer
    for i, pattern in enumerate(want.attentions):  # (B, H, T, T): one per query head
        torch.testing.assert_close(got.trace[f"blocks.{i}.attn.pattern"], pattern, atol=1e-5, rtol=0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_and_every_attention_pattern_match_hf(case, gpt2_vocab_folder, tmp_path):
    hf = hf_model(case)
    lm = tfm.load(save(hf, tmp_path / case, gpt2_vocab_folder), device="cpu")
    assert lm.config.n_kv_head == hf.config.num_key_value_heads if "neox" not in case else lm.config.n_head
    assert lm.tokenizer.vocab_size == SMALL["vocab_size"]  # the folder's tokenizer.json (tfm.text.hf_tokenizer)
    assert_parity(lm, hf, ids())
    k = lm.model(ids(), trace=True).trace["blocks.0.attn.k"]
    assert k.shape[1] == lm.config.n_kv_head  # keys are stored per key/value head


@pytest.mark.parametrize("case", sorted(CASES))
def test_greedy_generation_with_kv_cache_matches_hf_generate(case, gpt2_vocab_folder, tmp_path):
    hf = hf_model(case, seed=2)
    lm = tfm.load(save(hf, tmp_path / case, gpt2_vocab_folder), device="cpu")
    prompt = ids(8, seed=3)
    with torch.inference_mode():
        want = hf.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=20,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=None,
        )
    steps = list(
        tfm.generate(lm, prompt[0].tolist(), max_new_tokens=20, temperature=0.0, use_cache=True, stop_at_eot=False)
    )
    assert [s.token_id for s in steps] == want[0, 8:].tolist()


@pytest.mark.parametrize("file_dtype", [torch.float16, torch.bfloat16])
def test_half_precision_files_load_in_float32_or_as_asked(file_dtype, gpt2_vocab_folder, tmp_path):
    hf = hf_model("llama-gqa").to(file_dtype)
    folder = save(hf, tmp_path / "half", gpt2_vocab_folder)
    assert {t.dtype for t in load_file(folder / "model.safetensors").values()} == {file_dtype}
    lm = tfm.load(folder, device="cpu")
    assert lm.model.unembed.weight.dtype == torch.float32
    # Oracle: HF loading the same file in float32 (its RoPE frequencies are computed fresh; the
    # in-memory half model's inv_freq buffer was rounded by .to()).
    oracle = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    assert_parity(lm, oracle, ids())
    name = {torch.float16: "float16", torch.bfloat16: "bfloat16"}[file_dtype]
    half = tfm.load(folder, device="cpu", dtype=name)
    assert {p.dtype for p in half.model.parameters()} == {file_dtype}
    torch.testing.assert_close(half.model.tok_emb.weight, hf.model.embed_tokens.weight.to(file_dtype), atol=0, rtol=0)
    with pytest.raises(ValueError, match="dtype 'float64' is not supported; choose one of float32, float16, bfloat16"):
        tfm.load(folder, device="cpu", dtype="float64")


@pytest.mark.parametrize("case", ["llama-gqa", "neox-parallel"])
def test_sharded_checkpoints_load(case, gpt2_vocab_folder, tmp_path):
    hf = hf_model(case)
    folder = save(hf, tmp_path / "sharded", gpt2_vocab_folder, max_shard_size="40KB")
    assert (folder / "model.safetensors.index.json").is_file() and not (folder / "model.safetensors").exists()
    assert len(list(folder.glob("model-*.safetensors"))) > 2
    assert_parity(tfm.load(folder, device="cpu"), hf, ids())


def rewrite_config(folder: Path, change) -> None:
    data = json.loads((folder / "config.json").read_text())
    change(data)
    (folder / "config.json").write_text(json.dumps(data))


def to_published_layout(data: dict) -> None:
    """The config layout published checkpoints carry: top-level rope_theta (GPT-NeoX:
    rotary_emb_base and rotary_pct) and rope_scaling with "type", no rope_parameters."""
    rope = data.pop("rope_parameters")
    theta, pct, kind = rope.pop("rope_theta"), rope.pop("partial_rotary_factor", None), rope.pop("rope_type")
    if data["model_type"] == "gpt_neox":
        data.update(rotary_emb_base=theta, rotary_pct=pct)
    else:
        data["rope_theta"] = theta
    data["rope_scaling"] = None if kind == "default" else {"type": kind, **rope}


@pytest.mark.parametrize("case", ["llama-llama3", "llama-linear", "neox-parallel", "qwen2-bias-tied"])
def test_published_config_layout_loads_the_same_model(case, gpt2_vocab_folder, tmp_path):
    hf = (
        hf_model(case, rope_parameters={"rope_type": "default", "rope_theta": 20000.0, "partial_rotary_factor": 0.5})
        if case == "neox-parallel"
        else hf_model(case)
    )
    folder = save(hf, tmp_path / case, gpt2_vocab_folder)
    new = tfm.load(folder, device="cpu")
    rewrite_config(folder, to_published_layout)
    assert "rope_parameters" not in json.loads((folder / "config.json").read_text())
    old = tfm.load(folder, device="cpu")
    assert old.config == new.config
    assert_parity(old, hf, ids())
    if case == "neox-parallel":
        assert (old.config.rotary_pct, old.config.rope_base, old.config.rotary_dim) == (0.5, 20000.0, 8)


def test_neox_defaults_when_the_config_is_silent(gpt2_vocab_folder, tmp_path):
    """An old GPT-NeoX config.json without rotary keys means rotary_pct 0.25, base 10000."""
    hf = hf_model("neox-parallel")
    folder = save(hf, tmp_path / "neox", gpt2_vocab_folder)
    rewrite_config(folder, lambda d: d.pop("rope_parameters"))
    lm = tfm.load(folder, device="cpu")
    assert (lm.config.rotary_pct, lm.config.rope_base, lm.config.parallel_block) == (0.25, 10000.0, True)
    assert_parity(lm, hf, ids())


def test_mistral_sliding_window_caps_the_context(gpt2_vocab_folder, tmp_path):
    hf = hf_model("mistral-gqa", sliding_window=32)
    lm = tfm.load(save(hf, tmp_path / "mistral", gpt2_vocab_folder), device="cpu")
    assert lm.config.context_length == 32 and "sliding window" in lm.meta["context_note"]
    assert_parity(lm, hf, ids(32))
    with pytest.raises(ValueError, match="exceed the context length 32"):
        lm.model(ids(33))


def rewrite_weights(folder: Path, change) -> None:
    state = load_file(folder / "model.safetensors")
    change(state)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda s: s.__setitem__("model.layers.1.self_attn.k_proj.weight", torch.zeros(48, 64)),
            "weight 'model.layers.1.self_attn.k_proj.weight' has shape (48, 64), the config expects (32, 64)",
        ),
        (lambda s: s.pop("model.layers.0.mlp.up_proj.weight"), "missing weight 'model.layers.0.mlp.up_proj.weight'"),
        (
            lambda s: s.__setitem__("model.layers.0.extra.weight", torch.zeros(2)),
            "unexpected weights ['model.layers.0.extra.weight']",
        ),
    ],
)
def test_broken_weights_are_named(change, message, gpt2_vocab_folder, tmp_path):
    folder = save(hf_model("llama-gqa"), tmp_path / "broken", gpt2_vocab_folder)
    rewrite_weights(folder, change)
    with pytest.raises(ValueError, match=re.escape(message)):
        tfm.load(folder, device="cpu")


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda d: d.__setitem__("architectures", ["T5ForConditionalGeneration"]),
            "architecture 'T5ForConditionalGeneration' is not supported; tfm loads BertForMaskedLM, BertModel, "
            "GPTNeoXForCausalLM, Gemma3ForCausalLM, LlamaForCausalLM, MistralForCausalLM, Phi3ForCausalLM, "
            "Qwen2ForCausalLM, Qwen3ForCausalLM (and GPT-2)",
        ),
        (
            lambda d: d["rope_parameters"].update(rope_type="yarn", factor=2.0),
            "rope scaling type 'yarn' is not supported; tfm supports 'default', 'linear', 'llama3'",
        ),
        (
            lambda d: (
                d.pop("rope_parameters") and d.update(rope_theta=1e4, rope_scaling={"type": "dynamic", "factor": 2.0})
            ),
            "rope scaling type 'dynamic' is not supported",
        ),
        (lambda d: d["rope_parameters"].update(rope_type="linear"), "rope scaling 'linear' needs ['factor']"),
        (lambda d: d["rope_parameters"].update(rope_theta="fast"), "a RoPE setting is not a number"),
        (lambda d: d.__setitem__("rope_scaling", [2.0]), "rope_scaling and rope_parameters must be JSON objects"),
        (lambda d: d.__setitem__("num_key_value_heads", 3), "n_kv_head=3 must divide n_head=4"),
        (lambda d: d.__setitem__("tie_word_embeddings", "yes"), "tied_embeddings must be true or false, got 'yes'"),
        (lambda d: d.__setitem__("rms_norm_eps", None), "norm_eps must be a finite number, got None"),
        (lambda d: d.__setitem__("hidden_act", "gelu"), "hidden_act 'gelu' is not supported"),
    ],
)
def test_configs_tfm_cannot_compute_are_refused(change, message, gpt2_vocab_folder, tmp_path):
    folder = save(hf_model("llama-gqa"), tmp_path / "refused", gpt2_vocab_folder)
    rewrite_config(folder, change)
    with pytest.raises(ValueError, match=re.escape(message)):
        tfm.load(folder, device="cpu")


def test_pickled_weights_alone_are_refused(gpt2_vocab_folder, tmp_path):
    folder = save(hf_model("llama-gqa"), tmp_path / "bin", gpt2_vocab_folder)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match="pytorch_model.bin is a pickle, which tfm never loads"):
        tfm.load(folder, device="cpu")


PRESET_TWINS = {  # preset: (HF config class, the same shape in HF's terms)
    "smollm2-135m": (
        "LlamaConfig",
        dict(
            vocab_size=49152,
            hidden_size=576,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            intermediate_size=1536,
            tie_word_embeddings=True,
        ),
    ),
    "qwen2.5-0.5b": (
        "Qwen2Config",
        dict(
            vocab_size=151936,
            hidden_size=896,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            intermediate_size=4864,
            tie_word_embeddings=True,
        ),
    ),
    "pythia-160m": (
        "GPTNeoXConfig",
        dict(
            vocab_size=50304,
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            tie_word_embeddings=False,
        ),
    ),
}


@pytest.mark.parametrize("preset", sorted(PRESET_TWINS))
def test_family_presets_have_the_parameter_count_of_their_hf_twin(preset):
    cls_name, shape = PRESET_TWINS[preset]
    with torch.device("meta"):
        hf = AutoModelForCausalLM.from_config(getattr(transformers, cls_name)(**shape))
        ours = tfm.GPT(tfm.ModelConfig.preset(preset))
    assert ours.num_params() == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(n_kv_head=3), "n_kv_head=3 must divide n_head=4"),
        (dict(n_kv_head=5), "n_kv_head=5 is out of range; it must be between 1 and 4"),
        (
            dict(pos_encoding="rope", rotary_pct=0.2),
            "d_model/n_head=16 times rotary_pct=0.2, rounded down, = 3 must be even",
        ),
        (dict(rotary_pct=0.0), "rotary_pct=0.0 must be in (0, 1]"),
        (dict(rope_scaling="yarn"), "rope_scaling='yarn' is not allowed; choose one of 'none', 'linear', 'llama3'"),
        (dict(rope_scaling="linear", rope_factor=0.5), "rope_factor=0.5 must be >= 1"),
        (dict(parallel_block=True, norm_placement="post"), "parallel_block=true needs norm_placement='pre'"),
        (dict(qkv_bias=1), "qkv_bias must be true or false"),
    ],
)
def test_new_config_fields_are_validated(changes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        tfm.ModelConfig(vocab_size=300, context_length=16, d_model=64, n_layer=1, n_head=4, d_ff=64, **changes)


def test_kv_cache_holds_only_key_value_heads():
    cfg = tfm.ModelConfig.preset("smollm2-135m")
    cache = KVCache(cfg, max_len=16)
    assert cfg.n_kv_head == 3 and cache.k.shape == (30, 1, 3, 16, 64)
    assert cache.nbytes() == 2 * 30 * 3 * 16 * 64 * 4
    assert tfm.ModelConfig.preset("gpt2").n_kv_head == 12  # default: one per query head


@pytest.mark.parametrize("preset", sorted(PRESET_TWINS))
@pytest.mark.parametrize("qkv_bias", [False, True])
def test_parameter_formulas_and_kv_cache_bytes_count_kv_heads(preset, qkv_bias):
    cfg = tfm.ModelConfig.preset(preset, qkv_bias=qkv_bias)
    with torch.device("meta"):
        model = tfm.GPT(cfg)
    counted = param_counts(model)
    assert {k: v[1] for k, v in tfm_shapes.param_formulas(cfg).items()} == counted
    kv = tfm_shapes.kv_cache_bytes(cfg, 100, torch.bfloat16, batch=2)
    assert kv.formula == kv.nbytes == 2 * cfg.n_layer * cfg.n_kv_head * cfg.d_head * 100 * 2 * 2
