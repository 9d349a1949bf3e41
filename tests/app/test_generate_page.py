"""Generation page: the text equals tfm.generate for the same seed and settings, the timeline
shows each step's own numbers and tensors, the comparison and cache views report real runs."""

from __future__ import annotations

import dataclasses

import html
import re

import numpy as np
import torch

import tfm
from tfm.analysis.lens.logit import logit_lens
from tfm.generation.generate import prepare_prompt
from tfm.viz import sampling as fs
from ui import models, sidebar
from services import server

from tests.app.conftest import as_shown, chart_by_title, decode, open_page

PROMPT = sidebar.DEFAULT_PROMPT


def model():
    return models.load_lm(models.default_model_spec(), "cpu")


def configure(at, max_new=8, t=0.9, k=50, p=0.9, n=1):
    at.number_input(key="gen.max_new").set_value(max_new).run()
    at.select_slider(key="gen.temperature").set_value(t).run()
    at.number_input(key="gen.top_k").set_value(k).run()
    at.slider(key="gen.top_p").set_value(p).run()
    at.number_input(key="gen.n_samples").set_value(n).run()
    assert not at.exception, at.exception


def generate(at):
    at.button(key="gen.run").click().run()
    assert not at.exception, at.exception
    return [[r.token_id for r in sample] for sample in at.session_state["gen.last"]["samples"]]


def texts(at) -> list[str]:
    """The generated-text boxes as a reader sees them: tags removed, entities decoded."""
    boxes = [m.value for m in at.markdown if 'class="gen-text"' in m.value]
    return [html.unescape(re.sub(r"<[^>]+>", "", b.replace("<br>", "\n"))) for b in boxes]


def engine(max_new=8, t=0.9, k=50, p=0.9, seed=0, prompt=PROMPT, **kw):
    return list(tfm.generate(model(), prompt, max_new, t, k, p, seed=seed, use_cache=True, **kw))


def test_generation_is_reproducible_and_equals_the_engine():
    at = open_page("generate")
    configure(at)
    first = generate(at)
    assert generate(at) == first
    steps = engine()
    assert first == [[s.token_id for s in steps]]
    assert texts(at) == [PROMPT + steps[-1].text_so_far]
    assert any("tokens/s" in m.value for m in at.markdown)
    at.number_input(key="sidebar.seed").set_value(1).run()
    other = generate(at)
    assert other == [[s.token_id for s in engine(seed=1)]] and other != first


def test_samples_side_by_side_use_consecutive_seeds():
    at = open_page("generate")
    at.number_input(key="sidebar.seed").set_value(5).run()
    configure(at, max_new=10, t=1.2, k=0, p=1.0, n=3)
    got = generate(at)
    want = [[s.token_id for s in engine(10, 1.2, 0, 1.0, seed=sd)] for sd in (5, 6, 7)]
    assert got == want and len({tuple(g) for g in got}) == 3
    assert len(texts(at)) == 3
    configure(at, max_new=6, t=0.0, k=0, p=1.0, n=2)  # greedy: every seed gives the same text
    greedy = generate(at)
    assert greedy[0] == greedy[1] == [s.token_id for s in engine(6, 0.0, 0, 1.0)]


