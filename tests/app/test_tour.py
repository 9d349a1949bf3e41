"""Tour page: every step's numbers equal the engine's tensors (recomputed here from the trace and
the weights with torch's own functions), on the bundled model and on a RoPE/RMSNorm/SwiGLU model;
the checks grade the engine's answer right and another wrong."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tfm.text.token_view import token_labels
from ui import models

from streamlit.testing.v1 import AppTest

from tests.app.conftest import APP, charts, decode, open_page, use_random
from tests.app.matrix import open_cell, random

PROMPT = "Lily saw a ball. Lily took the ball and gave it to"


def engine(at):
    lm = models.load_lm(at.session_state["app.model_spec"], "cpu")
    ids = lm.tokenizer.encode(at.session_state["sidebar.prompt"])[-lm.config.context_length :]
    with torch.no_grad():
        tr = lm.model(torch.tensor([ids]), trace=True).trace
    return lm, ids, tr


def norm_oracle(mod, x, cfg):
    if cfg.norm == "layernorm":
        return F.layer_norm(x, x.shape, mod.weight, mod.bias, cfg.norm_eps)
    return F.rms_norm(x, x.shape, mod.weight, cfg.norm_eps)


W8 = slice(0, 8)  # the first eight entries of a vector, as the tour's tables show them


@torch.no_grad()
def expected(lm, ids, tr, p, layer, head, seed):
    """(step, tensor name) -> the numbers the page must show, computed without tfm.teach.tour."""
    first = slice(max(0, p - 7), p + 1)
    out = _input_steps(lm, ids, tr, p, first)
    attention, resid_mid = _attention_steps(lm, ids, tr, p, layer, head, first)
    out |= attention | _norm_and_mlp_steps(lm.config, lm.model.blocks[layer], resid_mid)
    out |= _output_steps(lm, tr, p, seed)
    return {key: np.asarray(v.detach().double()) if torch.is_tensor(v) else v for key, v in out.items()}


def _input_steps(lm, ids, tr, p, first) -> dict:
    """Token ids, the embedding and the positions: what enters block 0."""
    cfg, m = lm.config, lm.model
    e = m.tok_emb.weight[ids[p]]
    out = {("tokens", "token ids"): np.array(ids[first], float), ("embed", f"e = W_E[{ids[p]}]"): e[W8]}
    if cfg.pos_encoding == "learned":
        out[("positions", f"p_{p}")] = m.pos_emb.weight[p][W8]
        out[("positions", "x_0 = e + p")] = (e + m.pos_emb.weight[p])[W8]
    else:
        out[("positions", "x_0 = e")] = e[W8]
        if cfg.pos_encoding == "rope":
            out[("positions", f"angles at position {p}")] = (p * m.inv_freq)[W8]
    x0 = tr["blocks.0.resid_pre"][0, p]
    assert torch.allclose(x0, (e + m.pos_emb.weight[p]) if cfg.pos_encoding == "learned" else e, atol=1e-6)
    return out


def _attention_steps(lm, ids, tr, p, layer, head, first) -> tuple[dict, torch.Tensor]:
    """One head's queries, keys, scores, mask, softmax and output, then the sublayer's: the steps
    and the residual stream after attention."""
    cfg, b, blk = lm.config, f"blocks.{layer}", lm.model.blocks[layer]
    x_in = norm_oracle(blk.ln1, tr[f"{b}.resid_pre"][0, p], cfg)
    g = head // (cfg.n_head // cfg.n_kv_head)  # Hugging Face's repeat_kv: the key/value head query head `head` reads
    q, k, v = tr[f"{b}.attn.q"][0, head], tr[f"{b}.attn.k"][0, g], tr[f"{b}.attn.v"][0, g]
    out = {("qkv", "LN1(x)"): x_in[W8]}
    for n, t in (("q", q), ("k", k), ("v", v)):
        out[("qkv", n)] = t[p][W8]
    raw = q[p] @ k[: p + 1].T
    out[("scores", "q · k_j")] = raw[first]
    out[("scores", "s_j")] = (raw / math.sqrt(cfg.d_head))[first]
    full = (q @ k.T) / math.sqrt(cfg.d_head)
    full = full.masked_fill(torch.ones_like(full, dtype=torch.bool).triu(1), float("-inf"))
    lo = max(0, min(p - 5, len(ids) - 6))
    out[("mask", "scores, rows = queries")] = full[lo : lo + 6, lo : lo + 6]
    a = full[p].softmax(-1)
    out[("softmax", "a_j")] = a[first]
    out[("weighted", "z")] = (a @ v)[W8]
    out[("heads", "z per head")] = tr[f"{b}.attn.z"][0, :, p, :8]
    attn_out = blk.attn.proj(tr[f"{b}.attn.z"][0, :, p].reshape(-1))
    out[("heads", "attn_out")] = attn_out[W8]
    resid_mid = tr[f"{b}.resid_pre"][0, p] + attn_out
    out[("residual", "x + attn_out (resid_mid)")] = resid_mid[W8]
    return out, resid_mid


def _norm_and_mlp_steps(cfg, blk, resid_mid) -> dict:
    """The second norm (its statistics, gain and bias) and the MLP, from the stream after attention."""
    out = {("norm", "input x"): resid_mid[W8]}
    if cfg.norm == "layernorm":
        out[("norm", "mean μ, variance σ²")] = torch.stack([resid_mid.mean(), resid_mid.var(unbiased=False)])
        out[("norm", "bias β")] = blk.ln2.bias[W8]
    else:
        out[("norm", "rms")] = resid_mid.pow(2).mean().add(cfg.norm_eps).sqrt().reshape(1)
    out[("norm", "gain γ")] = blk.ln2.weight[W8]
    h2 = norm_oracle(blk.ln2, resid_mid, cfg)
    out[("norm", "output y")] = h2[W8]
    if cfg.activation == "swiglu":
        out[("mlp", "gate h")], out[("mlp", "up u")] = blk.mlp.gate(h2)[W8], blk.mlp.fc(h2)[W8]
        post = F.silu(blk.mlp.gate(h2)) * blk.mlp.fc(h2)
    else:
        out[("mlp", "pre-activation h")] = blk.mlp.fc(h2)[W8]
        post = F.gelu(blk.mlp.fc(h2), approximate="tanh")
    out[("mlp", "after activation")] = post[W8]
    out[("mlp", "resid_post")] = (resid_mid + blk.mlp.proj(post))[W8]
    return out


def _output_steps(lm, tr, p, seed) -> dict:
    """The stream's size through the blocks, the final norm, the logits and the drawn token."""
    cfg, m = lm.config, lm.model
    last = tr[f"blocks.{cfg.n_layer - 1}.resid_post"][0, p]
    out = {
        ("blocks", "‖x‖"): torch.stack(
            [tr[f"blocks.{i}.resid_pre"][0, p].norm() for i in range(cfg.n_layer)] + [last.norm()]
        )
    }
    xl = norm_oracle(m.ln_final, last, cfg)
    out[("final_norm", "LN_f(x_L)")] = xl[W8]
    logits = (m.unembed.weight @ xl)[: lm.tokenizer.vocab_size]
    out[("logits", "ℓ (top 8)")] = logits.sort(descending=True).values[:8]
    probs = logits.softmax(-1)
    out[("sampling", "P at T = 1")] = probs.sort(descending=True).values[:8]
    drawn = int(torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed)))
    out[("drawn", "drawn id, P")] = torch.tensor([drawn, float(probs[drawn])])
    return out


