"""Positional encodings: how the running model tells positions apart, and why it has to."""
import pandas as pd
import streamlit as st

from tfm.analysis import positions
from tfm.viz import positions as position_figs
from ui import charts, links, sidebar
from ui.run import current_run
from ui.text import message

sidebar.render()
st.title("Positional encodings")
st.markdown(
    "Attention compares every token with every other token, but on its own it has no idea **where** "
    "a token is. Models add position information: learned vectors (GPT-2), fixed sine waves (the 2017 "
    "paper), or rotations of queries and keys (RoPE, Llama). This page shows the running model's own."
)
run = current_run()
model, cfg = run.lm.model, run.lm.config
links.restore("pos.max_pos", "pos.dims", "pos.d_model", "pos.length")

st.header(f"1. This model: `{cfg.pos_encoding}` positions")
if cfg.pos_encoding in ("learned", "sinusoidal"):
    ctx = cfg.context_length
    st.session_state.setdefault("pos.max_pos", min(ctx, 128))
    st.session_state["pos.max_pos"] = max(1, min(int(st.session_state["pos.max_pos"]), ctx))
    n = st.slider("Positions to show", 1, ctx, **links.keep("pos.max_pos"),
                  help=f"The model has {ctx} positions; your prompt uses positions 0 to {len(run.ids) - 1}.") if ctx > 1 else 1
    table = positions.position_vectors(model, n)
    source = "pos_emb.weight (learned)" if cfg.pos_encoding == "learned" else "pos_table buffer (sinusoidal)"
    st.caption(f"Each position p gets a vector of {cfg.d_model} numbers that is **added** to the token's "
               f"embedding before block 0. Read from the model's `{source}`.")
    left, right = st.columns(2)
    charts.show(position_figs.position_heatmap(table, f"Positional vectors: {source}"), key="pos.heat", where=left)
    left.caption("One row per position. Stripes that change slowly down a column carry coarse position; "
                 "fast-changing columns tell neighbours apart.")
    charts.show(position_figs.similarity_heatmap(positions.cosine_similarity_matrix(table),
                                      "Cosine similarity between positions"), key="pos.sim", where=right)
    right.caption("Bright along the diagonal band means nearby positions get similar vectors: "
                  "the model can tell 'near' from 'far'.")
    if n >= 3:
        coords, share = positions.pca_2d(table)
        charts.show(position_figs.pca_scatter(coords, share, "Positions projected to 2-D (PCA)"), key="pos.pca", where=left)
        left.caption("Each dot is a position, coloured from first (dark) to last (yellow). A smooth curve "
                     "means position is laid out in order in the vector space.")
    if cfg.pos_encoding == "sinusoidal":
        st.session_state.setdefault("pos.dims", sorted({0, 1, min(8, cfg.d_model - 2), cfg.d_model - 2}))
        st.session_state["pos.dims"] = [d for d in st.session_state["pos.dims"] if d < cfg.d_model]
        dims = st.multiselect("Dimensions to draw as waves", list(range(cfg.d_model)), **links.keep("pos.dims"))
        charts.show(position_figs.waves(table, dims, "Chosen dimensions over position"), key="pos.waves", where=right)
        right.caption("Even dims are sines, odd dims cosines; the frequency falls as the dimension rises.")
elif cfg.pos_encoding == "rope":
    angles = positions.rope_angle_table(model, min(cfg.context_length, max(len(run.ids), 64)))
    st.caption("RoPE adds nothing to the embeddings. Inside every attention layer it **rotates** each pair "
               "of query/key dimensions by an angle proportional to the position, so q·k depends on how far "
               "apart two tokens are. Angles computed from the model's `inv_freq` with `tfm.model.rope_angles`.")
    left, right = st.columns(2)
    charts.show(position_figs.rope_angle_heatmap(angles, "RoPE rotation angle per position and pair"), key="pos.rope", where=left)
    left.caption("Colour is the angle wrapped to one turn (hover for the full angle). The first pairs spin "
                 "fast (fine position), the last pairs barely move (coarse position).")
    charts.show(position_figs.rope_frequency_line(model.inv_freq.float().cpu(), "Rotation speed per pair",
                                                  positions.local_rope_freq(model)), key="pos.rope_freq", where=right)
    rd = cfg.rotary_dim
    scaled = {"none": "", "linear": f", then divided by {cfg.rope_factor:g} (linear rope_scaling)",
              "llama3": f", then Llama 3.1's rescaling: wavelengths longer than {cfg.rope_original_context}/"
                        f"{cfg.rope_low_freq_factor:g} positions are stretched {cfg.rope_factor:g}×, shorter than "
                        f"{cfg.rope_original_context}/{cfg.rope_high_freq_factor:g} kept, the band between blended",
              "factors": ", then divided by the file's own factor for pair i (GGUF rope_freqs: "
                         f"{min(cfg.rope_freq_factors, default=1):g} to {max(cfg.rope_freq_factors, default=1):g})"}
    right.caption(f"θᵢ = {cfg.rope_base:g}^(−2i/{rd}){scaled[cfg.rope_scaling]}: each pair turns this many "
                  "radians per position.")
    if cfg.rope_local_base is not None:
        right.caption(f"Two RoPE bases: the {len(cfg.local_layers)} local layers (each reads only the last "
                      f"{cfg.sliding_window} keys) turn with base {cfg.rope_local_base:g}, the "
                      f"{cfg.n_layer - len(cfg.local_layers)} global ones with {cfg.rope_base:g}: slow pairs keep "
                      "far positions apart where the whole prompt is read.")
    if rd < cfg.d_head:
        st.info(f"Partial rotary (rotary_pct = {cfg.rotary_pct:g}, as in GPT-NeoX/Pythia): RoPE rotates only the "
                f"first {rd} of each head's {cfg.d_head} dimensions ({rd // 2} pairs, drawn above); the other "
                f"{cfg.d_head - rd} pass through unrotated, so they carry no position at all.")
