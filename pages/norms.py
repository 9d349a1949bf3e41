"""LayerNorm & the residual stream: what the norms do, how the stream grows, and why placement matters."""

import pandas as pd
import streamlit as st

from tfm.viz import norms as norm_figs
from ui import charts, links, sidebar
from ui.run import PromptRun, current_run
from ui.text import message
from ui.views.norms import NormsView

DEPTH_TOKENS = 128
AUTO_PARAMS = 20_000_000  # larger fresh models start on a button press: each takes seconds to build and run
KEYS = (
    "norms.stat_norm",
    "norms.which",
    "norms.layer",
    "norms.token",
    "norms.cmp_placement",
    "norms.cmp_norm",
    "norms.cmp_layers",
)
HEADERS = (
    "1. What each norm receives and returns",
    "2. The residual stream grows",
    "3. One norm, step by step",
    "4. Pre-norm vs post-norm, LayerNorm vs RMSNorm, across depth",
)


def settings(run: PromptRun, parts: list) -> NormsView:
    """The page's view from its widgets, each drawn in its part's controls (`parts[i]`)."""
    cfg, L, T = run.lm.config, run.lm.config.n_layer, len(run.ids)
    links.restore(*KEYS)
    stat_norm = parts[0].radio(
        "Norm",
        ["ln1", "ln2"],
        horizontal=True,
        **links.keep("norms.stat_norm"),
        help="ln1 feeds attention, ln2 feeds the MLP (post-norm: they follow them).",
    )
    options = list(run.norm_choices())
    if st.session_state.get("norms.which") not in options:
        st.session_state["norms.which"] = "ln1"
    links.put("norms.layer", min(max(0, int(st.session_state.get("norms.layer", 0))), L - 1))
    links.put("norms.token", min(max(0, int(st.session_state.get("norms.token", T - 1))), T - 1))
    c1, c2, c3 = parts[2].columns(3)
    which = c1.selectbox("Which norm", options, **links.keep("norms.which"))
    layer = c2.slider("Layer", 0, max(1, L - 1), **links.keep("norms.layer", L), disabled=which == "ln_final" or L == 1)
    token = c3.selectbox("Token", list(range(T)), format_func=lambda i: run.labels[i], **links.keep("norms.token"))
    st.session_state.setdefault("norms.cmp_placement", "both")
    st.session_state.setdefault("norms.cmp_norm", cfg.norm)
    st.session_state.setdefault("norms.cmp_layers", min(48, max(12, L)))
    c1, c2, c3 = parts[3].columns(3)
    placement = c1.radio(
        "Norm placement", ["both", "pre", "post"], horizontal=True, **links.keep("norms.cmp_placement")
    )
    norm_kind = c2.radio("Norm type", ["layernorm", "rmsnorm"], horizontal=True, **links.keep("norms.cmp_norm"))
    n_layer = c3.slider("Layers", 2, 48, **links.keep("norms.cmp_layers"))
    return NormsView(stat_norm, which, layer, token, placement, norm_kind, n_layer)


def statistics(run: PromptRun, view: NormsView) -> None:
    """Part 1: the chosen norm's input statistics on the left, its output's on the right."""
    cfg, summaries = run.lm.config, run.layer_summaries()
    blocks = [f"block {i}" for i in range(cfg.n_layer)]
    left, right = st.columns(2)
    for panel in summaries.panels(view.stat_norm, cfg.norm):
        charts.show(
            norm_figs.layer_token_heatmap(
                panel.values, run.labels, blocks, f"{panel.name}: {panel.stat} of the {panel.side}", panel.stat
            ),
            key=f"norms.{panel.name}",
            where=left if panel.side == "input" else right,
        )
    st.caption(
        f"Left: the statistics of the vectors going **into** {view.stat_norm} differ a lot between tokens "
        f"and layers. Right: coming **out** ({cfg.norm}) every token has about the same size: "
        f"{norm_figs.output_caption(cfg)}. Hover for exact values."
    )


def block_notes(cfg) -> None:
    """What is unusual about this model's blocks (four norms, or parallel sublayers)."""
    if cfg.post_norms:
        st.info(
            "This model has **four norms a block** (Gemma): ln1 before attention and ln1_post on its output, "
            "ln2 before the MLP and ln2_post on its output: x + ln1_post(attn(ln1(x))), then the same for the "
            "MLP. What each sublayer adds is normalised before it joins the stream; pick any of the four in part 3."
        )
    if cfg.parallel_block:
        st.info(
            "This model's blocks are **parallel** (GPT-NeoX): attention and MLP both read the block's input, "
            "x + attn(ln1(x)) + mlp(ln2(x)). So ln2 normalises the stream *entering* the block, not the stream "
            "after attention, and the 'after attention' stream (resid_mid) is a partial sum no sublayer reads."
        )