def shown_tables(at) -> dict[str, np.ndarray]:
    names = [md.value for md in at.markdown if md.value.startswith("**") and " · shape (" in md.value]
    names = [n[2 : n.index("**", 2)].replace("\\", "") for n in names]
    assert len(names) == len(at.table), (names, len(at.table))
    return {n: t.value.map(shown_number).to_numpy(dtype=float) for n, t in zip(names, at.table)}


def shown_number(text: str) -> float:
    """A table cell as the page shows it: four decimals, a whole number, or −∞."""
    return float("-inf") if text == "−∞" else float(text)


def walk(at, p, layer, head):
    at.selectbox(key="tour.pos").set_value(p)
    at.selectbox(key="tour.layer").set_value(layer)
    at.selectbox(key="tour.head").set_value(head).run()
    assert not at.exception, at.exception
    lm, ids, tr = engine(at)
    exp = expected(lm, ids, tr, p, layer, head, at.session_state["sidebar.seed"])
    keys = at.selectbox(key="tour.step").options
    assert 12 <= len(keys) <= 20
    seen = set()
    at.selectbox(key="tour.step").set_value("tokens").run()
    for i in range(len(keys)):
        step = at.session_state["tour.step"]
        assert not at.exception, at.exception
        assert at.header[0].value and at.get("latex"), step
        for name, values in shown_tables(at).items():
            if (step, name) in exp:
                # shown with four decimals: equal to the engine's value rounded there
                np.testing.assert_allclose(
                    values.ravel(),
                    np.asarray(exp[(step, name)]).ravel(),
                    rtol=1e-6,
                    atol=5.1e-5,
                    err_msg=f"{step}: {name}",
                )
                seen.add((step, name))
        if i < len(keys) - 1:
            at.button(key="tour.next").click().run()
    assert seen == set(exp), f"not shown: {set(exp) - seen}"
    return lm, ids, tr


