"""Attention: which earlier tokens each token looks at, for every head of every layer."""

import numpy as np
import streamlit as st

from tfm.viz import attention as attention_figs
from tfm.viz.attention import WINDOW
from ui import charts, encoder_panels, examples, links, sidebar, tables
from ui.run import PromptRun, current_run
from ui.text import head_label
from ui.views.attention import AttentionView

MODES = {"head": "One head", "mean": "Mean over heads", "max": "Max over heads", "rollout": "Rollout"}
VIEWS = ["Pattern", "All heads", "Head view", "Head table", "Neuron view"]
KEYS = (
    "attn.layer",
    "attn.head",
    "attn.mode",
    "attn.hide_first",
    "attn.log",
    "attn.window",
    "attn.hv_heads",
    "attn.hv_token",
    "attn.nv_query",
    "attn.nv_key",
    "attn.pair",
)  # kept across page switches


def _set(**values) -> None:
    """Set widget values from a callback, and their page-switch copies."""
    for name, value in values.items():
        st.session_state[f"attn.{name}"] = st.session_state[f"keep.attn.{name}"] = value


def _open_head(layer: int, head: int) -> None:
    _set(layer=layer, head=head, mode="head")
    st.session_state["attn.view"] = VIEWS[0]


def _open_from_picker() -> None:
    if (pick := st.session_state.get("attn.open")) is not None:
        _open_head(*pick)
        st.session_state["attn.open"] = None  # so picking the same head again works


