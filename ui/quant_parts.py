"""The Quantization page's names from the engine (`tfm.analysis.quant.requantize`: the types the block view
decodes, the re-quantization targets, a tensor table, one block decoded) and its controls: the
page's view (`ui.views.quant.QuantView`) from the widgets of its two parts."""

from __future__ import annotations

import streamlit as st

from tfm.analysis.quant.requantize import (
    DECODED,
    TARGETS,
    bits_per_weight,
    block_size,
    block_view,
    copy_bytes,
    tensor_table,
)
from tfm.loaders.limits import fmt_bytes
from services import server
from ui import links
from ui.views.quant import QuantView

__all__ = ["DECODED", "TARGETS", "block_size", "block_view", "controls", "copy_bytes", "fmt_bytes", "tensor_table"]


def _block(f, table, where) -> tuple[str, int, int]:
    """The tensor, row and block of the stored-block part ("", 0, 0 and an info when none is decoded)."""
    names = [r.name for r in table.rows if r.qtype in DECODED]
    if not names:
        where.info(f"No tensor of this file is stored in a type the block view decodes ({', '.join(DECODED)}).")
        return "", 0, 0
    links.restore("quant.tensor", "quant.row", "quant.block")
    if st.session_state.get("quant.tensor") not in names:  # start on a block with a minimum when there is one
        st.session_state["quant.tensor"] = next((n for n in names if DECODED[f.tensors[n].qtype.name][0]), names[0])
    c = where.columns([3, 1, 1])
    name = c[0].selectbox("Tensor", names, **links.keep("quant.tensor"))
    t = f.tensors[name]
    row = c[1].number_input("Row", 0, t.n_elements // t.shape[-1] - 1, **links.keep("quant.row"))
    size = block_size(f, name)
    with where:  # another tensor's block may be past this one's
        links.clamp_int("quant.block", 0, t.shape[-1] // size - 1, 0, "Block")
    block = c[2].number_input(
        "Block",
        0,
        t.shape[-1] // size - 1,
        **links.keep("quant.block"),
        help=f"Each row of {t.shape[-1]} weights is cut into blocks of {size}.",
    )
    return name, int(row), int(block)


def controls(f, table, lm, block_part, requant_part) -> QuantView:
    """The view: the block's widgets in `block_part`, the target type (and what re-quantizing costs) in `requant_part`."""
    tensor, row, block = _block(f, table, block_part)
    need = copy_bytes(lm)
    c = requant_part.columns([2, 3])
    qtype = c[0].selectbox(
        "Type",
        TARGETS,
        index=TARGETS.index("Q4_0"),
        format_func=lambda q: f"{q} ({bits_per_weight(q):g} bits)",
        **links.keep("quant.target"),
    )
    c[1].caption(
        f"Every weight matrix goes through `gguf.quants.quantize` to {qtype} and back, in a copy of the model "
        f"({fmt_bytes(need)}, dropped once both models have run; the shared model is untouched). Norm gains "
        "stay float32, as llama.cpp keeps them."
    )
    return QuantView(tensor, row, block, qtype)


def copy_over_limit(lm) -> str | None:
    """Why a re-quantized copy of `lm` is refused on this server (over its model limit), or None."""
    need, limit = copy_bytes(lm), server.limits().max_model_bytes
    if need <= limit:
        return None
    return (
        f"A copy of this model takes {fmt_bytes(need)}, over this server's model limit of {fmt_bytes(limit)}: "
        "re-quantizing is off here."
    )
