"""Experiments: the 2017 Transformer's design choices, each tested live on real tensors."""

import pandas as pd
import streamlit as st

from tfm.viz import experiments as experiment_figs
from ui import charts, experiment_parts, links, sidebar
from ui.text import message


@st.fragment
def scaling_section() -> None:
    res = experiment_parts.softmax_scaling()
    charts.show(experiment_figs.softmax_figure(res), key="exp.softmax_chart")
    st.markdown(
        "**Notice:** without ÷√d_k the scores' spread grows like √d_k "
        f"(std {float(res['unscaled']['score_std'][-1]):.1f} at d_k={res['d_k'][-1]}), so softmax saturates onto one key "
        "and the gradient reaching the scores shrinks; with scaling all three stay flat."
    )


@st.fragment
def residual_section() -> None:
    st.session_state.setdefault("exp.res_layers", 50)
    n = st.slider("Layers in the stack", 10, 100, step=10, **links.keep("exp.res_layers"))
    res = experiment_parts.residual_gradients(n)  # the server's bound, whatever the widget sent (ValueError: a bug)
    charts.show(
        experiment_figs.per_layer_log_figure(
            {"residual": res["residual"], "plain": res["plain"]},
            {"residual": "with residuals: x + f(x)", "plain": "without: f(x)"},
            f"Gradient norm per block in a {n}-block stack",
            "gradient norm (log scale)",
        ),
        key="exp.residual_chart",
    )
    ratio = res["residual_first"] / max(res["plain_first"], 1e-300)
    st.markdown(
        f"**Notice:** at the first block the gradient is {res['residual_first']:.3g} with residuals and "
        f"{res['plain_first']:.3g} without: {ratio:,.0f} times smaller: the identity path carries the signal "
        "back through every layer."
    )


@st.fragment
def placement_section() -> None:
    st.session_state.setdefault("exp.depth", 12)
    n = st.slider("Layers", 12, 48, step=4, **links.keep("exp.depth"))
    res = experiment_parts.norm_placement_depth(n)
    charts.show(experiment_figs.depth_figure(res), key="exp.depth_chart")
    spread = {v: float(res[v].grad_norm.max() / res[v].grad_norm.min()) for v in ("pre", "post")}
    st.markdown(
        f"**Notice:** post-norm pins the stream at the norm of a LayerNorm output (√d_model = "
        f"{res['config'].d_model ** 0.5:.0f}) after every block while pre-norm lets it drift with depth; "
        f"largest/smallest block gradient: {spread['pre']:.1f}× pre-norm vs {spread['post']:.1f}× post-norm."
    )


@st.fragment
def norms_section() -> None:
    res = experiment_parts.norm_axes()
    charts.show(experiment_figs.norm_axes_figure(res), key="exp.axes_chart")
    stats = pd.DataFrame(
        {
            "statistic": [
                "mean over each row (token)",
                "std over each row",
                "mean over each column (feature)",
                "std over each column",
            ],
            **{
                name: [
                    ", ".join(f"{v:+.3f}" for v in res[f"{key}_{part}"].tolist())
                    for part in ("row_mean", "row_std", "col_mean", "col_std")
                ]
                for key, name in (("layernorm", "LayerNorm output"), ("batchnorm", "BatchNorm output"))
            },
        }
    )
    st.dataframe(stats, hide_index=True, key="exp.axes_stats")
    st.markdown(
        "**Notice:** LayerNorm zeroes each token's own mean (rows), so it never mixes examples and "
        "works for any batch size; BatchNorm zeroes each feature's mean across the batch (columns)."
    )
    st.button("Time again", key="exp.retime")
    res_t = experiment_parts.norm_timing()
    charts.show(experiment_figs.timing_figure(res_t), key="exp.timing_chart")
    med = res_t["median_ms"]
    st.markdown(
        "**Notice:** RMSNorm skips the mean: one reduction instead of two, and no bias. Written out, "
        f"it took {med['RMSNorm written out']:.3f} ms vs {med['LayerNorm written out']:.3f} ms for LayerNorm; "
        f"as library calls {med['RMSNorm (F.rms_norm)']:.3f} vs {med['LayerNorm (F.layer_norm)']:.3f} ms, "
        "where how well each kernel is written can matter more than the formula. Measured now on a shared "
        "machine: press *Time again* to see how much they vary."
    )


@st.fragment
def mask_section() -> None:
    c1, c2 = st.columns(2)
    st.session_state.setdefault("exp.causal", True)
    causal = c1.checkbox("Causal (decoder) mask", **links.keep("exp.causal"))
    st.session_state.setdefault("exp.n_pad", 2)
    n_pad = c2.slider("Padded positions at the end", 0, 5, **links.keep("exp.n_pad"))
    res = experiment_parts.mask_demo(n_pad, causal)
    labels = [f"{'pad' if not real else 'tok'} {i}" for i, real in enumerate(res["keys_real"].tolist())]
    charts.show(experiment_figs.mask_figure(res, labels), key="exp.mask_chart")
    st.markdown(
        "**Notice:** masked cells become −∞ before the softmax, so their weight is exactly 0 and each "
        "row still sums to 1 over the allowed keys."
    )


@st.fragment
def heads_section() -> None:
    c1, c2 = st.columns(2)
    st.session_state.setdefault("exp.d_model", 64)
    st.session_state.setdefault("exp.n_head", 4)
    d_model = c1.number_input("d_model", 1, 2048, **links.keep("exp.d_model"))
    n_head = c2.number_input("heads", 1, 64, **links.keep("exp.n_head"))
    try:
        res = experiment_parts.head_split_shapes(int(d_model), int(n_head))
    except ValueError as e:
        st.error(f"{message(e)}. Try n_head = 1, 2, 4 or 8 with d_model = 64.")
        return
    table = pd.DataFrame(
        [
            {
                "tensor": s["name"],
                "shape": " × ".join(map(str, s["shape"])),
                "axes": ", ".join(s["axes"]),
                "what happens": s["what"],
            }
            for s in res["steps"]
        ]
    )
    st.dataframe(table, hide_index=True, key="exp.heads_table")
    st.markdown(
        f"**Notice:** {n_head} heads of size d_model/heads = {res['d_head']}: the split is only a view "
        "and a transpose, so heads cost no extra parameters; the concat undoes it before W_O."
    )


SECTIONS = [
    ("Why divide the scores by √d_k?", scaling_section),
    ("Residual connections: gradients through 50 layers", residual_section),
    ("Pre-norm vs post-norm across depth", placement_section),
    ("LayerNorm vs BatchNorm axes; RMSNorm vs LayerNorm speed", norms_section),
    ("Causal and padding masks", mask_section),
    ("Multi-head attention: split and concat, shape by shape", heads_section),
]


def main() -> None:
    """Each section is a fragment: changing its controls reruns it alone, with its own settings."""
    sidebar.render()
    links.restore("exp.res_layers", "exp.depth", "exp.causal", "exp.n_pad", "exp.d_model", "exp.n_head")
    st.title("Experiments: why the Transformer is built this way")
    st.markdown(
        "Each experiment below runs now, on tensors made from a fixed seed or a fresh random model "
        "(not the sidebar's model), and takes a few seconds at most. Changing a control reruns only its "
        "section."
    )
    for title, section in SECTIONS:
        with st.expander(title, expanded=True):
            section()


main()
