"""Shapes & parameters: every tensor of a forward pass, where the parameters are, KV-cache memory."""

import pandas as pd
import streamlit as st

from tfm.viz import shapes as shape_figs
from ui import charts, links, shape_parts, sidebar
from ui.run import PromptRun, current_run
from ui.shape_parts import DTYPES
from ui.text import message
from ui.views.shapes import ShapesView

KEYS = (
    "shapes.batch",
    "shapes.length",
    "shapes.kv_ctx",
    "shapes.kv_dtype",
    "shapes.kv_batch",
    "shapes.kv_layers",
    "shapes.kv_heads",
)


def _mb(n: int) -> str:
    return f"{n / 2**20:,.2f} MiB"


def _start(run: PromptRun) -> None:
    """A new prompt's length, another model's own sizes, defaults: before the widgets read them."""
    ss, cfg = st.session_state, run.lm.config
    if ss.get("shapes.prompt_len") != len(run.ids):  # a new prompt: follow its length
        ss["shapes.prompt_len"] = len(run.ids)
        ss["shapes.length"] = len(run.ids)
    links.put("shapes.length", min(max(1, int(ss["shapes.length"])), cfg.context_length))
    ss.setdefault("shapes.batch", 1)
    if ss.get("shapes.kv_model") != run.spec:  # another model: start from its own sizes
        ss["shapes.kv_model"] = run.spec
        for key in ("shapes.kv_ctx", "shapes.kv_layers", "shapes.kv_heads"):
            ss.pop(key, None)
    ss.setdefault("shapes.kv_ctx", cfg.context_length)
    links.put("shapes.kv_ctx", min(int(ss["shapes.kv_ctx"]), max(cfg.context_length, 32_768)))
    for key, default in (
        ("shapes.kv_dtype", "float32"),
        ("shapes.kv_batch", 1),
        ("shapes.kv_layers", cfg.n_layer),
        ("shapes.kv_heads", cfg.n_kv_head),
    ):
        ss.setdefault(key, default)


def settings(run: PromptRun, part1, part3) -> ShapesView:
    """The view from part 1's widgets (in `part1`) and part 3's (in `part3`)."""
    cfg = run.lm.config
    links.restore(*KEYS)
    _start(run)
    c1, c2 = part1.columns(2)
    batch = c1.number_input(
        "Batch size",
        1,
        64,
        **links.keep("shapes.batch"),
        help="How many sequences run side by side (here: copies of your prompt).",
    )
    length = (
        c2.slider(
            "Sequence length (tokens)",
            1,
            cfg.context_length,
            **links.keep("shapes.length", cfg.context_length),
            help="Your prompt cut to this length, or repeated from its start if it is shorter.",
        )
        if cfg.context_length > 1
        else 1
    )
    c = part3.columns(5)
    ctx = c[0].number_input("Context (tokens)", 1, max(cfg.context_length, 32_768), **links.keep("shapes.kv_ctx"))
    layers = c[1].number_input("Layers", 1, 512, **links.keep("shapes.kv_layers"))
    heads = c[2].number_input(
        "KV heads",
        1,
        256,
        **links.keep("shapes.kv_heads"),
        help="Key/value heads: the query heads when there is no grouped-query attention.",
    )
    kv_batch = c[3].number_input("Batch", 1, 256, **links.keep("shapes.kv_batch"))
    dtype = c[4].selectbox("Precision", list(DTYPES), **links.keep("shapes.kv_dtype"))
    return ShapesView(int(batch), int(length), int(ctx), int(layers), int(heads), int(kv_batch), dtype)


def tensors(run: PromptRun, view: ShapesView) -> None:
    """Part 1: every tensor of a forward, as a flow and as a table."""
    cfg, batch, length = run.lm.config, view.batch, view.length
    shapes = shape_parts.shape_trace(run, batch, length)
    if (batch, length) == (1, len(run.ids)):
        st.caption(f"From the traced run of your prompt: batch 1 × {length} tokens.")
    else:
        st.caption(
            f"A traced forward of batch {batch} × {length} tokens, run on PyTorch's *meta* device: the same "
            "code computes every shape but no numbers, so even large shapes are instant."
        )
    flow_tab, table_tab = st.tabs(["The flow", "The table"])
    with flow_tab:
        st.caption(
            "Top to bottom in execution order. Each box is one stage; each row a tensor with its axis names "
            "and sizes. Blue: block 0 in full; the other blocks repeat it. Dashed arrows: the residual "
            "connection carries the stream around a sublayer and adds its output back."
        )
        st.graphviz_chart(shape_figs.shape_flow_dot(shapes, cfg.n_layer))
    if cfg.parallel_block:
        st.caption(
            "This model's blocks are parallel (GPT-NeoX): ln2 reads the block's input (resid_pre), not "
            "resid_mid, and the block adds attn_out and mlp_out to it together."
        )
    with table_tab:
        st.dataframe(
            shape_figs.shape_table(shapes), hide_index=True, height=min(800, 38 + 35 * len(shapes)), key="shapes.table"
        )
        st.caption(
            "Axes: batch, pos (token position), head, d_head, d_model, d_ff (MLP width), vocab. "
            "'reshape only' rows are views the engine lists but does not store (e.g. the fused qkv)."
        )


