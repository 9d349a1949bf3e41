"""tfm.loaders.limits: costs from a config alone, checked against real models and traces; refusals."""

from __future__ import annotations

import pickle

import pytest
import torch

import tfm
from tfm.core.config import PRESETS, ModelConfig
from tfm.loaders.limits import (
    ENV,
    Limits,
    check_count,
    check_folder,
    check_generation,
    check_model,
    count_params,
    fmt_bytes,
    generation_bytes,
    parse_bytes,
    trace_cost,
)
from tfm.core.model import GPT
from tfm.loaders.weights import save_model

VARIANTS = [
    dict(),
    dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False, tied_embeddings=False),
    dict(norm_placement="post", pos_encoding="sinusoidal", activation="relu"),
    dict(pos_encoding="none"),
]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_param_count_equals_the_shapes_pages_formulas(name):
    """Two independent paths: the meta-built model, and the per-component formulas the Shapes page shows."""
    from tfm.analysis.shapes import param_formulas

    cfg = ModelConfig.preset(name)
    assert count_params(cfg) == sum(count for _, count in param_formulas(cfg).values())


@pytest.mark.parametrize(
    "variant", VARIANTS + [dict(pos_encoding="rope", n_kv_head=2, rotary_pct=0.5, parallel_block=True)]
)
def test_trace_cost_of_every_variant_equals_a_real_lazy_trace(variant):
    cfg = ModelConfig.preset("tiny", context_length=48, d_model=32, n_head=4, d_ff=40, **variant)
    model, t = GPT(cfg).eval(), 40
    assert count_params(cfg) == model.num_params()
    cost = trace_cost(cfg, t)
    with torch.inference_mode():
        trace = model(torch.randint(0, cfg.vocab_size, (1, t)), trace=True).trace
    assert abs(trace.nbytes - cost.stored) <= 0.25 * cost.stored  # views of buffers count their whole storage
    before = trace.nbytes
    for name in [n for n in trace if n.startswith("blocks.0.")]:
        trace[name]  # every entry of one block, deferred ones included
    assert trace.nbytes - before == cost.per_block
    peak = 0
    for name in trace:  # everything, in order: blocks come and go under the lazy budget
        trace[name]
        peak = max(peak, trace.nbytes)
    assert peak <= cost.held
    assert cost.eager > cost.held or cfg.n_layer * cost.per_block + cost.logits <= cost.held


def test_gpt2_small_and_medium_fit_the_defaults_at_full_context():
    for name in ("gpt2", "gpt2-medium"):
        check_model(ModelConfig.preset(name), Limits())


def test_a_huge_config_is_refused_with_both_numbers_and_what_to_change():
    cfg = ModelConfig.preset("gpt2", n_layer=48, d_model=8192, n_head=64, d_ff=32768)
    n = count_params(cfg)
    assert 4 * n > 150 * 10**9  # ~39B parameters: over 150 GB in float32
    with pytest.raises(ValueError) as e:
        check_model(cfg, Limits())
    msg = str(e.value)
    assert f"{n:,} parameters" in msg and fmt_bytes(4 * n) in msg and fmt_bytes(Limits().max_model_bytes) in msg
    assert "make n_layer, d_model, d_ff or vocab_size smaller" in msg


def test_a_small_model_with_a_huge_context_is_refused_for_its_trace():
    cfg = ModelConfig.preset("tiny", context_length=100_000, n_head=2)
    check_model(cfg, Limits(), tokens=1000)  # fine for a short prompt
    with pytest.raises(
        ValueError, match=r"tracing 100,000 tokens .* over this server's limit of 8 GB.*shorter context_length"
    ):
        check_model(cfg, Limits())


def test_limits_from_environment_and_their_validation():
    env = {ENV["max_model_bytes"]: "1.5GB", ENV["max_new_tokens"]: "64", ENV["heavy_slots"]: "3"}
    lim = Limits.from_env(env)
    assert (lim.max_model_bytes, lim.max_new_tokens, lim.heavy_slots) == (1_500_000_000, 64, 3)
    assert lim.max_trace_bytes == Limits().max_trace_bytes
    assert parse_bytes("800MB") == 800_000_000 and parse_bytes("123") == 123
    for bad in ("-1GB", "lots", "nanGB"):
        with pytest.raises(ValueError, match="size"):
            parse_bytes(bad)
    with pytest.raises(
        ValueError, match=r"limit max_new_tokens=0 is out of range; it must be >= 1 \(a positive integer\)"
    ):
        Limits(max_new_tokens=0)
    with pytest.raises(ValueError, match="not a whole number"):
        Limits.from_env({ENV["max_train_steps"]: "many"})


def test_check_count():
    assert check_count("new tokens", 32, 512) == 32
    with pytest.raises(
        ValueError, match=r"new tokens=1,000,000 is out of range; it must be between 1 and 512 on this server"
    ):
        check_count("new tokens", 10**6, 512)
    with pytest.raises(ValueError, match="steps must be an integer between 1 and 10, got 2.5"):
        check_count("steps", 2.5, 10)


def test_folder_whose_config_or_files_are_too_large_is_refused_before_loading(tmp_path):
    lm = tfm.random_model("tiny")
    save_model(tmp_path / "m", lm.model, lm.tokenizer)
    check_folder(tmp_path / "m", Limits())
    with pytest.raises(ValueError, match="weight files hold .* over this server's limit of 1 kB"):
        check_folder(tmp_path / "m", Limits(max_model_bytes=1000))
    small_files_big_trace = Limits(max_trace_bytes=10_000)
    with pytest.raises(ValueError, match="tracing 32 tokens"):
        check_folder(tmp_path / "m", small_files_big_trace)


class _Touch:
    """Unpickling this creates a file: proof that code from the file ran."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")  # torch says it while refusing the file
def test_a_pickle_named_ckpt_pt_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "ckpt.pt").write_bytes(pickle.dumps({"model": _Touch(marker), "model_args": {}}))
    with pytest.raises((ValueError, OSError)):
        tfm.load(tmp_path)
    assert not marker.exists()


def test_generation_timeline_bound_holds_what_the_page_keeps():
    from tfm.generation.timeline import step_record  # what the generation page stores per step

    lm = tfm.random_model(ModelConfig.preset("tiny", context_length=64), seed=0)
    prompt = lm.tokenizer.encode("a short prompt")
    recs = [step_record(s) for s in tfm.generate(lm, prompt, 20, seed=1, trace=True, stop_at_eot=False)]
    kept = sum(getattr(r, k).numel() * getattr(r, k).element_size() for r in recs for k in ("logits", "attn", "resid"))
    assert kept == sum(r.nbytes for r in recs)
    bound = generation_bytes(lm.config, len(prompt), 20)
    assert kept <= bound <= 1.5 * kept
    assert generation_bytes(lm.config, len(prompt), 20, samples=4) == 4 * bound


def test_a_generation_whose_timeline_does_not_fit_is_refused():
    cfg = ModelConfig.preset("gpt2")
    check_generation(cfg, Limits(), 10, 512)
    with pytest.raises(ValueError, match=r"4 × 512 new tokens takes up to .* over this server's limit of 500 MB"):
        check_generation(cfg, Limits(), 10, 512, samples=4)
    with pytest.raises(ValueError, match="new tokens=513 is out of range"):
        check_generation(cfg, Limits(), 10, 513)
