"""Panels of the "Why this token?" page: interventions, neurons, contribution graph, features (the
patching panel: ui/patch_panel.py).

Each panel reads the engine's numbers from the page's typed run (`ui.run.PromptRun`: computed
once per process for the same model, prompt and settings) and draws them with `tfm.viz.why`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from tfm.analysis import attribution
from tfm.analysis.dictionaries.features import top_parts
from tfm.core.escape import escape_markdown
from tfm.viz import why as why_figs
from ui import charts
from ui.text import head_label, message

GRAPH_WINDOW = 24  # positions drawn in the contribution graph


def same_tokens(run, pos: int, token: int | None, versus: int | None) -> bool:
    """True, with the info the Attribution graph page gives for the same case, when the explained
    token (the top prediction at `pos` where the box is empty) is the versus token."""
    if versus is None:
        return False
    top = token if token is not None else int(run.trace.logits_at(pos)[: attribution.n_words(run.lm)].argmax())
    if top != versus:
        return False
    st.info(
        "Type two different tokens: a token's logit minus its own is always 0"
        + (
            " (with the first box empty the top prediction is explained, and the versus token is it)."
            if token is None
            else "."
        )
    )
    return True


def compare(run, pos: int, token: int, heads=(), mlps=(), neurons=(), mode="zero", key="why.cmp") -> dict:
    """Before/after next-token distributions side by side; returns the numbers shown."""
    before = run.ablated_probs(pos)
    after = run.ablated_probs(pos, heads, mlps, neurons, mode)
    words = attribution.n_words(run.lm)  # padded rows are no token: never listed
    ids = list(
        dict.fromkeys(before[:words].topk(8).indices.tolist() + after[:words].topk(8).indices.tolist() + [token])
    )
    pieces = [run.lm.tokenizer.display_piece(i) for i in ids]
    c1, c2 = st.columns(2)
    c1.metric(f"p({escape_markdown(pieces[ids.index(token)])}) before", f"{float(before[token]):.4f}")
    c2.metric("after", f"{float(after[token]):.4f}", f"{float(after[token] - before[token]):+.4f}")
    charts.show(
        why_figs.dist_compare(
            pieces,
            before[ids].numpy(),
            after[ids].numpy(),
            f"Next-token probabilities at position {pos}, before and after",
        ),
        key=key,
    )
    return {"tokens": pieces, "ids": ids, "before": before[ids].tolist(), "after": after[ids].tolist()}


def ablate_panel(run, pos: int, token: int, n_layer: int, n_head: int) -> dict:
    st.caption(
        "Switch parts off for one forward pass (the shared model is never changed) and compare the "
        "next-token distribution. Zero: the part writes nothing; mean: it writes its average over "
        "this prompt's positions."
    )
    names = [head_label(l, h) for l in range(n_layer) for h in range(n_head)]
    c1, c2, c3 = st.columns([4, 2, 1])
    heads = c1.multiselect("Heads to ablate", names, key="why.abl_heads")
    mlps = c2.multiselect("MLPs to ablate", list(range(n_layer)), format_func=lambda l: f"L{l} MLP", key="why.abl_mlps")
    mode = c3.radio("Ablation", ["zero", "mean"], key="why.abl_mode")
    if not heads and not mlps:
        st.info("Pick heads or MLPs above (try the largest cells of the heatmap).")
        return {}
    if len(heads) == len(names):
        st.warning("Every head is ablated: the model is left with embeddings and MLPs only.")
    pairs = tuple(divmod(names.index(h), n_head) for h in heads)
    return {
        "ablated_heads": heads,
        "ablated_mlps": mlps,
        "mode": mode,
        **compare(run, pos, token, pairs, tuple(mlps), (), mode, "why.abl_chart"),
    }


def neuron_panel(run, attr, pos: int, token: int) -> dict:
    tok = run.lm.tokenizer
    top = run.top_neurons(pos, token, attr.versus)
    pieces = lambda ids: " ".join(repr(tok.display_piece(i)) for i in ids[:5])  # noqa: E731
    rows = [
        {
            "neuron": f"L{n.layer} N{n.index}",
            "activation": n.activation,
            "contribution": n.value,
            "promotes": pieces(n.promotes),
            "suppresses": pieces(n.suppresses),
        }
        for n in top
    ]
    st.caption(
        "MLP neurons with the largest direct contribution: activation × the neuron's output direction "
        "× the token's unembedding direction (through the final norm). *Promotes / suppresses*: the "
        "vocabulary tokens the neuron's output direction raises or lowers most."
    )
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        key="why.neuron_table",
        height=38 + 35 * len(rows),
        column_config={
            "contribution": st.column_config.NumberColumn(format="%.4f"),
            "activation": st.column_config.NumberColumn(format="%.4f"),
        },
    )
    off = st.multiselect("Turn neurons off", [r["neuron"] for r in rows], key="why.neurons_off")
    chosen = tuple((n.layer, n.index) for n in top if f"L{n.layer} N{n.index}" in off)
    shown = compare(run, pos, token, neurons=chosen, key="why.neuron_chart") if chosen else {}
    return {"top_neurons": rows, "neurons_off": off, **shown}


def graph_panel(run, pos: int) -> None:
    start = max(0, pos + 1 - GRAPH_WINDOW)
    flow = run.flow(start, pos + 1)
    thr = st.slider("Show edges of at least this fraction of the largest", 0.0, 1.0, 0.2, 0.05, key="why.threshold")
    st.caption(
        "Edges: how much each layer's heads moved from a source position to a later one "
        "(attention weight × size of the head's value through W_O, summed over heads)."
    )
    charts.show(
        why_figs.flow_graph(
            flow.numpy(), run.labels[start : pos + 1], thr, f"Contribution graph, positions {start}–{pos}"
        ),
        key="why.graph",
    )


def induction_text(run) -> None:
    probe = run.probe_settings()  # the probe Home's "two heads" and the head table use
    if run.lm.config.n_head < 2 or probe is None or probe.seq_len < 4:
        return
    c = run.induction_check(probe)
    st.markdown(
        f"**Does ablation find real mechanisms?** On {probe.seq_len} random tokens written twice, the engine's "
        f"strongest induction head is **{head_label(c.layer, c.head)}** (score {c.score:.2f}). Loss on the repeated half: "
        f"**{c.loss_clean:.3f}** as is, **{c.loss_ablated:.3f}** with that head zero-ablated, "
        f"**{c.loss_control:.3f}** with head H{c.control} of the same layer ablated instead (a control)."
    )


def export(numbers: dict) -> None:
    st.download_button(
        "Download the numbers (.json)",
        why_figs.export_json(numbers),
        file_name="why_this_token.json",
        mime="application/json",
        key="why.download",
        on_click="ignore",
    )


def as_np(t) -> np.ndarray:
    return t.detach().cpu().numpy()


def feature_panel(run, attr, pos: int) -> dict:
    """At the SAE's layer: each active feature's direct share of the explained logit, with the
    SAE's error, its bias, the later blocks and the final norm's bias as their own bars."""
    try:
        fs = run.sae()
    except ValueError as e:  # no SAE ships for this model
        st.info(message(e))
        return {}
    feature_attr = run.feature_attribution(pos, attr.token, attr.versus)
    names, values, layer = *feature_attr.parts(), feature_attr.layer
    names[: len(feature_attr.features)] = [fs.named(int(f)) for f in feature_attr.features]  # with labels
    st.caption(
        f"The stream entering block {layer} is what the SAE rewrites as features. Each feature's bar is its "
        "activation × its decoder direction, read through the final norm frozen as above; what the SAE "
        "misses (error), its bias, and everything blocks after it wrote are bars too, so all bars add up to "
        f"{attr.target:.4f} (sum {float(values.sum()):.4f}). Open a feature on the Features page."
    )
    shown = top_parts(names, values, 16)  # the 16 largest features and always the 4 other terms
    charts.show(
        why_figs.contrib_bars(
            [names[i] for i in shown],
            as_np(values[shown]),
            f"Features at layer {layer} and the rest, toward the token",
            top=len(shown),
        ),
        key="why.features",
    )
    return {"features": {"names": names, "values": values.tolist()}}
