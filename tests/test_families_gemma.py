"""Parity with Hugging Face for Gemma 3, Qwen3 and Phi-3: random models built with `transformers`
(every weight perturbed), saved with `save_pretrained`, loaded by `tfm.load`: the same logits,
every attention pattern (a Gemma-3 shape whose window is shorter than the prompt, so local
layers mask keys a global layer reads) and the same greedy tokens with the KV cache."""

from __future__ import annotations

import json

import pytest
import torch

import tfm
from tests.test_families import SMALL, assert_parity, ids, save, write_tokenizer

transformers = pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread", "every_product_onednn")

GEMMA = dict(
    num_hidden_layers=6,
    num_key_value_heads=1,
    head_dim=32,
    sliding_window=5,
    query_pre_attn_scalar=24,
    layer_types=["sliding_attention"] * 2 + ["full_attention"] + ["sliding_attention"] * 2 + ["full_attention"],
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
    },
)
CASES = {  # name: (config class, overrides)
    "gemma3-mqa-window": ("Gemma3TextConfig", GEMMA),
    "qwen3-qknorm": ("Qwen3Config", dict(num_key_value_heads=2, head_dim=24)),
    "phi3-fused": ("Phi3Config", dict(num_key_value_heads=2, pad_token_id=0, eos_token_id=1, bos_token_id=2)),
    "phi3-window-partial": (
        "Phi3Config",
        dict(
            pad_token_id=0,
            eos_token_id=1,
            sliding_window=6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        ),
    ),
}


def hf_model(case: str, seed: int = 0):
    cls_name, overrides = CASES[case]
    cfg = getattr(transformers, cls_name)(**{**SMALL, **overrides}, attn_implementation="eager")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(0.2 * noise if "norm" in name else 0.25 * noise)  # Gemma's gains are 1 + w; others near 0.2 too
            if "norm" in name and "gemma" not in case:
                p.add_(1.0)
    return model


@pytest.fixture(scope="module")
def vocab_folder(tmp_path_factory):
    return write_tokenizer(tmp_path_factory.mktemp("bytelevel"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_and_every_pattern_match_hf(case, vocab_folder, tmp_path):
    hf = hf_model(case)
    lm = tfm.load(save(hf, tmp_path / case, vocab_folder), device="cpu")
    idx = ids(20)
    assert_parity(lm, hf, idx)
    with torch.inference_mode():  # the lazy trace (recomputed blocks) equals the eager one, window included
        eager, lazy = lm.model(idx, trace=True, lazy=False).trace, lm.model(idx, trace=True, lazy=True).trace
    for i in range(lm.config.n_layer):
        torch.testing.assert_close(lazy.pattern(i), eager.pattern(i), atol=0, rtol=0)
    if case.startswith("gemma3"):
        cfg = lm.config
        assert (cfg.local_layers, cfg.sliding_window, cfg.rope_local_base) == ((0, 1, 3, 4), 5, 100.0)
        p = eager.pattern(0)  # (H, T, T): a local layer
        assert p[:, 10, :6].abs().max() == 0 and p[:, 10, 6:11].sum(-1).sub(1).abs().max() < 1e-5
        assert eager.pattern(2)[:, 10, :6].sum() > 0  # a global layer reads them


@pytest.mark.parametrize("case", sorted(CASES))
def test_greedy_generation_with_kv_cache_matches_hf(case, vocab_folder, tmp_path):
    hf = hf_model(case, seed=2)
    lm = tfm.load(save(hf, tmp_path / case, vocab_folder), device="cpu")
    prompt = ids(8, seed=3)
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


def test_gemma3_refusals_name_the_field(vocab_folder, tmp_path):
    folder = save(hf_model("gemma3-mqa-window"), tmp_path / "g", vocab_folder)
    data = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**data, "final_logit_softcapping": 30.0}))
    with pytest.raises(ValueError, match="final_logit_softcapping=30.0 is not supported"):
        tfm.load(folder, device="cpu")
    (folder / "config.json").write_text(json.dumps({**data, "layer_types": ["sliding_attention"]}))
    with pytest.raises(ValueError, match="layer_types must list"):
        tfm.load(folder, device="cpu")


@pytest.mark.parametrize("local", [(0, 1, 3, 4), (0, 1, 2, 3, 4, 5)])
def test_windowed_kv_cache_keeps_the_window_and_equals_the_whole_forward(local, make_model):
    """Local layers keep only their last window - 1 positions (tfm.generate's cache): fed in chunks
    of several tokens and one at a time, every position's logits equal one forward over all."""
    from tfm.core.kv_cache import KVCache
    from tfm.core.config import ModelConfig

    cfg = ModelConfig.preset(
        "tiny",
        context_length=64,
        n_layer=6,
        n_head=4,
        n_kv_head=1,
        head_dim=8,
        pos_encoding="rope",
        norm="rmsnorm",
        activation="geglu",
        bias=False,
        qk_norm=True,
        post_norms=True,
        scale_embeddings=True,
        sliding_window=5,
        local_layers=local,
        rope_local_base=100.0,
    )
    model = make_model(cfg).eval()
    idx = torch.randint(0, cfg.vocab_size, (2, 30), generator=torch.Generator().manual_seed(5))
    windowed, full = KVCache(cfg, 2, 30, windows=True), KVCache(cfg, 2, 30)
    assert windowed.nbytes() < full.nbytes() and windowed.k_local.shape[-2] == 4
    with torch.no_grad():
        want = model(idx).logits
        got, at = [], 0
        for n in (7, 1, 1, 1, 6, 1, 3, 1, 1, 1, 4, 1, 1, 1):
            got.append(model(idx[:, at : at + n], cache=windowed).logits)
            at += n
    assert at == 30
    torch.testing.assert_close(torch.cat(got, dim=1), want, atol=1e-5, rtol=1e-5)


def test_ragged_batch_cache_masks_each_rows_window(make_model):
    """The shared decode batch (RaggedKVCache): rows at different lengths, one token each per step,
    every local layer masking its own row's keys left of the window: each row's logits equal a
    whole forward of that row alone."""
    from tfm.core.kv_cache import KVCache, RaggedKVCache
    from tfm.core.config import ModelConfig

    cfg = ModelConfig.preset(
        "tiny",
        context_length=64,
        n_layer=3,
        n_head=2,
        n_kv_head=1,
        head_dim=8,
        pos_encoding="rope",
        norm="rmsnorm",
        activation="geglu",
        bias=False,
        qk_norm=True,
        post_norms=True,
        sliding_window=4,
        local_layers=(0, 1),
        rope_local_base=100.0,
    )
    model = make_model(cfg).eval()
    rows = [torch.randint(0, cfg.vocab_size, (1, n), generator=torch.Generator().manual_seed(n)) for n in (9, 3)]
    ragged = RaggedKVCache(cfg, 2, 20)
    with torch.no_grad():
        for r, ids in enumerate(rows):
            pre = KVCache(cfg, 1, 20)
            model(ids[:, :-1], cache=pre)
            ragged.put(r, pre)
        ragged.rows = 2
        for step in range(6):
            last = torch.cat([ids[:, -1:] for ids in rows])  # (2, 1)
            got = model(last, cache=ragged).logits[:, -1]  # (2, V)
            for r, ids in enumerate(rows):
                torch.testing.assert_close(got[r], model(ids).logits[0, -1], atol=1e-5, rtol=1e-5)
            nxt = got.argmax(-1)
            rows = [torch.cat([ids, nxt[r].view(1, 1)], dim=1) for r, ids in enumerate(rows)]
