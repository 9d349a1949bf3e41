"""Logit lens: read the residual stream after every layer through the final norm and the
unembedding, as if that layer were the last: what would the model predict at that depth? The
tuned lens (a trained affine map per layer first, where the model ships one) reads it better."""
import streamlit as st
import torch

from tfm.analysis.lens.compare import LENSES
from tfm.analysis.lens.tuned import TRAIN_COMMAND
from tfm.viz import lens as lens_figs
from tfm.viz import sampling as sampling_figs
from ui import charts, examples, links, needs, sidebar
from ui.text import message, plain
from ui.run import current_run

WIDTHS = (8, 16, 24, 32, 48, 64)

sidebar.render()
st.title("Logit lens")
needs.next_token_head("The logit lens")
run = current_run()
examples.offer("logit_lens", run)
tok, n_pos = run.lm.tokenizer, len(run.ids)
st.caption("Each row decodes the residual stream after one layer (row 'embed': before any block) with the "
           "model's own final norm and unembedding (the **tuned** lens first maps each layer's stream with an affine "
           "translator trained for that layer, Belrose et al. 2023). Cell text: that layer's most likely next token; "
           "colour: its probability; **bold**: it is the token that really comes next in the prompt. Hover for the top 5.")

ss = st.session_state
links.restore("lens.kind", "lens.width", "lens.start")
links.url_init("lens.kind", "lens", str)
if ss.get("lens.kind", "logit") not in LENSES:  # links may hold anything
    st.warning(f"There is no lens {plain(repr(ss['lens.kind']))}; showing the logit lens.")
    ss["lens.kind"] = "logit"
kind = st.radio("Lens", LENSES, horizontal=True, **links.keep("lens.kind"),
                help="logit: every stream decoded as it is; tuned: through the layer's trained translator first.")
links.url_set(lens=kind, defaults=dict(lens="logit"))
try:
    tuned = run.tuned_lens()
except ValueError as e:
    tuned = None
    st.error(f"This model's tuned lens cannot be read: {message(e)}")
if tuned is None:
    st.info("This model ships no tuned lens, so the page shows the logit lens only. Train one with "
            f"`{TRAIN_COMMAND}` (a rerun goes on where a stopped one left off; the bundled model and SmolLM2 ship "
            "theirs under assets/lens).")
use = tuned if kind == "tuned" else None
ss["lens.width"] = min(WIDTHS, key=lambda w: abs(w - int(ss.get("lens.width", 32))))
width = st.select_slider("Positions shown", WIDTHS, **links.keep("lens.width"),
                         help="A window keeps long prompts readable; slide it with 'First position'.")
start = 0
if n_pos > width:
    ss["lens.start"] = min(max(int(ss.get("lens.start", n_pos - width)), 0), n_pos - width)
    start = st.slider("First position", 0, n_pos - width, **links.keep("lens.start"))
stop = min(n_pos, start + width)
rows, top_ids, top_probs = run.lens(start, stop, use)  # the window's positions, top 5 only
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
title = f"{'Tuned' if use else 'Logit'} lens: top prediction after each layer, positions {start}–{stop - 1} of {n_pos}"
fig = sampling_figs.lens_grid_figure(top_probs[:, :, 0].numpy(), pieces, hover, rows, run.labels[start:stop], title,
                                     "position (input token); each cell predicts the token after it", bold=bold)
charts.show(fig, key="lens.chart", config={"displaylogo": False})

fits = run.lens_fits(tuned)
kl = {name: fit.mean_kl() for name, fit in fits.items()}
agree = {name: fit.agreement() for name, fit in fits.items()}
st.subheader("How close is each layer to the final prediction?")
st.caption("KL divergence from the model's final next-token distribution to each layer's reading (0: the same "
           "distribution), and how often the layer's top token is the final top token, averaged over this prompt's "
           "positions after the first (position 0 is the attention sink: the tuned lens is not trained on it).")
fig = lens_figs.lens_fit_figure(kl, agree, fits["logit"].labels, "Each layer's reading against the final prediction")
charts.show(fig, key="lens.fits", config={"displaylogo": False})