def stream(run: PromptRun) -> None:
    """Part 2: the residual stream's norm per token and layer, and what each sublayer adds."""
    cfg, summaries = run.lm.config, run.layer_summaries()
    blocks = [f"block {i}" for i in range(cfg.n_layer)]
    streams = ["embed"] + [f"after block {i}" for i in range(cfg.n_layer)]
    block_notes(cfg)
    left, right = st.columns(2)
    charts.show(
        norm_figs.layer_token_heatmap(
            summaries.resid, run.labels, streams, "Residual-stream L2 norm per token", "L2 norm", height=340
        ),
        key="norms.resid_heat",
        where=left,
    )
    left.caption(
        "Each row is the stream after one more block. In pre-norm models nothing rescales the stream, so "
        "it usually grows with depth; in post-norm models each block ends normalised."
    )
    charts.show(
        norm_figs.growth_lines(summaries.resid, streams, "Residual-stream norm across layers"),
        key="norms.growth",
        where=right,
    )
    right.caption(
        "The mean over tokens and the largest token (often the first one, which many heads use as a resting place)."
    )
    charts.show(
        norm_figs.sublayer_bars(
            summaries.attn_out, summaries.mlp_out, blocks, "What each sublayer adds: norm of attention vs MLP output"
        ),
        key="norms.sublayers",
    )
    st.caption("The bigger the bar, the more that sublayer changes the stream in that layer (mean over tokens).")


def worked_numbers(run: PromptRun, ex) -> str:
    """Part 3's formula and metrics; returns the PyTorch function the steps are checked against."""
    m = st.columns(5)
    if ex.kind == "layernorm":
        st.markdown(
            "y = (x − mean) / √(var + ε) · gain + bias, with mean and var over the token's "
            f"{run.lm.config.d_model} dimensions."
        )
        m[0].metric("mean", f"{ex.mean:.5f}")
        m[1].metric("variance", f"{ex.var:.5f}")
        m[2].metric("√(var + ε)", f"{ex.std:.5f}")
    else:
        st.markdown("RMSNorm: y = x / √(mean(x²) + ε) · gain: no mean subtraction, no bias.")
        m[0].metric("mean(x²)", f"{ex.mean_square:.5f}")
        m[1].metric("rms = √(mean(x²) + ε)", f"{ex.rms:.5f}")
        m[2].metric("ε", f"{ex.eps:g}")
    torch_fn = "F.layer_norm" if ex.kind == "layernorm" else "F.rms_norm"
    m[3].metric(f"max |ours − {torch_fn}|", f"{ex.max_abs_diff:.1e}")
    m[4].metric(
        "max |ours − model|",
        f"{ex.trace_diff:.1e}",
        help="Against the model's own float32 output for this token, recorded in the trace.",
    )
    ok = ex.max_abs_diff <= 1e-6
    (st.success if ok else st.error)(
        f"Step by step (float64) and PyTorch's `{torch_fn}` with this norm's own gain"
        f"{' and bias' if ex.bias is not None else ''} agree to {ex.max_abs_diff:.1e} {'≤' if ok else '>'} 1e-6. "
        "The model itself runs in float32, hence the second, slightly larger difference."
    )
    return torch_fn


def worked(run: PromptRun, view: NormsView) -> None:
    """Part 3: one norm call redone step by step, and its gain and bias beside every norm's."""
    ex = run.worked_norm(view.layer, view.token, view.which)
    where = "ln_final" if view.which == "ln_final" else f"block {view.layer} {view.which}"
    torch_fn = worked_numbers(run, ex)
    steps = {"x": ex.x, "normalised": ex.normalized, "gain": ex.weight}
    if ex.kind == "layernorm":
        steps = {"x": ex.x, "x − mean": ex.x - ex.mean, "normalised": ex.normalized, "gain": ex.weight}
    if ex.bias is not None:
        steps["bias"] = ex.bias
    steps.update({"output": ex.output, torch_fn: ex.reference})
    left, right = st.columns([3, 2])
    left.dataframe(
        pd.DataFrame({k: v.numpy() for k, v in steps.items()}).rename_axis("dim"), height=340, key="norms.worked_table"
    )
    charts.show(
        norm_figs.worked_lines(ex, f"{where}, token {norm_figs.plotly_text(run.labels[view.token])}"),
        key="norms.worked_lines",
        where=right,
    )
    right.caption("The normalised vector has mean 0 and size 1 per dimension; the gain then stretches chosen dims.")
    for param in run.norm_parameters(view.layer, view.which):
        name = {"weight": "Gain", "bias": "Bias"}[param.kind]
        g1, g2 = st.columns(2)
        charts.show(
            norm_figs.param_histogram(param.chosen, f"{name} of {where}", f"{name.lower()} value"),
            key=f"norms.{param.kind}_hist",
            where=g1,
        )
        charts.show(
            norm_figs.param_boxes(
                list(param.every), list(param.labels), f"{name} of every norm (block.norm)", f"{name.lower()} value"
            ),
            key=f"norms.{param.kind}_boxes",
            where=g2,
        )
    st.caption(
        "A fresh model starts with every gain 1 and every bias 0; training moves them. Each box shows one "
        "layer's values: the middle half inside the box, the line at the median."
    )


