"""Next-token explorer: the bars, colours and numbers equal tfm.sampling.breakdown on the
model's own logits, slider changes never run the model, and bad input shows no traceback."""

from __future__ import annotations

import html

import numpy as np
import pytest
import torch

from tfm.core.model import GPT
from tfm.generation.sampling import breakdown
from ui import models, sidebar

from tests.app.conftest import chart_by_title, decode, open_page

STATUSES = ("kept", "top_k", "top_p", "greedy")


def engine_logits(prompt: str) -> torch.Tensor:
    """Last-position logits straight from the default model (not through the app's cache), from a
    traced forward like the app's: the untraced path may use a fused attention kernel whose
    last bits differ."""
    lm = models.load_lm(models.default_model_spec(), "cpu")
    with torch.inference_mode():
        return lm.model(torch.tensor([lm.tokenizer.encode(prompt)]), trace=True).logits[0, -1].float()


def read_chart(at) -> dict:
    """Decode the explorer's bar chart: per shown token id its status, bar heights, the tail."""
    fig = chart_by_title(at, "Next-token probabilities")
    out = {"status": {}, "p_t": {}, "order": [], "label": {}}
    by_meta = {tr.get("meta"): tr for tr in fig["data"]}
    for tr in fig["data"]:
        if tr.get("meta") in STATUSES:
            for label, tid, y in zip(tr["x"], decode(tr["customdata"]).tolist(), decode(tr["y"]).tolist()):
                out["status"][tid], out["p_t"][tid], out["label"][label] = tr["meta"], y, tid
    cats = fig["layout"]["xaxis"]["categoryarray"]
    out["order"] = [out["label"][c] for c in cats]
    orig = by_meta["original"]
    out["p0"] = {out["label"][x]: y for x, y in zip(orig["x"], decode(orig["y"]).tolist())}
    out["tail"] = decode(by_meta["tail"]["customdata"]).ravel().tolist()
    out["p0_tail"] = decode(by_meta["original_tail"]["y"]).tolist()[0]
    out["final"] = {out["label"][x]: y for x, y in zip(by_meta["final"]["x"], decode(by_meta["final"]["y"]).tolist())}
    out["fig"] = fig
    return out


def set_sampling(at, t, k, p):
    at.select_slider(key="next.temperature").set_value(t).run()
    at.number_input(key="next.top_k").set_value(k).run()
    at.slider(key="next.top_p").set_value(p).run()
    assert not at.exception, at.exception


def metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_sliders_change_the_kept_set_exactly_as_breakdown_says():
    at = open_page("next_token")
    logits = engine_logits(sidebar.DEFAULT_PROMPT)
    order = torch.sort(logits, descending=True, stable=True).indices.tolist()
    seen = set()
    for t, k, p in [(1.0, 0, 1.0), (0.7, 10, 1.0), (0.1, 0, 0.5), (0.2, 5, 0.3), (1.5, 40, 0.9)]:
        set_sampling(at, t, k, p)
        bd = breakdown(logits, t, k, p)
        chart = read_chart(at)
        assert chart["order"] == order[:20]
        for tid in chart["order"]:
            want = "kept" if bd.kept[tid] else ("top_p" if bd.kept_after_top_k[tid] else "top_k")
            assert chart["status"][tid] == want, (t, k, p, tid)
            assert chart["p_t"][tid] == pytest.approx(float(bd.probs_t[tid]), rel=1e-5, abs=1e-9)
            assert chart["p0"][tid] == pytest.approx(float(bd.probs[tid]), rel=1e-5, abs=1e-9)
        for tid, y in chart["final"].items():
            assert y == pytest.approx(float(bd.final[tid]), rel=1e-5, abs=1e-9)
        n_shown_kept = sum(s == "kept" for s in chart["status"].values())
        assert chart["tail"] == [len(logits) - 20, int(bd.n_kept) - n_shown_kept]
        assert metric(at, f"Tokens kept (of {len(logits):,})") == f"{int(bd.n_kept):,}"
        assert metric(at, "Mass removed by top-k") == f"{float(bd.mass_removed_top_k):.2%}"
        assert metric(at, "Mass removed by top-p") == f"{float(bd.mass_removed_top_p):.2%}"
        assert metric(at, "Entropy after") == f"{float(bd.entropy_after) + 0.0:.3f} nats"  # no "-0.000"
        seen |= set(chart["status"].values())
    assert seen == {"kept", "top_k", "top_p"}  # the settings above exercise every colour


def test_temperature_zero_keeps_exactly_one_token_and_says_greedy():
    at = open_page("next_token")
    set_sampling(at, 0.0, 0, 0.9)
    chart = read_chart(at)
    logits = engine_logits(sidebar.DEFAULT_PROMPT)
    kept = [tid for tid, s in chart["status"].items() if s == "kept"]
    assert kept == [int(logits.argmax())]
    assert set(chart["status"].values()) == {"kept", "greedy"}
    assert chart["tail"][1] == 0
    assert chart["final"] == {kept[0]: 1.0}
    assert metric(at, f"Tokens kept (of {len(logits):,})") == "1"
    assert metric(at, "Entropy after") == "0.000 nats"
    assert any("greedy" in i.value for i in at.info)


def test_slider_changes_do_not_run_the_model(monkeypatch):
    at = open_page("next_token")
    calls = []
    forward = GPT.forward
    monkeypatch.setattr(GPT, "forward", lambda self, *a, **kw: calls.append(1) or forward(self, *a, **kw))
    set_sampling(at, 0.5, 7, 0.8)
    at.slider(key="next.count").set_value(40).run()
    assert not at.exception
    assert len(read_chart(at)["order"]) == 40
    assert calls == []
    at.text_area(key="sidebar.prompt").set_value("A different prompt").run()  # the counter does count
    assert len(calls) == 1


def test_link_values_are_clamped_and_bad_prompts_show_as_text():
    at = open_page(None)
    at.query_params.update({"t": "0.55", "top_k": "999999", "top_p": "7"})
    at.switch_page("pages/next_token.py").run()
    assert not at.exception, at.exception
    assert at.select_slider(key="next.temperature").value in (0.5, 0.6)
    vocab = models.load_lm(models.default_model_spec(), "cpu").tokenizer.vocab_size
    assert at.number_input(key="next.top_k").value == vocab
    assert at.slider(key="next.top_p").value == 1.0
    prompt = "<img src=x onerror=alert(1)> 🙂 漢字 <|endoftext|>"
    at.text_area(key="sidebar.prompt").set_value(prompt).run()
    assert not at.exception, at.exception
    chart = read_chart(at)
    title = chart["fig"]["layout"]["xaxis"]["title"]["text"]
    tok = models.load_lm(models.default_model_spec(), "cpu").tokenizer
    end = "".join(tok.display_pieces(tok.encode(prompt)[-6:]))
    assert "&gt;" in html.escape(end) and html.escape(end) in title  # the prompt's end, escaped
    assert "<" not in title.split("after")[1].replace("</sup>", "")
    assert sum(chart["p0"].values()) + chart["p0_tail"] == pytest.approx(1.0, abs=1e-5)
    assert np.isfinite(list(chart["p_t"].values())).all()
