"""The Attention, Shapes, Positions and LayerNorm pages on a random model with today's pieces:
grouped-query attention, partial rotary and a parallel block. Every number equals the engine's."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tfm.analysis import positions
from tfm.analysis import norm_stats, param_counts, residual_norms
from tfm.core.kv_cache import KVCache
from tfm.core.model import rope_angles
from ui import models

from tests.app.conftest import allow_models, chart_by_title, decode, open_page, use_random
from tests.app.test_attention import assert_matrix, masked_expected, single
from tests.app.test_shapes import assert_table_is, frame

PROMPT = "The cat sat on the mat. The cat sat on the"
FAMILY = dict(
    preset="tiny", d_model=32, n_head=4, n_kv_head=2, pos_encoding="rope", rotary_pct=0.5, parallel_block=True
)


def family_page(page: str, **extra):
    at = open_page(page, PROMPT)
    use_random(at, **{**FAMILY, **extra})
    lm = models.load_lm(at.session_state["app.model_spec"], "cpu")
    cfg = lm.config
    assert (cfg.n_head, cfg.n_kv_head, cfg.rotary_dim, cfg.d_head, cfg.parallel_block) == (4, 2, 4, 8, True)
    ids = lm.tokenizer.encode(PROMPT)[-cfg.context_length :]
    with torch.inference_mode():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    return at, lm, ids, trace


def test_attention_page_shows_each_query_heads_pattern():
    at, lm, ids, trace = family_page("attention")
    assert trace["blocks.1.attn.k"].shape[1] == 2 and trace["blocks.1.attn.pattern"].shape[1] == 4
    at.select_slider(key="attn.layer").set_value(1)
    at.select_slider(key="attn.head").set_value(3).run()
    assert not at.exception, at.exception
    assert_matrix(single(at)["data"][0]["z"], masked_expected(trace["blocks.1.attn.pattern"][0, 3]))
    assert any("query head 3 compares against key/value head 1" in c.value for c in at.caption)


def test_shapes_page_counts_kv_heads():
    at, lm, ids, trace = family_page("shapes")
    assert_table_is(at, trace.shapes)
    table = frame(at, "formula")
    assert table["counted"].tolist() == [*param_counts(lm.model).values(), lm.model.num_params()]
    assert table["match"].tolist() == ["✓"] * 6
    assert frame(at, "axes").set_index("name").loc["blocks.0.attn.k", "axes"] == "batch × kv_head × key_pos × d_head"
    at.number_input(key="shapes.kv_ctx").set_value(20).run()
    assert not at.exception, at.exception
    real = KVCache(lm.config, max_len=20).nbytes()  # float32, the page's default precision
    assert real == 2 * 2 * 2 * 8 * 20 * 4  # layers, KV heads (not 4 query heads), d_head, context, bytes
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["By the formula"] == metrics["tfm.core.kv_cache.KVCache(…).nbytes()"] == f"{real / 2**20:,.2f} MiB"


def test_positions_page_shows_the_rotated_pairs_only():
    at, lm, ids, trace = family_page("positions")
    fig = chart_by_title(at, "RoPE rotation angle")
    angles = rope_angles(lm.model.inv_freq, 0, lm.config.context_length).numpy()
    assert angles.shape == (lm.config.context_length, 2)  # rotary_dim / 2 pairs, not d_head / 2
    np.testing.assert_allclose(decode(fig["data"][0]["customdata"]), angles, rtol=1e-6)
    np.testing.assert_allclose(decode(fig["data"][0]["z"]), np.mod(angles, 2 * math.pi), atol=1e-5)
    assert any("first 4 of each head's 8 dimensions" in i.value for i in at.info)
    check = positions.permutation_check(lm.model, tuple(ids), 0)
    assert check.full_with > 100 * max(check.full_without, 1e-9)  # partial rotary still tells order apart


def test_norms_page_statistics_and_the_parallel_block():
    at, lm, ids, trace = family_page("norms", norm="rmsnorm")
    stats = norm_stats(trace)
    fig = chart_by_title(at, "ln1.input_rms:")
    np.testing.assert_allclose(decode(fig["data"][0]["z"]), stats["ln1.input_rms"].numpy(), rtol=1e-5, atol=1e-7)
    # the parallel block's ln2 reads the block input, as ln1 does
    torch.testing.assert_close(trace["blocks.1.ln2.input"], trace["blocks.1.resid_pre"])
    res = residual_norms(trace)
    np.testing.assert_allclose(
        decode(chart_by_title(at, "Residual-stream L2 norm per token")["data"][0]["z"]), res["resid"].numpy(), rtol=1e-5
    )
    assert any("parallel" in i.value for i in at.info)
    assert not at.exception, at.exception


@pytest.mark.parametrize(
    "page",
    [
        "attention",
        *(
            pytest.param(p, marks=pytest.mark.slow)
            for p in (  # quick: one
                "tokens",
                "positions",
                "norms",
                "shapes",
                "logit_lens",
                "next_token",
                "generate",
                "home",
            )
        ),
    ],
)
def test_every_model_page_renders_for_the_family_model(page):
    at = open_page(page, PROMPT)
    use_random(at, **FAMILY, norm="rmsnorm", activation="swiglu", qkv_bias=True, bias=False)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def test_a_hugging_face_llama_folder_opens_on_the_attention_page(tmp_path):
    """A real LlamaForCausalLM folder (GQA), typed into the sidebar: the page draws its patterns."""
    from tests.test_families import hf_model, save, write_tokenizer  # the parity tests' builders

    folder = save(hf_model("llama-gqa"), tmp_path / "llama", write_tokenizer(tmp_path))
    allow_models(tmp_path)  # as a server started with --allow-models TMP
    at = open_page("attention", PROMPT)
    at.radio(key="sidebar.model_kind").set_value("folder").run()
    at.text_input(key="sidebar.folder").set_value(str(folder)).run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    lm = models.load_lm(at.session_state["app.model_spec"], "cpu")
    assert lm.config.n_kv_head == 2 and lm.meta["source_format"] == "huggingface-llama"
    ids = lm.tokenizer.encode(PROMPT)
    with torch.inference_mode():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    assert_matrix(single(at)["data"][0]["z"], masked_expected(trace["blocks.0.attn.pattern"][0, 0]))