def depth_results(run: PromptRun, view: NormsView, seed: int) -> dict:
    """Part 4's fresh models (on a button press when large), by their legend label."""
    ids = run.ids[-DEPTH_TOKENS:]  # forward + backward of up to 48 layers: cost grows with layers x tokens
    if len(ids) < len(run.ids):
        st.caption(
            f"The comparison runs on the last {DEPTH_TOKENS} tokens of the prompt: a fresh model's forward "
            f"and backward pass on all {len(run.ids)} would take far longer and change little."
        )
    results, placements = {}, ["pre", "post"] if view.placement == "both" else [view.placement]
    size = run.fresh_parameters(view.n_layer)  # parameters of each fresh model
    waiting = [p for p in placements if not run.depth_norms_ready(p, view.norm_kind, view.n_layer, ids, seed)]
    if (
        waiting
        and size > AUTO_PARAMS
        and not st.button(f"Build and run {len(waiting)} fresh model(s)", key="norms.cmp_run")
    ):
        st.info(
            f"Each fresh model has about {size / 1e6:.0f}M parameters: building it and running a forward and "
            "backward pass takes several seconds, so it starts when you press the button."
        )
        placements = []
    try:
        for p in placements:
            res = run.depth_norms(p, view.norm_kind, view.n_layer, ids, seed)
            results[f"{p}-norm (loss {res.loss:.3f})"] = res
    except ValueError as e:
        st.warning(f"{message(e)}. This comparison needs at least two tokens in the prompt.")
    return results


def depth(run: PromptRun, view: NormsView, seed: int) -> None:
    """Part 4: fresh random models of this size with other placements and norms, across depth."""
    results, d_model = depth_results(run, view, seed), run.lm.config.d_model
    if results:
        left, right = st.columns(2)
        charts.show(
            norm_figs.depth_lines(
                results, "resid_norm", "Activation norm per block (log scale)", "mean L2 norm per token", log=True
            ),
            key="norms.depth_resid",
            where=left,
        )
        left.caption(
            f"Pre-norm keeps adding to the stream, so its norm climbs with depth. Post-norm ends every "
            f"block with a norm, so the stream is reset to about √d_model = {d_model**0.5:.1f}."
        )
        charts.show(
            norm_figs.depth_lines(
                results, "grad_norm", "Gradient norm per block (log scale)", "L2 norm of the gradient", log=True
            ),
            key="norms.depth_grad",
            where=right,
        )
        right.caption(
            "How strongly the loss pulls on each block's weights. A flat line means every depth learns at "
            "a similar rate; a steep slope means some layers get much bigger updates than others."
        )


def depth_intro(run: PromptRun, where) -> None:
    cfg = run.lm.config
    where.markdown(
        f"A **fresh random model** of this model's size (d_model {cfg.d_model}, {cfg.n_head} heads) with the "
        "settings below runs your prompt forward and backward (the next-token loss). We measure the residual "
        "stream's norm after each block and the gradient norm reaching each block's weights."
        + (
            " This model's parallel block has no post-norm form: the post-norm model runs sequential blocks."
            if cfg.parallel_block
            else ""
        )
    )


def main() -> None:
    shown = sidebar.render()
    st.title("LayerNorm & the residual stream")
    st.markdown(
        "Every block **adds** its attention and MLP outputs to a running vector per token, the *residual "
        "stream*. Norms (LayerNorm or RMSNorm) rescale a vector to a standard size before (pre-norm, GPT-2) "
        "or after (post-norm, the 2017 paper) each addition. Everything here is read from the running model."
    )
    run = current_run()
    parts = []  # each part's heading and controls, then its charts
    for i, header in enumerate(HEADERS):
        parts.append(st.container())
        parts[-1].header(header)
        if i == 3:
            depth_intro(run, parts[-1])
        parts.append(st.container())
    view = settings(run, parts[::2])
    for body, draw in zip(
        parts[1::2],
        (
            lambda: statistics(run, view),
            lambda: stream(run),
            lambda: worked(run, view),
            lambda: depth(run, view, shown.seed),
        ),
    ):
        with body:
            draw()


main()
