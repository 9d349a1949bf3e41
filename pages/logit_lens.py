"""Logit lens: read the residual stream after every layer through the final norm and the
unembedding, as if that layer were the last: what would the model predict at that depth?"""
import streamlit as st
import torch

from tfm.viz import sampling as sampling_figs
from ui import charts, examples, links, needs, sidebar
from ui.run import current_run

WIDTHS = (8, 16, 24, 32, 48, 64)

sidebar.render()
st.title("Logit lens")
needs.next_token_head("The logit lens")
run = current_run()
examples.offer("logit_lens", run)
tok, n_pos = run.lm.tokenizer, len(run.ids)
st.caption("Each row decodes the residual stream after one layer (row 'embed': before any block) with the "
           "model's own final norm and unembedding. Cell text: that layer's most likely next token; colour: "
           "its probability; **bold**: it is the token that really comes next in the prompt. Hover for the top 5.")

ss = st.session_state
links.restore("lens.width", "lens.start")
ss["lens.width"] = min(WIDTHS, key=lambda w: abs(w - int(ss.get("lens.width", 32))))
width = st.select_slider("Positions shown", WIDTHS, **links.keep("lens.width"),
                         help="A window keeps long prompts readable; slide it with 'First position'.")
start = 0
if n_pos > width:
    ss["lens.start"] = min(max(int(ss.get("lens.start", n_pos - width)), 0), n_pos - width)
    start = st.slider("First position", 0, n_pos - width, **links.keep("lens.start"))
stop = min(n_pos, start + width)
rows, top_ids, top_probs = run.lens(start, stop)  # the window's positions, top 5 only
ids_l, probs_l = top_ids.tolist(), top_probs.tolist()  # plain lists: ~1,000 cells, no tensor indexing each
pieces = [[tok.display_piece(cell[0]) for cell in layer] for layer in ids_l]
nxt = list(run.ids[start + 1:stop + 1])  # the token that really follows each position


def hover_text(r: int, c: int) -> str:
    """The token that really follows, then the layer's top 5 with their probabilities."""
    actual = sampling_figs.esc(tok.display_piece(nxt[c])) if c < len(nxt) else "(end of prompt)"
    top5 = (f"{sampling_figs.esc(tok.display_piece(i))}: {p:.4f}" for i, p in zip(ids_l[r][c], probs_l[r][c]))
    return f"actual next: {actual}<br>" + "<br>".join(top5)


hover = [[hover_text(r, c) for c in range(stop - start)] for r in range(len(rows))]
nxt_or_none = torch.tensor(nxt + [-1] * (stop - start - len(nxt)))  # the prompt's last position has no next
bold = (top_ids[:, :, 0] == nxt_or_none).numpy()
title = f"Logit lens: top prediction after each layer, positions {start}–{stop - 1} of {n_pos}"
fig = sampling_figs.lens_grid_figure(top_probs[:, :, 0].numpy(), pieces, hover, rows, run.labels[start:stop], title,
                                     "position (input token); each cell predicts the token after it", bold=bold)
charts.show(fig, key="lens.chart", config={"displaylogo": False})
