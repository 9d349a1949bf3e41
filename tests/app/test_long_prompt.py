"""Pages at a prompt that fills the model's context: a GPT-2-like random model (smaller widths,
so the test is quick) with a ~250-token prompt, and one run at GPT-2 small's real shape with
1024 tokens. Every number drawn equals an EAGER traced forward computed here (the app keeps a
lazy trace and computes attention windows from stored block inputs). The small model's trace
would fit the server's `eager_trace_bytes` (short prompts are traced eagerly): its tests serve
with TFM_EAGER_TRACE_BYTES=1, so the app keeps a lazy trace as it does for long prompts."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from tfm import analysis
from tfm.analysis.lens.logit import logit_lens
from tfm.core.lazy import LazyTrace
from ui import cache, models
from services import memory

from tests.app.conftest import chart_by_title, charts, decode, open_page, use_random

pytestmark = pytest.mark.slow  # long prompts at page size: CI only (lazy traces: tests/test_lazy_trace.py)

CORPUS = "/work/shared/corpus/tinyshakespeare.txt"
SMALL = dict(n_layer=3, n_head=4, n_kv_head=4, d_model=64, d_ff=256, context_length=256, vocab_size=4096)


def long_text(lm, n_tokens: int) -> str:
    with open(CORPUS, encoding="utf-8") as f:
        ids = lm.tokenizer.encode(f.read(20_000))[:n_tokens]
    return lm.tokenizer.decode(ids)


def open_long(page: str, fields: dict, n_tokens: int):
    at = open_page()
    use_random(at, preset="gpt2", **fields)
    lm = models.load_lm(at.session_state["app.model_spec"], "cpu")
    at.switch_page(f"pages/{page}.py")
    at.text_area(key="sidebar.prompt").set_value(long_text(lm, n_tokens)).run()
    assert not at.exception, at.exception
    ids = tuple(lm.tokenizer.encode(at.session_state["sidebar.prompt"])[-lm.config.context_length :])
    return at, lm, ids


def eager(lm, ids):
    with torch.inference_mode():
        return lm.model(torch.tensor([ids]), trace=True, lazy=False).trace


def heatmap_z(at) -> np.ndarray:
    figs = [f for f in charts(at) if "query × key" in f["layout"]["title"]["text"]]
    assert len(figs) == 1
    return np.asarray(decode(figs[0]["data"][0]["z"]), dtype=np.float64)


def masked(m: torch.Tensor) -> np.ndarray:
    e = m.double().numpy().copy()
    e[..., np.triu(np.ones(e.shape[-2:], dtype=bool), 1)] = np.nan
    return e


@pytest.fixture(scope="module")
def small():
    with pytest.MonkeyPatch.context() as mp:  # read again after each test's server.configure(None)
        mp.setenv("TFM_EAGER_TRACE_BYTES", "1")
        at, lm, ids = open_long("attention", SMALL, 250)
        assert {k: getattr(lm.config, k) for k in SMALL} == SMALL and len(ids) > 200  # the sidebar built it
        assert isinstance(cache.run_traced(at.session_state["app.model_spec"], "cpu", ids), LazyTrace)
        yield at, lm, ids, eager(lm, ids)


def test_attention_window_at_the_end_equals_the_eager_pattern(small):
    at, lm, ids, tr = small
    t = len(ids)
    a, b = at.session_state["attn.window"]
    assert (a, b) == (t - 64, t - 1)
    for layer, head in ((0, 0), (2, 3), (1, 2)):
        at.select_slider(key="attn.layer").set_value(layer)
        at.select_slider(key="attn.head").set_value(head).run()
        assert not at.exception, at.exception
        want = masked(tr.pattern(layer)[head, a : b + 1, a : b + 1])
        np.testing.assert_allclose(heatmap_z(at), want, rtol=1e-5, atol=1e-7, equal_nan=True)
        fig = [f for f in charts(at) if "query × key" in f["layout"]["title"]["text"]][0]
        assert fig["data"][0]["zmax"] == pytest.approx(np.nanmax(want), rel=1e-5)  # colours span what is shown


def test_hide_first_and_mean_at_the_end(small):
    at, lm, ids, tr = small
    at.select_slider(key="attn.layer").set_value(1)
    at.radio(key="attn.mode").set_value("mean")
    at.checkbox(key="attn.hide_first").check().run()
    assert not at.exception, at.exception
    a, b = at.session_state["attn.window"]
    rows = tr.pattern(1).mean(0)[a : b + 1, 1:]
    rows = rows / rows.sum(-1, keepdim=True)
    np.testing.assert_allclose(heatmap_z(at), masked(rows[:, a - 1 : b]), rtol=1e-5, atol=1e-7, equal_nan=True)
    at.checkbox(key="attn.hide_first").uncheck()
    at.radio(key="attn.mode").set_value("head").run()


def test_head_table_equals_the_eager_scores(small):
    at, lm, ids, tr = small
    at.session_state["attn.view"] = "Head table"
    at.run()
    assert not at.exception, at.exception
    table = at.dataframe(key="attn.table").value
    want = analysis.head_scores(tr, list(ids))
    for name in ("previous_token", "induction", "entropy"):
        np.testing.assert_allclose(table[name].to_numpy(), want[name].flatten().numpy(), rtol=1e-5, atol=1e-7)
    at.session_state["attn.view"] = "Pattern"


def test_norms_and_logit_lens_equal_the_engine(small):
    at, lm, ids, tr = small
    at.switch_page("pages/norms.py").run()
    assert not at.exception, at.exception
    stats = analysis.norm_stats(tr)
    np.testing.assert_allclose(
        decode(chart_by_title(at, "ln1.input_std")["data"][0]["z"]), stats["ln1.input_std"].numpy(), rtol=1e-5
    )
    np.testing.assert_allclose(
        decode(chart_by_title(at, "Residual-stream L2 norm")["data"][0]["z"]),
        analysis.residual_norms(tr)["resid"].numpy(),
        rtol=1e-5,
    )
    at.switch_page("pages/logit_lens.py").run()
    assert not at.exception, at.exception
    start, t = at.session_state["lens.start"], len(ids)
    stop = min(t, start + at.session_state["lens.width"])
    lens = logit_lens(
        lm.model, tr, k=5, positions=slice(start, stop), keep_probs=False, n_words=lm.tokenizer.vocab_size
    )
    np.testing.assert_allclose(
        decode(chart_by_title(at, "Logit lens")["data"][0]["z"]), lens.top_probs[:, :, 0].numpy(), rtol=1e-5, atol=1e-7
    )


def test_every_page_renders_and_the_cache_holds_less_than_the_eager_trace(small):
    at, lm, ids, tr = small
    for page in ("positions", "shapes", "next_token", "generate", "tokens", "home", "attention"):
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception, (page, at.exception)
    held = sum(size for key, size in models.PROMPTS.sizes().items() if ids in key)
    assert 0 < held < memory.sizeof(tr)


@pytest.mark.slow  # GPT-2 small's widths at 1024 tokens: CI only
def test_gpt2_small_at_1024_tokens_attention_page():
    """The real GPT-2 small shape: the page renders and its window equals the engine's pattern.
    (Reference: the app's own trace's pattern, recomputed by the engine; an eager 1024-token
    trace would hold 2.7 GB.)"""
    t0 = time.perf_counter()
    at, lm, ids = open_long("attention", {}, 1024)
    assert lm.config.d_model == 768 and lm.config.n_layer == 12 and len(ids) == 1024
    at.select_slider(key="attn.layer").set_value(7)
    at.select_slider(key="attn.head").set_value(5).run()
    assert not at.exception, at.exception
    trace = cache.run_traced(at.session_state["app.model_spec"], "cpu", ids)
    np.testing.assert_allclose(
        heatmap_z(at), masked(trace.pattern(7)[5, 960:, 960:]), rtol=1e-5, atol=1e-7, equal_nan=True
    )
    assert time.perf_counter() - t0 < 600  # a hang, not a timing target
