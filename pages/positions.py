"""Positional encodings: how the running model tells positions apart, and why it has to."""

import pandas as pd
import streamlit as st

from tfm.viz import positions as position_figs
from ui import charts, links, sidebar
from ui.run import PromptRun, current_run
from ui.text import message
from ui.views.positions import PositionsView

INTRO = (
    "Attention compares every token with every other token, but on its own it has no idea **where** "
    "a token is. Models add position information: learned vectors (GPT-2), fixed sine waves (the 2017 "
    "paper), or rotations of queries and keys (RoPE, Llama). This page shows the running model's own."
)
SHUFFLE = (
    "Self-attention treats its input as a *set*: shuffle the tokens and the outputs come out shuffled the "
    "same way, nothing else changes (it is **permutation-equivariant**). Below, the model's own block 0 "
    "attention runs on the prompt's token embeddings and on a shuffled copy, once without positions and "
    "once with the model's positions (vectors added at positions 0, 1, 2… or RoPE's rotation)."
)
NO_POSITIONS = (
    "This model uses **no positional encoding** (`pos_encoding = none`). Nothing is added to the "
    "embeddings and nothing is rotated: the only hint about order is the causal mask (a token sees "
    "only earlier tokens). The check below shows what that means."
)


def settings(run: PromptRun, slots: dict) -> PositionsView:
    """The view from the widgets, each drawn in its slot: part 1's positions and dims, part 3's size."""
    cfg, ss, max_pos, dims = run.lm.config, st.session_state, 0, ()
    links.restore("pos.max_pos", "pos.dims", "pos.d_model", "pos.length")
    if cfg.pos_encoding in ("learned", "sinusoidal"):
        ctx = cfg.context_length
        ss.setdefault("pos.max_pos", min(ctx, 128))
        links.put("pos.max_pos", max(1, min(int(ss["pos.max_pos"]), ctx)))
        max_pos = (
            slots["positions"].slider(
                "Positions to show",
                1,
                ctx,
                **links.keep("pos.max_pos", ctx),
                help=f"The model has {ctx} positions; your prompt uses positions 0 to {len(run.ids) - 1}.",
            )
            if ctx > 1
            else 1
        )
    if cfg.pos_encoding == "sinusoidal":
        ss.setdefault("pos.dims", sorted({0, 1, min(8, cfg.d_model - 2), cfg.d_model - 2}))
        ss["pos.dims"] = [d for d in ss["pos.dims"] if d < cfg.d_model]
        dims = tuple(
            slots["dims"].multiselect("Dimensions to draw as waves", list(range(cfg.d_model)), **links.keep("pos.dims"))
        )
    c1, c2 = slots["size"].columns(2)
    ss.setdefault("pos.d_model", 128)
    ss.setdefault("pos.length", 128)
    d_model = c1.slider("d_model", 2, 512, step=2, **links.keep("pos.d_model"))
    length = c2.slider("length (positions)", 4, 512, **links.keep("pos.length"))
    return PositionsView(max_pos, dims, d_model, length)


def added(run: PromptRun, view: PositionsView) -> None:
    """Part 1 for learned or sinusoidal positions: the vectors, their similarity, PCA and waves."""
    cfg, n = run.lm.config, view.max_pos
    found = run.position_table(n)
    source = "pos_emb.weight (learned)" if cfg.pos_encoding == "learned" else "pos_table buffer (sinusoidal)"
    st.caption(
        f"Each position p gets a vector of {cfg.d_model} numbers that is **added** to the token's "
        f"embedding before block 0. Read from the model's `{source}`."
    )
    left, right = st.columns(2)
    charts.show(
        position_figs.position_heatmap(found.table, f"Positional vectors: {source}"), key="pos.heat", where=left
    )
    left.caption(
        "One row per position. Stripes that change slowly down a column carry coarse position; "
        "fast-changing columns tell neighbours apart."
    )
    charts.show(
        position_figs.similarity_heatmap(found.similarity, "Cosine similarity between positions"),
        key="pos.sim",
        where=right,
    )
    right.caption(
        "Bright along the diagonal band means nearby positions get similar vectors: "
        "the model can tell 'near' from 'far'."
    )
    if found.pca is not None:
        charts.show(
            position_figs.pca_scatter(*found.pca, "Positions projected to 2-D (PCA)"), key="pos.pca", where=left
        )
        left.caption(
            "Each dot is a position, coloured from first (dark) to last (yellow). A smooth curve "
            "means position is laid out in order in the vector space."
        )
    if cfg.pos_encoding == "sinusoidal":
        waves(found.table, view, right)


