"""tfm.viz's notebook figures: every number drawn equals the trace's (or Hugging Face's attention
tensors, or a direct recomputation), and bad inputs get one clear ValueError."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tfm
import tfm.viz as viz
from tfm.analysis import attribution, head_table

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = "Once upon a time there was a cat. The cat sat on the mat, and the cat was happy."


@pytest.fixture(scope="module")
def run():
    lm = tfm.load("default")
    ids = lm.tokenizer.prompt_ids(PROMPT)
    with torch.no_grad():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    return lm, ids, trace, viz.tokens(lm, ids)


def masked(m: torch.Tensor) -> np.ndarray:
    """(..., T, T) as the figures draw it: float32, NaN where the key comes after the query."""
    out = m.float().numpy().copy()
    out[..., np.triu(np.ones(out.shape[-2:], dtype=bool), 1)] = np.nan
    return out


def test_pattern_equals_the_trace(run):
    lm, ids, trace, toks = run
    fig = viz.attention_pattern(trace, toks, layer=2, head=3)
    np.testing.assert_array_equal(fig.data[0].z, masked(trace.pattern(2)[3]))
    assert list(fig.data[0].x) == [f"{t} ·{i}" for i, t in enumerate(toks)]  # unique per position
    mean = viz.attention_pattern(trace, toks, layer=1, mode="mean")
    np.testing.assert_allclose(mean.data[0].z, masked(trace.pattern(1).mean(0)), rtol=1e-6, equal_nan=True)


def test_window_and_hidden_first_token(run):
    lm, ids, trace, toks = run
    fig = viz.attention_pattern(trace, toks, 0, 1, positions=(3, 9))
    np.testing.assert_array_equal(fig.data[0].z, masked(trace.pattern(0)[1][3:10, 3:10]))
    assert "positions 3–9" in fig.layout.title.text
    hid = viz.attention_pattern(trace, toks, 0, 1, hide_first=True)
    rows = trace.pattern(0)[1][1:, 1:]
    np.testing.assert_allclose(hid.data[0].z, masked(rows / rows.sum(-1, keepdim=True)), rtol=1e-6, equal_nan=True)
    assert np.nansum(hid.data[0].z, axis=1) == pytest.approx(np.ones(len(ids) - 1), abs=1e-5)


def test_every_head_grid_holds_every_pattern(run):
    lm, ids, trace, toks = run
    n, step = len(ids), len(ids) + 1
    z = viz.all_heads(trace, toks).data[0].z
    for layer in range(lm.config.n_layer):
        for head in range(lm.config.n_head):
            cell = z[layer * step : layer * step + n, head * step : head * step + n]
            np.testing.assert_array_equal(cell, masked(trace.pattern(layer)[head]))
    one = viz.layer_heads(trace, toks, 4).data[0].z
    np.testing.assert_array_equal(one[:n, step + 0 : step + n], masked(trace.pattern(4)[1]))
    assert one.shape[0] == n
    two = viz.all_heads(trace, toks, [2, 4])
    np.testing.assert_array_equal(two.data[0].z[step : step + n, :n], masked(trace.pattern(4)[0]))
    assert two.data[0].y[step] == f"L4 query {toks[0]} ·0" and two.layout.yaxis.ticktext == ("layer 2", "layer 4")


def test_head_view_lines_and_hover_weights(run):
    lm, ids, trace, toks = run
    q = 12
    fig = viz.head_view(trace, toks, layer=1, heads=[0, 2], token=q)
    hover = [t for t in fig.data if t.name and t.name.endswith("weights")]
    assert [t.name for t in hover] == ["head 0 weights", "head 2 weights"]
    for t, head in zip(hover, (0, 2)):
        keys, weights = np.asarray(t.customdata).T
        np.testing.assert_allclose(weights, trace.pattern(1)[head, q, keys.astype(int)].numpy(), rtol=1e-6)
        assert keys.tolist() == list(range(q + 1))
    full = viz.head_view(trace, toks, layer=1)  # every head, every query: one opacity trace per 0.05 step
    drawn = sum(len(t.x) // 3 for t in full.data if t.mode == "lines" and t.x[0] is not None)
    want = (np.round(trace.pattern(1).numpy() * 20) > 0).sum()
    assert drawn == want


def _peaked_gpt2_attentions(tr, vocab_folder):
    """A random 2-layer GPT-2 with weights scaled far from uniform attention, its tokenizer, two
    9-token rows and their attentions (a tuple of (B, H, T, T), as BertViz takes them)."""
    torch.manual_seed(0)
    hf = tr.GPT2LMHeadModel(
        tr.GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=32, vocab_size=320, attn_implementation="eager")
    ).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.mul_(8)  # far from uniform attention
    tok = tr.GPT2TokenizerFast(str(vocab_folder / "vocab.json"), str(vocab_folder / "merges.txt"))
    enc = tok(
        ["The cat sat on the mat. The dog sat on the log.", "hello world, hello there! 123 456 7890"],
        return_tensors="pt",
        max_length=9,
        truncation=True,
    )  # both longer: no padding needed
    assert enc["input_ids"].shape == (2, 9)
    with torch.no_grad():
        att = hf(enc["input_ids"], output_attentions=True).attentions
    return hf, tok, enc, att


def test_attention_figures_take_hugging_face_attentions(gpt2_vocab_folder, tmp_path):
    """BertViz's inputs (a tuple of (B, H, T, T) tensors, HF tokens) draw the same numbers; and
    the same model converted into tfm draws the same figure from its trace."""
    hf, tok, enc, att = _peaked_gpt2_attentions(pytest.importorskip("transformers"), gpt2_vocab_folder)
    names = tok.convert_ids_to_tokens(enc["input_ids"][1])
    for fig, want in (
        (viz.attention_pattern(att, names, 1, 2, batch=1), att[1][1, 2]),
        (viz.attention_pattern(torch.stack(att), names, 0, 3, batch=1), att[0][1, 3]),
    ):
        np.testing.assert_array_equal(fig.data[0].z, masked(want))
        assert fig.data[0].x[0] == f"{names[0]} ·0"
    grid = viz.all_heads(att, names, batch=1).data[0].z
    np.testing.assert_array_equal(grid[10:19, 30:39], masked(att[1][1, 3]))
    hv = viz.head_view(att, names, 0, [1], token=5, batch=1)
    np.testing.assert_allclose(np.asarray(hv.data[-3].customdata)[:, 1], att[0][1, 1, 5, :6].numpy(), rtol=1e-6)

    hf.save_pretrained(tmp_path / "m")
    for name in ("vocab.json", "merges.txt"):
        (tmp_path / "m" / name).write_bytes((gpt2_vocab_folder / name).read_bytes())
    lm = tfm.load(str(tmp_path / "m"))
    ids = enc["input_ids"][0].tolist()
    with torch.no_grad():
        trace = lm.model(torch.tensor([ids]), trace=True).trace
    ours = viz.attention_pattern(trace, viz.tokens(lm, ids), 1, 2).data[0].z
    np.testing.assert_allclose(ours, viz.attention_pattern(att, names, 1, 2).data[0].z, atol=1e-5, equal_nan=True)


def test_bad_inputs_are_refused_clearly(run):
    lm, ids, trace, toks = run
    with pytest.raises(ValueError, match="list of .* strings, one per position"):
        viz.attention_pattern(trace, toks[:-1])
    with pytest.raises(ValueError, match="layer=9 is out of range"):
        viz.head_view(trace, toks, 9)
    with pytest.raises(ValueError, match="output_attentions=True"):
        viz.attention_pattern({"a": 1}, toks)
    with pytest.raises(ValueError, match="at most 64"):
        viz.attention_pattern(trace, toks, positions=(0, 10)) and None or viz.head_view(
            (torch.rand(1, 2, 80, 80),), ["x"] * 80, positions=(0, 79)
        )
    with pytest.raises(ValueError, match="stacked attention tensor"):
        viz.attention_pattern(torch.rand(2, 4, 5, 5), ["a"] * 5)


def test_logit_lens_cells_equal_a_direct_decoding(run):
    lm, ids, trace, toks = run
    fig = viz.logit_lens(lm, trace, ids)
    m = lm.model
    with torch.no_grad():
        streams = torch.stack([x for _, x in trace.residual_streams(0)])  # (L+1, T, D)
        probs = m.unembed(m.ln_final(streams)).softmax(-1)
    top = probs.max(-1)
    np.testing.assert_allclose(fig.data[0].z, top.values.numpy(), rtol=1e-5)
    assert fig.data[0].y == ("embed",) + tuple(f"block {i}" for i in range(lm.config.n_layer))
    # bold cells: exactly where the top prediction is the token that follows in the prompt
    bold = np.array([[t.startswith("<b>") for t in row] for row in fig.data[0].text])
    want = (top.indices[:, :-1] == torch.tensor(ids[1:])).numpy()
    np.testing.assert_array_equal(bold[:, :-1], want)


def test_attribution_bars_equal_direct_attribution(run):
    lm, ids, trace, toks = run
    fig = viz.attribution_bars(lm, ids, position=10, token=" cat", trace=trace, top=7)
    attr = attribution.direct(lm, ids, 10, lm.tokenizer.encode(" cat")[0], None, trace)
    want = dict(zip(attr.components, attr.values.numpy()))
    bars = fig.data[0]
    assert len(bars.y) == 7
    order = sorted(want, key=lambda k: -abs(want[k]))[:7][::-1]
    np.testing.assert_allclose(bars.x, [want[k] for k in order], rtol=1e-12)
    assert attr.values.sum().item() == pytest.approx(attr.target, abs=1e-3)
    assert f"{attr.target:.4f}" in fig.layout.title.text


def test_next_token_bars_equal_the_softmax(run):
    lm, ids, trace, toks = run
    fig = viz.next_token(lm, trace, temperature=0.7, top_k=5, count=12)
    logits = trace.logits_at(-1).double()
    p_t = (logits / 0.7).softmax(-1)
    shown = logits.topk(12).indices
    orig = next(t for t in fig.data if t.meta == "original")
    np.testing.assert_allclose(orig.y, logits.softmax(-1)[shown].numpy(), rtol=1e-5)
    heights = {int(i): y for t in fig.data if t.meta in ("kept", "top_k", "top_p") for i, y in zip(t.customdata, t.y)}
    assert heights == pytest.approx({int(i): float(p_t[i]) for i in shown}, rel=1e-5)


def test_positions_and_norms_equal_the_model(run):
    lm, ids, trace, toks = run
    pos = viz.positional_encodings(lm, 40)
    np.testing.assert_array_equal(pos.data[0].z, lm.model.pos_emb.weight[:40].detach().numpy())
    fig = viz.norm_statistics(trace, toks, "ln2.input_std")
    x = torch.stack([trace[f"blocks.{i}.ln2.input"][0] for i in range(lm.config.n_layer)]).double()
    std = (x.var(-1, unbiased=False) + lm.config.norm_eps).sqrt()  # LayerNorm's std: eps inside the root
    np.testing.assert_allclose(fig.data[0].z, std.numpy(), rtol=1e-5)
    res = viz.residual_norms(trace, toks)
    streams = torch.stack([s for _, s in trace.residual_streams(0)])
    np.testing.assert_allclose(res.data[0].z, streams.norm(dim=-1).numpy(), rtol=1e-5)
    with pytest.raises(ValueError, match="not one of"):
        viz.norm_statistics(trace, toks, "ln3.std")
    rope = tfm.random_model(tfm.ModelConfig.preset("tiny", pos_encoding="rope"))
    angles = viz.positional_encodings(rope, 16).data[0].customdata
    want = torch.arange(16.0)[:, None] * rope.model.inv_freq[None]
    np.testing.assert_allclose(angles, want.numpy(), rtol=1e-6)


def test_head_table_equals_the_analysis(run):
    lm, ids, trace, toks = run
    fig = viz.head_table(lm, trace, ids, digits=4)
    cols = dict(zip(fig.data[0].header.values, fig.data[0].cells.values))
    scores = head_table(lm, trace, ids).scores
    assert list(cols["head"][:3]) == ["L0 H0", "L0 H1", "L0 H2"]
    for name, s in scores.items():
        np.testing.assert_array_equal(cols[name.replace("_", " ")], s.flatten().numpy())
    assert fig.data[0].cells.format[1] == ".4f"


def test_generation_figures_equal_the_steps(run):
    lm = run[0]
    prompt_ids, records = viz.record_generation(lm, "Once upon a time", max_new_tokens=6, temperature=0.8, seed=3)
    steps = list(tfm.generate(lm, "Once upon a time", 6, temperature=0.8, seed=3))
    assert [r.token_id for r in records] == [s.token_id for s in steps]
    line = viz.generation_timeline(records).data[0]
    np.testing.assert_allclose(line.y, [s.prob_original for s in steps], rtol=1e-6)
    att = viz.generation_attention(lm, prompt_ids, records, step=4).data[0]
    seq = prompt_ids + [s.token_id for s in steps[:4]]
    with torch.no_grad():  # the position before token 4, read from a full traced forward
        tr = lm.model(torch.tensor([seq]), trace=True).trace
    want = torch.stack([tr.pattern(i)[:, -1] for i in range(lm.config.n_layer)])
    np.testing.assert_allclose(att.z, want.reshape(-1, len(seq)).numpy(), atol=1e-5)
    assert len(att.x) == len(seq)


def test_trace_prompt_is_the_models_traced_forward(run):
    lm, ids, trace, toks = run
    got, names = viz.trace_prompt(lm, PROMPT)
    assert names == toks
    for layer in (0, 5):
        torch.testing.assert_close(got.pattern(layer), trace.pattern(layer), rtol=0, atol=0)
    with pytest.raises(ValueError, match="this model reads 1 to 256"):
        viz.trace_prompt(lm, "cat " * 300)