def test_timeline_shows_each_steps_token_probability_attention_and_lens():
    at = open_page("generate")
    configure(at, max_new=6, t=1.0, k=0, p=0.9)
    generate(at)
    lm = model()
    steps = engine(6, 1.0, 0, 0.9, trace=True)
    for i in (0, 3, 5):
        at.slider(key="gen.step").set_value(i).run()
        assert not at.exception, at.exception
        s = steps[i]
        metrics = {m.label: m.value for m in at.metric}
        assert metrics[f"Token {i} (pos. {s.position})"] == s.display
        assert metrics["Sampled with p"] == f"{s.prob:.4f}"
        assert metrics["Rank"] == f"{s.rank + 1}"
        assert metrics["Model's own p"] == f"{s.prob_original:.4f}"
        assert metrics["Model's rank"] == f"{s.rank_original + 1:,}"
        assert metrics["Tokens kept"] == f"{s.n_kept:,}"
        bars = chart_by_title(at, f"Step {i}: the distribution")
        status = {
            tid: tr["meta"]
            for tr in bars["data"]
            if tr.get("meta") in ("kept", "top_p", "top_k")
            for tid in decode(tr["customdata"]).tolist()
        }
        assert s.token_id in status
        for tid, st_ in status.items():
            assert (st_ == "kept") == bool(s.breakdown.kept[tid])
        assert bars["layout"]["annotations"][-1]["text"] == "chosen"
        _step_attention_and_lens_match(at, lm, i, s)


def _step_attention_and_lens_match(at, lm, i: int, s) -> None:
    """Step i's attention chart holds its trace's last-position rows; its lens chart the engine's
    logit lens (probabilities, hover pieces, the drawn token bold)."""
    attn = chart_by_title(at, f"Step {i}: where the last position")
    rows = torch.stack([s.trace[f"blocks.{l}.attn.pattern"][0, :, -1, :] for l in range(lm.config.n_layer)])
    want = rows.reshape(-1, rows.shape[-1])[:, -fs_window(rows) :].numpy()
    # a batched row: within the products' summation order of the solo run (~1e-7)
    np.testing.assert_allclose(decode(attn["data"][0]["z"]), want, rtol=0, atol=1e-6)
    lens = chart_by_title(at, f"Step {i}: logit lens")
    expected = logit_lens(lm.model, s.trace, k=5)
    np.testing.assert_allclose(decode(lens["data"][0]["z"]), expected.top_probs[:, -1].numpy(), atol=1e-6)
    hover = [[c.split(": p = ")[0] for c in row] for row in lens["data"][0]["customdata"]]
    want = [[html.escape(p) for p in lm.tokenizer.display_pieces(r.tolist())] for r in expected.top_ids[:, -1]]
    assert hover == want
    bold = [["<b>" in c for c in row] for row in lens["data"][0]["text"]]
    assert bold == (expected.top_ids[:, -1] == s.token_id).tolist()


def fs_window(rows: torch.Tensor) -> int:
    return min(rows.shape[-1], 64)


def test_new_tokens_are_capped_and_a_full_context_prompt_is_cut_as_the_engine_says():
    at = open_page("generate")
    lm = model()
    ctx, n = lm.config.context_length, len(lm.tokenizer.encode(PROMPT))
    assert at.number_input(key="gen.max_new").max == min(512, ctx - n)
    long = "The cat sat on the mat. " * 200
    at.text_area(key="sidebar.prompt").set_value(long).run()
    assert not at.exception, at.exception
    notice = prepare_prompt(lm, long).notice
    assert notice and any(notice in as_shown(w.value) for w in at.warning)
    assert at.number_input(key="gen.max_new").max == 1 and at.number_input(key="gen.max_new").value == 1
    assert generate(at) == [[s.token_id for s in engine(1, 0.8, 0, 1.0, prompt=long)]]