def parameters(run: PromptRun) -> None:
    """Part 2: parameters by component, counted and by formula."""
    model, cfg = run.lm.model, run.lm.config
    st.markdown(
        f"This model has **{model.num_params():,} parameters**. "
        f"d = d_model = {cfg.d_model}, d_ff = {cfg.d_ff}, V = vocabulary = {cfg.vocab_size:,}, "
        f"T = context = {cfg.context_length}, L = layers = {cfg.n_layer}; "
        f"{'with' if cfg.bias else 'no'} biases, {cfg.activation}, {cfg.norm}, "
        f"{'tied' if cfg.tied_embeddings else 'separate'} unembedding."
    )
    left, right = st.columns([3, 2])
    left.dataframe(
        pd.DataFrame(shape_parts.param_records(run)),
        hide_index=True,
        key="shapes.params",
        column_config={c: st.column_config.NumberColumn(format="localized") for c in ("by formula", "counted")},
    )
    left.caption(
        "'Counted' adds up the sizes of the model's real parameter tensors (tfm.analysis.param_counts; a "
        "tied matrix counts once). Attention: W_qkv is d × (d + 2·kv) and W_O is d × d, with kv = KV heads · "
        f"d_head = {cfg.n_kv_head}·{cfg.d_head}"
        + (
            " = d, so 4·d² (+ 4·d biases)."
            if cfg.n_kv_head == cfg.n_head
            else ": grouped-query attention shares keys and values."
        )
    )
    charts.show(
        shape_figs.param_bars(shape_parts.param_counts(run), "Parameters by component"),
        key="shapes.param_bars",
        where=right,
    )


def kv_intro(run: PromptRun, where) -> None:
    """Part 3's words before its widgets."""
    model, cfg, counts = run.lm.model, run.lm.config, shape_parts.param_counts(run)
    emb = counts["embeddings"] / model.num_params()
    if emb > 0.5:
        where.caption(
            f"The embedding holds {emb:.0%} of this model's parameters: a {cfg.vocab_size:,}-token "
            f"vocabulary × d = {cfg.d_model} is {counts['embeddings']:,} numbers, more than all its blocks "
            "together."
        )
    where.markdown(
        "When generating, each layer keeps the keys and values of every earlier token so it does not "
        "recompute them: 2 (K and V) · layers · KV heads · d_head · context · batch · bytes per number."
    )
    if cfg.n_kv_head != cfg.n_head:
        where.caption(
            f"This model uses grouped-query attention: {cfg.n_head} query heads share {cfg.n_kv_head} "
            f"key/value heads ({cfg.group_size} query heads each), so its cache is {cfg.group_size}× "
            "smaller than with one K and V per query head."
        )


def kv_cache(run: PromptRun, view: ShapesView) -> None:
    """Part 3: the KV cache of the chosen shape, by formula and as allocated."""
    model, cfg = run.lm.model, run.lm.config
    ctx, layers, heads, kv_batch, dtype = view.kv_ctx, view.kv_layers, view.kv_heads, view.kv_batch, view.kv_dtype
    try:
        what_if = shape_parts.kv_what_if(run, ctx, layers, heads, dtype, kv_batch)
    except ValueError as e:
        st.warning(f"That combination is not a valid model: {message(e)}")
        return
    kv, win = what_if.size, what_if.window_bytes
    m = st.columns(3)
    m[0].metric("By the formula", _mb(kv.formula), help=f"{kv.formula:,} bytes")
    m[1].metric("tfm.core.kv_cache.KVCache(…).nbytes()", _mb(kv.nbytes), help=f"{kv.nbytes:,} bytes")
    m[2].metric("Match", "✓" if kv.formula == kv.nbytes else "✗")
    if win is not None:
        st.caption(
            f"With sliding windows: {len(cfg.local_layers)} local layers need only their last "
            f"{cfg.sliding_window} keys, so a cache that keeps just the window holds 2 · {heads} · {cfg.d_head} · "
            f"({cfg.n_layer - len(cfg.local_layers)} · {ctx} + {len(cfg.local_layers)} · "
            f"{min(cfg.sliding_window, int(ctx))}) · {kv_batch} · {kv.bytes_per_value} = {_mb(win)} "
            f"({win / kv.formula:.0%} of the above; tfm's KVCache keeps every position and masks instead)."
        )
    st.caption(
        f"2 · {layers} · {heads} · {cfg.d_head} (d_head of this model) · {ctx} · {kv_batch} · "
        f"{kv.bytes_per_value} bytes = {kv.formula:,} bytes. The KVCache holds K and V tensors of "
        f"shape {' × '.join(map(str, kv.shape))} (layers × batch × KV heads × context × d_head), "
        "allocated on the meta device here so nothing is used. For comparison, this model's weights take "
        f"{_mb(model.num_params() * kv.bytes_per_value)} in {dtype}."
    )


def main() -> None:
    sidebar.render()
    st.title("Shapes & parameters")
    st.markdown(
        "Which tensors a forward pass makes, with which shapes, where the parameters live, and how much "
        "memory a KV cache needs. Every shape below is recorded by the engine while it runs."
    )
    run = current_run()
    part1, body1, part2, part3 = st.container(), st.container(), st.container(), st.container()
    part1.header("1. The shape of every tensor")
    part3.header("3. KV-cache memory")
    kv_intro(run, part3)
    view = settings(run, part1, part3)
    with body1:
        tensors(run, view)
    with part2:
        st.header("2. Where the parameters are")
        parameters(run)
    kv_cache(run, view)


main()