def waves(table, view: PositionsView, right) -> None:
    """The chosen sine dimensions over position, in the right column."""
    charts.show(
        position_figs.waves(table, list(view.dims), "Chosen dimensions over position"), key="pos.waves", where=right
    )
    right.caption("Even dims are sines, odd dims cosines; the frequency falls as the dimension rises.")


def rope_scaling_note(cfg) -> str:
    return {
        "none": "",
        "linear": f", then divided by {cfg.rope_factor:g} (linear rope_scaling)",
        "llama3": f", then Llama 3.1's rescaling: wavelengths longer than {cfg.rope_original_context}/"
        f"{cfg.rope_low_freq_factor:g} positions are stretched {cfg.rope_factor:g}×, shorter than "
        f"{cfg.rope_original_context}/{cfg.rope_high_freq_factor:g} kept, the band between blended",
        "factors": ", then divided by the file's own factor for pair i (GGUF rope_freqs: "
        f"{min(cfg.rope_freq_factors, default=1):g} to {max(cfg.rope_freq_factors, default=1):g})",
    }[cfg.rope_scaling]


def rope(run: PromptRun) -> None:
    """Part 1 for RoPE: the angles per position and pair, and each pair's speed."""
    cfg = run.lm.config
    found = run.rope_table(min(cfg.context_length, max(len(run.ids), 64)))
    st.caption(
        "RoPE adds nothing to the embeddings. Inside every attention layer it **rotates** each pair "
        "of query/key dimensions by an angle proportional to the position, so q·k depends on how far "
        "apart two tokens are. Angles computed from the model's `inv_freq` with `tfm.model.rope_angles`."
    )
    left, right = st.columns(2)
    charts.show(
        position_figs.rope_angle_heatmap(found.angles, "RoPE rotation angle per position and pair"),
        key="pos.rope",
        where=left,
    )
    left.caption(
        "Colour is the angle wrapped to one turn (hover for the full angle). The first pairs spin "
        "fast (fine position), the last pairs barely move (coarse position)."
    )
    charts.show(
        position_figs.rope_frequency_line(found.inv_freq, "Rotation speed per pair", found.local_freq),
        key="pos.rope_freq",
        where=right,
    )
    rd = cfg.rotary_dim
    right.caption(
        f"θᵢ = {cfg.rope_base:g}^(−2i/{rd}){rope_scaling_note(cfg)}: each pair turns this many radians per position."
    )
    rope_notes(cfg, right)


def rope_notes(cfg, right) -> None:
    """Two RoPE bases (local and global layers), and partial rotary."""
    rd = cfg.rotary_dim
    if cfg.rope_local_base is not None:
        right.caption(
            f"Two RoPE bases: the {len(cfg.local_layers)} local layers (each reads only the last "
            f"{cfg.sliding_window} keys) turn with base {cfg.rope_local_base:g}, the "
            f"{cfg.n_layer - len(cfg.local_layers)} global ones with {cfg.rope_base:g}: slow pairs keep "
            "far positions apart where the whole prompt is read."
        )
    if rd < cfg.d_head:
        st.info(
            f"Partial rotary (rotary_pct = {cfg.rotary_pct:g}, as in GPT-NeoX/Pythia): RoPE rotates only the "
            f"first {rd} of each head's {cfg.d_head} dimensions ({rd // 2} pairs, drawn above); the other "
            f"{cfg.d_head - rd} pass through unrotated, so they carry no position at all."
        )