def test_compare_two_temperatures_on_the_same_seed():
    at = open_page("generate")
    configure(at, max_new=10, k=0, p=1.0)
    at.select_slider(key="cmp.t_left").set_value(0.2).run()
    at.select_slider(key="cmp.t_right").set_value(1.5).run()
    at.button(key="cmp.run").click().run()
    assert not at.exception, at.exception
    runs = {t: engine(10, t, 0, 1.0) for t in (0.2, 1.5)}
    got = [[r.token_id for r in sample] for sample in at.session_state["cmp.last"]["samples"]]
    assert got == [[s.token_id for s in runs[t]] for t in (0.2, 1.5)]
    assert texts(at) == [PROMPT + runs[t][-1].text_so_far for t in (0.2, 1.5)]
    prob = chart_by_title(at, "How likely the model found")
    play = chart_by_title(at, "Tokens really in play")
    for j, t in enumerate((0.2, 1.5)):
        # the page's two runs may share one batched decode step: equal within the product's rounding
        np.testing.assert_allclose(decode(prob["data"][j]["y"]), [s.prob_original for s in runs[t]], rtol=1e-5)
        np.testing.assert_allclose(
            decode(play["data"][j]["y"]), [np.exp(float(s.breakdown.entropy_after)) for s in runs[t]], rtol=1e-5
        )
        share = fs.repeated_ngram_share([s.token_id for s in runs[t]])
        assert any(f"repeated 3-token sequences: **{share:.0%}**" in m.value for m in at.markdown)


def test_cache_timing_runs_both_ways_and_gets_the_same_tokens():
    at = open_page("generate")
    configure(at, max_new=5)
    at.button(key="gen.cache_bench").click().run()
    assert not at.exception, at.exception
    speeds = at.session_state["gen.cache_speed"]
    assert speeds[True][1] == speeds[False][1] == [s.token_id for s in engine(5)]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["With KV cache"] == f"{speeds[True][0]:.1f} tokens/s"
    assert any("the same tokens" in c.value for c in at.caption)


def test_hostile_prompt_text_is_shown_as_text():
    at = open_page("generate")
    prompt = "<img src=x onerror=alert(1)> 🙂 漢字 <|endoftext|>"
    at.text_area(key="sidebar.prompt").set_value(prompt).run()
    configure(at, max_new=4)
    generate(at)
    box = next(m.value for m in at.markdown if 'class="gen-text"' in m.value)
    assert "<img" not in box and "&lt;img src=x onerror=alert(1)&gt;" in box
    assert texts(at)[0].startswith(prompt)


def test_cache_off_gives_the_same_text_and_says_so():
    at = open_page("generate")
    configure(at, max_new=6)
    at.toggle(key="gen.use_cache").set_value(False).run()
    assert generate(at) == [[s.token_id for s in engine(6)]]
    assert any("KV cache off" in m.value for m in at.markdown)


def test_results_of_another_model_are_set_aside_not_misread():
    at = open_page("generate")
    configure(at, max_new=4)
    generate(at)
    at.radio(key="sidebar.model_kind").set_value("random").run()
    at.selectbox(key="sidebar.preset").set_value("tiny").run()  # vocabulary 257: the old ids mean nothing
    assert not at.exception, at.exception
    assert any("made with another model" in i.value for i in at.info)
    assert not [m for m in at.markdown if 'class="gen-text"' in m.value]
    tiny = at.session_state["app.model_spec"]
    assert generate(at) and at.session_state["gen.last"]["model"] == (tiny, "cpu")


def test_the_page_generates_through_the_shared_batcher_and_without_it_the_same_text():
    """Batching on (the default): the page's rows run in the model's batcher, with the text and
    timeline numbers of tfm.generate; --batching off: the session's own loop, the same tokens."""
    at = open_page("generate")
    configure(at, max_new=10, n=2)
    batched = generate(at)
    b = models._BATCHERS[(models.default_model_spec(), "cpu")]
    assert b.steps > 0 and b.widest == 2 and b.load() == (0, 0)  # both samples were rows of one step
    solo = [engine(max_new=10, seed=s) for s in (0, 1)]
    assert batched == [[s.token_id for s in steps] for steps in solo]
    recs = at.session_state["gen.last"]["samples"][0]
    assert np.allclose([r.prob for r in recs], [s.prob for s in solo[0]], atol=1e-5)
    assert recs[-1].attn is not None and recs[-1].attn.shape[-1] == recs[-1].position  # the row's own keys
    s = server.settings()
    server.configure(dataclasses.replace(s, batching=False))
    steps_before = b.steps
    assert generate(at) == batched and b.steps == steps_before