else:
    st.info("This model uses **no positional encoding** (`pos_encoding = none`). Nothing is added to the "
            "embeddings and nothing is rotated: the only hint about order is the causal mask (a token sees "
            "only earlier tokens). The check below shows what that means.")

st.header("2. Why positions are needed: shuffle the prompt")
st.markdown(
    "Self-attention treats its input as a *set*: shuffle the tokens and the outputs come out shuffled the "
    "same way, nothing else changes (it is **permutation-equivariant**). Below, the model's own block 0 "
    "attention runs on the prompt's token embeddings and on a shuffled copy, once without positions and "
    "once with the model's positions (vectors added at positions 0, 1, 2… or RoPE's rotation)."
)
seed = int(st.session_state.get("sidebar.seed", 0))
try:
    check = run.permutation_check(seed)
except ValueError as e:
    st.warning(f"{message(e)}. The check needs at least two tokens.")
    check = None
if check is not None:
    fmt = lambda v: "no positions in this model" if v is None else f"{v:.2e}"  # noqa: E731
    perm_table = pd.DataFrame({
        "measurement": ["full attention (no mask): max |attn(shuffled) − shuffled attn|",
                        "causal attention: change of the last token's output, earlier tokens shuffled"],
        "without positions": [fmt(check.full_without), fmt(check.causal_last_without)],
        "with the model's positions": [fmt(check.full_with), fmt(check.causal_last_with)],
    })
    st.table(perm_table.set_index("measurement"))
    st.caption(f"For scale, the largest output value is {check.scale:.2e}. Without positions the differences "
               "are float32 rounding (~1e-8): the shuffle is invisible. With positions they are real: the model "
               f"can see order. The shuffled prompt used (seed {seed}, the sidebar's):")
    st.code(" ".join(run.labels[i] for i in check.perm), language=None, wrap_lines=True)

st.header("3. The sinusoidal formula, explored")
st.markdown("PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)). Change the sizes and watch.")
c1, c2 = st.columns(2)
st.session_state.setdefault("pos.d_model", 128)
st.session_state.setdefault("pos.length", 128)
d_model = c1.slider("d_model", 2, 512, step=2, **links.keep("pos.d_model"))
length = c2.slider("length (positions)", 4, 512, **links.keep("pos.length"))
dots = positions.sinusoidal_dots(length, d_model, [0, length // 4, length // 2])
left, right = st.columns(2)
charts.show(position_figs.position_heatmap(positions.sinusoidal_table(length, d_model),
                                f"Sinusoidal table, {length} positions × {d_model} dims"),
            key="pos.sin_table", where=left)
left.caption("Left columns oscillate fast, right columns slowly: every position gets a unique pattern.")
charts.show(position_figs.dot_product_lines(dots.k, dots.dots, dots.formula,
                                 "PE(p)·PE(p+k) depends only on the offset k"), key="pos.dots", where=right)
right.caption("The curves for different start positions p lie on top of each other and on Σᵢ cos(k·ωᵢ): "
              "how similar two positions look depends only on how far apart they are.")
clock_len = min(length, 64)
clock_dims, periods = positions.doubling_dims(d_model, max(1, (clock_len - 1).bit_length()))
charts.show(position_figs.binary_clock(positions.binary_bits(clock_len, max(1, (clock_len - 1).bit_length())),
                                positions.sinusoidal_table(clock_len, d_model), clock_dims, periods,
                                f"The 'binary clock' view: first {clock_len} positions"), key="pos.clock")
st.caption("Writing a position in binary, the lowest bit flips every step, the next every 2 steps, then 4… "
           "The sine dimensions do the same smoothly: each chosen column turns about half as fast as the one "
           "before it. Together they spell out the position like the digits of a counter.")
