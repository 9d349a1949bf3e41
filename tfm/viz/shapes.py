"""Tables, a Graphviz flow and plotly figures for the shapes & parameters page."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from ..core.trace import ShapeEntry
from ..core.trace_read import split_name


def dims(entry: ShapeEntry) -> str:
    """ "batch=1 × pos=25 × d_model=192": every axis with its name."""
    return " × ".join(f"{a}={n}" for a, n in zip(entry.axes, entry.shape))


def shape_table(shapes: tuple[ShapeEntry, ...]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "step": range(len(shapes)),
            "name": [s.name for s in shapes],
            "shape": [" × ".join(map(str, s.shape)) for s in shapes],
            "axes": [" × ".join(s.axes) for s in shapes],
            "dtype": [s.dtype for s in shapes],
            "stored": ["yes" if s.stored else "reshape only" for s in shapes],
        }
    )


def _group(name: str) -> str:
    """The stage a tensor belongs to: blocks.0.attn.q -> blocks.0.attn, blocks.0.attn_out -> itself."""
    block, inner = split_name(name)
    if block is not None:  # the sublayer's first part: attn.q -> attn, attn_out -> attn_out
        return name.removesuffix(inner) + inner.split(".")[0]
    parts = name.split(".")
    if parts[0] in ("embed", "pos_embed", "rope"):
        return "embedding"
    return "ln_final" if parts[0] == "ln_final" else name


def _stages(shapes) -> list[tuple[str, list[ShapeEntry]]]:
    """Consecutive entries with the same group, in execution order."""
    out: list[tuple[str, list[ShapeEntry]]] = []
    for s in shapes:
        g = _group(s.name)
        if out and out[-1][0] == g:
            out[-1][1].append(s)
        else:
            out.append((g, [s]))
    return out


def _block_signature(shapes, i: int) -> list[tuple[str, tuple, tuple]]:
    return [(_short(s.name), s.shape, s.axes) for s in shapes if split_name(s.name)[0] == i]


def _short(name: str) -> str:
    return split_name(name)[1]


def _label(title: str, entries: list[ShapeEntry], colour: str) -> str:
    """An HTML-like Graphviz table: a header row for a stage of several tensors, or one row."""
    cell = '<TD ALIGN="LEFT">{}</TD><TD ALIGN="LEFT">{}</TD>'
    rows = "".join(f"<TR>{cell.format(html.escape(_short(e.name)), html.escape(dims(e)))}</TR>" for e in entries)
    if len(entries) == 1 and _short(entries[0].name) == _short(title):
        rows = f"<TR>{cell.format('<B>' + html.escape(_short(title)) + '</B>', html.escape(dims(entries[0])))}</TR>"
    else:
        rows = f'<TR><TD COLSPAN="2"><B>{html.escape(_short(title))}</B></TD></TR>{rows}'
    return f'<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3" BGCOLOR="{colour}">{rows}</TABLE>>'


def shape_flow_dot(shapes: tuple[ShapeEntry, ...], n_layer: int) -> str:
    """A top-to-bottom Graphviz flow: embedding, block 0 in full, the other blocks folded when
    their shapes equal block 0's, the final norm and the logits. Every label is a trace entry.
    Dashed edges are the residual connections: the stream skips a sublayer and is added back."""
    same = all(_block_signature(shapes, i) == _block_signature(shapes, 0) for i in range(1, n_layer))
    shown = [s for s in shapes if not (same and (split_name(s.name)[0] or 0) > 0)]
    lines = [
        "digraph G {",
        "rankdir=TB; nodesep=0.2; ranksep=0.18;",
        "node [shape=plaintext, fontsize=10, fontname=Helvetica]; edge [arrowsize=0.6];",
    ]
    prev, stream, after_sublayer = None, None, False
    for k, (group, entries) in enumerate(_stages(shown)):
        node = f"n{k}"
        colour = "#e8f0fe" if split_name(group)[0] == 0 else "#f3f3f3"
        lines.append(f"{node} [label={_label(group, entries, colour)}];")
        if prev:
            lines.append(f"{prev} -> {node};")
        if after_sublayer and stream:  # the sum of stream + sublayer output happens here
            lines.append(f'{stream} -> {node} [style=dashed, label=" + residual", fontsize=9];')
        after_sublayer = group.endswith(("attn_out", "mlp_out"))
        if group.endswith(("resid_pre", "resid_mid", "resid_post")):
            stream = node
        prev = node
        if same and n_layer > 1 and split_name(group) == (0, "resid_post"):
            lines.append(
                f'folded [shape=box, style="rounded,dashed", fontsize=10, label="blocks 1 … {n_layer - 1}: '
                f'{n_layer - 1} more blocks, the same shapes as block 0"];'
            )
            lines.append(f"{prev} -> folded;")
            prev, stream = "folded", None
    lines.append("}")
    return "\n".join(lines)


def param_bars(counts: dict[str, int], title: str) -> go.Figure:
    total = sum(counts.values())
    fig = go.Figure(
        go.Bar(
            x=list(counts),
            y=list(counts.values()),
            customdata=[100 * v / total for v in counts.values()],
            hovertemplate="%{x}: %{y:,} parameters (%{customdata:.1f}%)<extra></extra>",
        )
    )
    fig.update_layout(title=title, xaxis_title="component", yaxis_title="parameters", height=340)
    return fig