def _open_from_table(n_head: int) -> None:
    rows = st.session_state["attn.table"].selection.rows
    if rows:
        _open_head(rows[0] // n_head, rows[0] % n_head)


def _picker(label: str, key: str, n: int, disabled: bool = False) -> int:
    """A 0..n-1 slider (clamped first: links and other models may hold any number);
    select_slider because st.slider refuses min == max (one layer or one head)."""
    links.clamp_int(key, 0, n - 1, 0, label)
    return st.select_slider(label, list(range(n)), disabled=disabled, **links.keep(key))


def _window(n_tok: int, lo: int) -> tuple[int, int]:
    """Positions a..b to draw: everything when short, else a range slider (default: the end)."""
    if n_tok - lo <= WINDOW:
        return lo, n_tok - 1
    a, b = st.session_state.get("attn.window", (0, -1))
    if not lo <= a <= b < n_tok:
        st.session_state["attn.window"] = (n_tok - WINDOW, n_tok - 1)
    a, b = st.slider("Positions shown (query and key)", lo, n_tok - 1, **links.keep("attn.window", lo, n_tok))
    if b - a + 1 > WINDOW:
        st.caption(f"At most {WINDOW} positions at once: showing {b - WINDOW + 1}–{b}.")
        a = b - WINDOW + 1
    return a, b


def _notes(run: PromptRun, layer: int, head: int) -> None:
    """Which key/value head a query head shares (grouped-query) and whether the layer is local."""
    cfg = run.lm.config
    if cfg.group_size > 1:
        st.caption(
            f"{'Multi' if cfg.n_kv_head == 1 else 'Grouped'}-query attention: the {cfg.n_head} query heads "
            f"share {cfg.n_kv_head} key/value head{'s' if cfg.n_kv_head > 1 else ''}; query "
            f"head {head} compares against {cfg.kv_sharing(head)}. Each query head still has its own "
            "pattern."
        )
    if note := run.layer_note(layer):  # local (sliding-window) or global
        st.caption(note)


def settings(run: PromptRun) -> AttentionView:
    """The view from the link and the widgets (the head, how it is shown, the window), saying
    what the chosen layer and head share; the head goes into the link."""
    n_layer, n_head, n_tok = run.trace.n_layers(), run.lm.config.n_head, len(run.ids)
    links.restore(*KEYS)
    links.url_init("attn.layer", "layer", int)
    links.url_init("attn.head", "head", int)
    opening = run.opening_head() or (0, 0)  # a large model's induction head, else L0 H0 (and what a bare link shows)
    st.session_state.setdefault("attn.layer", opening[0])
    st.session_state.setdefault("attn.head", opening[1])
    st.session_state.setdefault("attn.mode", "head")
    c1, c2, c3 = st.columns([2, 2, 4])
    with c3:
        mode = st.radio("Show", list(MODES), format_func=MODES.get, horizontal=True, **links.keep("attn.mode"))
    with c1:
        layer = _picker("Layer", "attn.layer", n_layer)
    with c2:
        head = _picker("Head", "attn.head", n_head, disabled=mode != "head")
    links.url_set(layer=layer, head=head, defaults=dict(layer=opening[0], head=opening[1]))
    _notes(run, layer, head)
    o1, o2, o3 = st.columns([3, 2, 3])
    hide_first = (
        o1.checkbox(
            "Hide first token (renormalise)",
            disabled=n_tok < 2,
            **links.keep("attn.hide_first"),
            help="Many heads park attention on token 0 (an attention sink); hiding it and "
            "rescaling each row to sum to 1 shows where the rest goes.",
        )
        and n_tok >= 2
    )
    log = o2.checkbox("Log colour scale", **links.keep("attn.log"), help="Makes small weights visible.")
    with o3:
        a, b = _window(n_tok, int(hide_first))
    return AttentionView(layer, head, mode, hide_first, log, a, b)


def shown(run: PromptRun, view: AttentionView):
    """(the whole rollout matrix or None, the chart's title, the window drawn)."""
    causal = run.lm.config.causal
    if view.mode == "rollout":
        full, title = run.rollout()[view.layer], f"Attention rollout through layers 0–{view.layer}"
        return full, title, attention_figs.window(full, view.a, view.b, view.hide_first, causal)
    title = (
        f"Layer {view.layer}, head {view.head}"
        if view.mode == "head"
        else f"Layer {view.layer}, {MODES[view.mode].lower()}"
    )
    rows = attention_figs.reduce_heads(run.pattern_rows(view.layer, view.a, view.b), view.mode, view.head)
    return (
        None,
        title,
        attention_figs.window_rows(
            rows, view.a, view.b, view.hide_first, sliding=run.layer_window(view.layer), causal=causal
        ),
    )


def extra(view: AttentionView) -> str:
    return (", first token hidden and rows renormalised" if view.hide_first else "") + (
        ", log colour" if view.log else ""
    )


def pattern_tab(run: PromptRun, view: AttentionView, labels: list[str], title: str, matrix) -> None:
    if view.mode == "rollout":
        st.caption(
            "Rollout follows attention through the layers: each layer's heads are averaged, the "
            "residual connection is added as 0.5 × identity, rows renormalised, layers multiplied."
        )
    zmax = 1.0
    if view.a > int(view.hide_first):  # earlier keys exist outside the window: scale colours to what is shown
        zmax, inside = attention_figs.window_scale(matrix)
        st.caption(
            f"On average {inside:.0%} of each row's attention falls on the keys shown; the rest goes "
            f"to positions before {view.a}. The colour scale runs from 0 to the largest weight shown, "
            f"{zmax:.3g} (hover for exact values)."
        )
    charts.show(
        attention_figs.heatmap(matrix, labels, f"{title}: query × key{extra(view)}", view.log, zmax=zmax),
        key="attn.chart",
    )
    if (reach := run.layer_window(view.layer)) and view.mode != "rollout" and view.b + 1 > reach:  # a local layer
        row = attention_figs.reduce_heads(run.pattern_rows(view.layer, view.b, view.b), view.mode, view.head)[0]
        charts.show(
            attention_figs.window_reach(row.numpy(), reach, f"{title}: what query {view.b} reads, every key"),
            key="attn.reach",
        )


def all_heads_tab(run: PromptRun, view: AttentionView, labels: list[str]) -> None:
    n_layer, n_head = run.trace.n_layers(), run.lm.config.n_head
    st.selectbox(
        "Open a head in the Pattern tab",
        [(l, h) for l in range(n_layer) for h in range(n_head)],
        index=None,
        format_func=lambda p: head_label(*p),
        key="attn.open",
        on_change=_open_from_picker,
    )
    charts.show(
        attention_figs.model_view(
            run.all_heads(view.a, view.b, view.hide_first),
            labels,
            f"Every head: rows are layers, columns heads{extra(view)}",
            view.log,
        ),
        key="attn.model_view",
    )


def head_view_tab(run: PromptRun, view: AttentionView, labels: list[str]) -> None:
    n_head, a, b = run.lm.config.n_head, view.a, view.b
    st.session_state.setdefault("attn.hv_heads", [view.head])
    st.session_state["attn.hv_heads"] = [h for h in st.session_state["attn.hv_heads"] if h < n_head]
    if st.session_state.get("attn.hv_token") not in range(a, b + 1):
        st.session_state["attn.hv_token"] = None
    h1, h2 = st.columns(2)
    heads = h1.multiselect(
        f"Heads of layer {view.layer} (one colour each)",
        list(range(n_head)),
        format_func=lambda h: f"head {h}",
        **links.keep("attn.hv_heads"),
    )
    tok = h2.selectbox(
        "Only lines from token",
        list(range(a, b + 1)),
        format_func=lambda i: run.labels[i],
        index=None,
        placeholder="all tokens",
        **links.keep("attn.hv_token"),
    )
    if (pair := encoder_panels.pair_choice(run)) is not None:  # a sentence pair: A against B, as BertViz
        encoder_panels.pair_head_view(run, view.layer, heads, *pair)
    else:
        cells = attention_figs.window_rows(
            run.pattern_rows(view.layer, a, b), a, b, view.hide_first, causal=run.lm.config.causal
        )
        charts.show(
            attention_figs.head_view(
                cells,
                sorted(heads),
                labels,
                f"Layer {view.layer}: who looks at whom{extra(view)}",
                None if tok is None else tok - a,
            ),
            key="attn.head_view",
        )


def table_tab(run: PromptRun) -> None:
    heads = run.head_table()
    if heads.probe is None:
        st.info("The model's context is too short for the repeated-random-tokens probe.")
    else:
        st.caption(
            f"Click a column header to sort; select a row to open that head. The repeat scores come "
            f"from {heads.probe.seq_len} random tokens followed by the same {heads.probe.seq_len} again."
        )
    table = attention_figs.head_table(heads)
    st.dataframe(
        table,
        key="attn.table",
        on_select=lambda: _open_from_table(run.lm.config.n_head),
        selection_mode="single-row",
        hide_index=True,
        height=min(640, 38 + 35 * len(table)),
        column_config=tables.head_columns(table),
    )
    st.markdown("\n".join(f"- **{k.replace('_', ' ')}**: {v}" for k, v in heads.help().items()))


def download(run: PromptRun, view: AttentionView, prompt: str, full) -> None:
    """The numbers of the current view over all positions, and every head's window."""
    layer, head, mode, hide_first, n_tok = view.layer, view.head, view.mode, view.hide_first, len(run.ids)
    settings_ = {
        "prompt": prompt,
        "model": run.spec,
        "layer": layer,
        "head": head,
        "mode": mode,
        "hide_first": hide_first,
        "log_colour": view.log,
        "window": [view.a, view.b],
        "dropped": run.dropped,
    }
    st.download_button(
        "Download the numbers (.npz)",
        key="attn.download",
        file_name=f"attention_L{layer}_H{head}.npz",
        mime="application/octet-stream",
        on_click="ignore",
        data=lambda: attention_figs.export_npz(
            attention_figs.window(
                full if full is not None else attention_figs.reduce_heads(run.trace.pattern(layer), mode, head),
                int(hide_first),
                n_tok - 1,
                hide_first,
                run.lm.config.causal,
            ),
            np.arange(int(hide_first), n_tok),
            run.all_heads(view.a, view.b, False, show_progress=False),
            np.arange(view.a, view.b + 1),
            run.ids,
            run.lm.tokenizer.display_pieces(run.ids),
            settings_,
        ),
        help="shown: the matrix of the current view over all positions (NaN = masked); window_patterns: every "
        "head's raw weights (layer, head, query, key) over the positions shown (window_positions); ids, "
        "pieces, and settings_json (prompt and settings).",
    )


def main() -> None:
    bar = sidebar.render()
    st.title("Attention")
    run = current_run()
    examples.offer("attention", run)
    st.caption(
        "Each row is a token (the **query**) and shows how it shares its attention over the tokens "
        + (
            "up to and including itself (the **keys**); every row sums to 1. Grey cells are masked: a token "
            "cannot look ahead."
            if run.lm.config.causal
            else "(the **keys**): every token sees every token, before and after it (an encoder); every row sums to 1."
        )
        + " Hover a cell for the exact weight."
    )
    view = settings(run)
    labels = run.labels[view.a : view.b + 1]
    full, title, matrix = shown(run, view)
    st.session_state.setdefault("attn.view", VIEWS[0])
    tabs = st.tabs(VIEWS, key="attn.view", on_change="rerun")  # only the open tab's content is computed
    panels = (
        lambda: pattern_tab(run, view, labels, title, matrix),
        lambda: all_heads_tab(run, view, labels),
        lambda: head_view_tab(run, view, labels),
        lambda: table_tab(run),
        lambda: encoder_panels.neuron(run, view.layer, view.head),
    )
    for tab, panel in zip(tabs, panels):
        with tab:
            if tab.open:
                panel()
    download(run, view, bar.prompt, full)
    links.remember(*KEYS)


main()