def test_every_step_equals_the_engine_on_the_bundled_model():
    at = open_page("tour", PROMPT)
    lm, ids, tr = walk(at, 8, 1, 2)
    assert at.query_params["step"] == "drawn" and at.query_params["pos"] == "8"
    at.button(key="tour.prev").click().run()
    assert at.session_state["tour.step"] == "sampling"
    # The softmax step's chart holds the whole attention row, not only the table's window.
    at.selectbox(key="tour.step").set_value("softmax").run()
    row = decode(charts(at)[0]["data"][0]["y"])
    np.testing.assert_allclose(row, tr["blocks.1.attn.pattern"][0, 2, 8, :9].numpy(), rtol=1e-5)


def test_every_step_equals_the_engine_on_a_rope_rmsnorm_swiglu_model():
    at = open_page("tour", "Lily saw Lily")
    use_random(at, "tiny", pos_encoding="rope", norm="rmsnorm", activation="swiglu")
    walk(at, 9, 1, 1)
    at.selectbox(key="tour.step").set_value("positions").run()
    assert "RoPE" in at.header[0].value


@pytest.mark.parametrize("n_kv,head", [(3, 7), (1, 8)], ids=["grouped-query", "multi-query"])
def test_every_step_equals_the_engine_at_a_query_head_past_the_kv_heads(n_kv, head):
    """9 query heads over 3 (or 1) key/value heads: query head 7 reads key/value head 2 (SmolLM2's
    shape; heads past the key/value heads used to crash the page, tests/app/test_gqa_pages.py)."""
    at = open_cell("tour", random("smollm2-135m", d_model=72, n_head=9, n_kv_head=n_kv))
    assert not at.exception, at.exception
    walk(at, 9, 1, head)


def answer(at, step, option_text):
    radio = at.radio(key=f"tour.answer.{step}")
    radio.set_value(radio.options.index(option_text))
    at.button(key=f"FormSubmitter:tour.form.{step}-Check my answer").click().run()
    assert not at.exception, at.exception


@pytest.mark.parametrize("step", ["softmax", "logits", "qkv"])
def test_checks_grade_the_engines_answer(step):
    at = open_page("tour", PROMPT)
    at.selectbox(key="tour.pos").set_value(10)
    at.selectbox(key="tour.step").set_value(step).run()
    lm, ids, tr = engine(at)
    labels = token_labels(lm.tokenizer, ids)
    if step == "softmax":
        right = labels[int(tr["blocks.0.attn.pattern"][0, 0, 10, :11].argmax())]
    elif step == "logits":
        right = repr(lm.tokenizer.display_piece(int(tr["logits"][0, 10, : lm.tokenizer.vocab_size].argmax())))
    else:
        right = f"{sum(p.numel() for p in lm.model.blocks[0].attn.parameters()):,}"
    opts = [o.replace("\\", "") for o in at.radio(key=f"tour.answer.{step}").options]
    assert right in opts
    wrong = next(o for o in opts if o != right)
    answer(at, step, at.radio(key=f"tour.answer.{step}").options[opts.index(wrong)])
    assert at.error and not at.success and "Not this time" in at.error[0].value
    answer(at, step, at.radio(key=f"tour.answer.{step}").options[opts.index(right)])
    assert at.success and "Right" in at.success[0].value and not at.error


def test_presentation_mode_and_bad_links():
    at = AppTest.from_file(APP, default_timeout=120)  # a shared link: parameters before the first run
    at.query_params.update(present="1", step="nonsense", pos="99999")
    at.switch_page("pages/tour.py").run()
    assert not at.exception, at.exception
    assert at.toggle(key="tour.present").value is True
    assert any("no step" in w.value for w in at.warning)
    assert at.session_state["tour.pos"] == len(engine(at)[1]) - 1
    assert any("stSidebar" in md.value for md in at.markdown)  # the projector CSS is on


def test_token_pieces_in_table_headers_show_as_typed():
    """st.table renders Markdown in every cell, headers and row labels included; the Tour's are
    token pieces of the prompt, so a link or emphasis typed there must arrive escaped."""
    at = open_page("tour", "see [x](http://e.com) *now* `c` $y$ <b>")
    headers = []
    for step in at.selectbox(key="tour.step").options:
        at.selectbox(key="tour.step").set_value(step).run()
        assert not at.exception, at.exception
        for t in at.table:
            headers += [str(c) for c in t.value.columns] + [str(i) for i in t.value.index]
    special = [h for h in headers if any(c in h for c in "[]*`$<")]
    assert special, "the prompt's Markdown characters should appear in some header"
    unescaped = [h for h in special if re.search(r"(?<!\\)[\[\]*`$<]", h)]
    assert not unescaped, unescaped