def shuffle(run: PromptRun, seed: int) -> None:
    """Part 2: block 0's attention on the prompt and a shuffled copy, without and with positions."""
    try:
        check = run.permutation_check(seed)
    except ValueError as e:
        st.warning(f"{message(e)}. The check needs at least two tokens.")
        return
    fmt = lambda v: "no positions in this model" if v is None else f"{v:.2e}"  # noqa: E731
    perm_table = pd.DataFrame(
        {
            "measurement": [
                "full attention (no mask): max |attn(shuffled) − shuffled attn|",
                "causal attention: change of the last token's output, earlier tokens shuffled",
            ],
            "without positions": [fmt(check.full_without), fmt(check.causal_last_without)],
            "with the model's positions": [fmt(check.full_with), fmt(check.causal_last_with)],
        }
    )
    st.table(perm_table.set_index("measurement"))
    st.caption(
        f"For scale, the largest output value is {check.scale:.2e}. Without positions the differences "
        "are float32 rounding (~1e-8): the shuffle is invisible. With positions they are real: the model "
        f"can see order. The shuffled prompt used (seed {seed}, the sidebar's):"
    )
    st.code(" ".join(run.labels[i] for i in check.perm), language=None, wrap_lines=True)


def formula(run: PromptRun, view: PositionsView) -> None:
    """Part 3: the sinusoidal table at the chosen size, offsets, and the binary clock."""
    demo, length, d_model = run.sinusoid_demo(view.length, view.d_model), view.length, view.d_model
    left, right = st.columns(2)
    charts.show(
        position_figs.position_heatmap(demo.table, f"Sinusoidal table, {length} positions × {d_model} dims"),
        key="pos.sin_table",
        where=left,
    )
    left.caption("Left columns oscillate fast, right columns slowly: every position gets a unique pattern.")
    charts.show(
        position_figs.dot_product_lines(
            demo.dots.k, demo.dots.dots, demo.dots.formula, "PE(p)·PE(p+k) depends only on the offset k"
        ),
        key="pos.dots",
        where=right,
    )
    right.caption(
        "The curves for different start positions p lie on top of each other and on Σᵢ cos(k·ωᵢ): "
        "how similar two positions look depends only on how far apart they are."
    )
    charts.show(
        position_figs.binary_clock(
            demo.clock_bits,
            demo.clock_table,
            demo.clock_dims,
            demo.periods,
            f"The 'binary clock' view: first {min(length, 64)} positions",
        ),
        key="pos.clock",
    )
    st.caption(
        "Writing a position in binary, the lowest bit flips every step, the next every 2 steps, then 4… "
        "The sine dimensions do the same smoothly: each chosen column turns about half as fast as the one "
        "before it. Together they spell out the position like the digits of a counter."
    )


def main() -> None:
    shown = sidebar.render()
    st.title("Positional encodings")
    st.markdown(INTRO)
    run = current_run()
    cfg = run.lm.config
    slots = {"positions": st.container()}
    slots["positions"].header(f"1. This model: `{cfg.pos_encoding}` positions")
    part1, slots["dims"] = st.container(), st.container()  # the dims widget below part 1's charts
    part2, slots["size"] = st.container(), st.container()
    part2.header("2. Why positions are needed: shuffle the prompt")
    part2.markdown(SHUFFLE)
    slots["size"].header("3. The sinusoidal formula, explored")
    slots["size"].markdown(
        "PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)). Change the sizes and watch."
    )
    view = settings(run, slots)
    with part1:
        if cfg.pos_encoding in ("learned", "sinusoidal"):
            added(run, view)
        elif cfg.pos_encoding == "rope":
            rope(run)
        else:
            st.info(NO_POSITIONS)
    with part2:
        shuffle(run, shown.seed)
    formula(run, view)


main()
