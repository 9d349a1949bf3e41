"""The Attention page's panels that work out how attention is made: the neuron view (every
model) and a sentence pair's head view (encoders: sentence A against sentence B)."""

from __future__ import annotations

import streamlit as st

from tfm.analysis.encoders.bert_heads import KINDS as LOOK_KINDS
from tfm.analysis.encoders.bert_heads import SAMPLE_TEXTS
from tfm.analysis.capability import pair_ranges
from tfm.viz import encoder as encoder_figs
from ui import charts, links

__all__ = ["LOOK_KINDS", "SAMPLE_TEXTS"]  # for the What-heads-look-at page (tfm.analysis.encoders.bert_heads)

PAIR_VIEWS = {"all": "All tokens", "ab": "Sentence A → B", "ba": "Sentence B → A", "aa": "A → A", "bb": "B → B"}
SHOWN_DIMS = 32


def _position(label: str, key: str, n: int, default: int, labels: list[str]) -> int:
    links.clamp_int(key, 0, n - 1, default, label)
    return st.selectbox(label, list(range(n)), format_func=lambda i: f"{i}: {labels[i]}", **links.keep(key))


def neuron(run, layer: int, head: int) -> None:
    """BertViz's neuron view for one head: q, k, their products, the sum, the scaling, the softmax row."""
    n, cfg = len(run.ids), run.lm.config
    c1, c2 = st.columns(2)
    with c1:
        query = _position("Query position (the token looking)", "attn.nv_query", n, n - 1, run.labels)
    with c2:
        key = _position("Key position (the token looked at)", "attn.nv_key", n, max(n - 2, 0), run.labels)
    v = run.neuron_view(layer, head, query, key)
    rope = " after RoPE" if cfg.pos_encoding == "rope" else ""
    shared = f" Under grouped-query attention this head reads {cfg.kv_sharing(head)}." if cfg.group_size > 1 else ""
    st.caption(
        f"Layer {layer}, head {head}: the query vector q of position {query} and the key vector k of position "
        f"{key}{rope}, {cfg.d_head} dimensions each.{shared} The score is their dot product, the sum of the "
        f"{cfg.d_head} products q_i × k_i, scaled by 1/√{cfg.d_head}; the softmax over the query's whole row "
        "turns scores into the attention weights."
    )
    if not v.visible:
        st.info(f"Key {key} comes after query {query}: the causal mask sets its score to −∞, so its weight is 0.")
    _score_steps(v)
    shown = min(SHOWN_DIMS, cfg.d_head)
    charts.show(
        encoder_figs.neuron_figure(
            v,
            shown,
            f"q × k, dimension by dimension: the {shown} largest terms of "
            f"{cfg.d_head} (blue adds to the score, red subtracts)",
        ),
        key="attn.neuron",
    )
    charts.show(
        encoder_figs.softmax_row_figure(
            v, run.labels, f"Query {query}'s row: softmax of every key's score (key {key} outlined)"
        ),
        key="attn.neuron_row",
    )


def _score_steps(v) -> None:
    """The score made step by step: dot product, scaling, score, softmax weight."""
    m = st.columns(4)
    m[0].metric("Σ q_i × k_i (dot product)", f"{v.dot:.4f}")
    m[1].metric("× 1/√d_head", f"{v.scale:.4f}")
    m[2].metric("= score", f"{v.score:.4f}" if v.visible else "−∞ (masked)")
    m[3].metric("softmax weight", f"{v.weight:.4f}")


def pair_choice(run) -> tuple[range, range] | None:
    """For a sentence pair, which block of the pattern the head view draws; None: the usual view."""
    pair = pair_ranges(run.lm.config, run.ids)
    if pair is None:
        return None
    st.session_state.setdefault("attn.pair", "ab")
    view = st.radio(
        "Sentence pair", list(PAIR_VIEWS), format_func=PAIR_VIEWS.get, horizontal=True, **links.keep("attn.pair")
    )
    if view == "all":
        return None
    a, b = pair
    return {"ab": (a, b), "ba": (b, a), "aa": (a, a), "bb": (b, b)}[view]


def pair_head_view(run, layer: int, heads: list[int], queries: range, keys: range) -> None:
    """The pattern's block from one sentence's tokens (left) to the other's (right)."""
    rows = run.pattern_rows(layer, queries.start, queries.stop - 1)  # (H, q, stop) keys 0..q.stop-1
    if keys.stop > rows.shape[-1]:
        rows = run.pattern_rows(layer, queries.start, keys.stop - 1)[:, : len(queries)]
    cells = rows[:, :, keys.start : keys.stop].numpy()
    labels = run.labels
    charts.show(
        encoder_figs.pair_head_view(
            cells,
            sorted(heads),
            [labels[i] for i in queries],
            [labels[i] for i in keys],
            f"Layer {layer}: sentence tokens {queries.start}–{queries.stop - 1} looking at "
            f"{keys.start}–{keys.stop - 1}",
        ),
        key="attn.pair_view",
    )
