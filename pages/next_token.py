"""Next-token sampling: how temperature, top-k and top-p reshape the model's next-token choice
(with a masked-LM encoder: its choice for the first [MASK], "fill the [MASK]").

Moving a slider only re-runs `tfm.sampling.next_token` (what generation draws from) on the cached logits of the prompt's
last position (from the shared trace): the model itself is not run again.
"""
import math

import streamlit as st

from tfm.analysis.capability import predicted_position
from tfm.generation.generate import n_words as n_words_of
from tfm.generation.sampling import SamplingSettings, next_token, usable_settings
from tfm.text.wordpiece import mask_last_word
from tfm.viz import sampling as sampling_figs
from ui import charts, links, needs, sidebar
from ui.run import current_run
from ui.text import message, plain

KEYS = ("next.temperature", "next.top_k", "next.top_p", "next.count")


def mask_last() -> None:
    st.session_state["sidebar.prompt"] = mask_last_word(st.session_state.get("sidebar.prompt", ""))
    links.remember("sidebar.prompt")


def same_number(a, b) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError, OverflowError):
        return False


sidebar.render()
st.title("Next-token sampling")
needs.token_head("Next-token sampling")
run = current_run()
tok = run.lm.tokenizer
try:
    at = predicted_position(run.lm.config, run.ids, getattr(tok, "mask_id", None))
except ValueError as e:
    st.info(f"Fill the [MASK]: {message(e)}.")
    st.button("Mask the last word", key="next.mask", on_click=mask_last)
    st.stop()
fill = run.lm.config.lm_head == "masked"
if fill:
    st.subheader("Fill the [MASK]")
n_words = n_words_of(run.lm)

# Widget values: remembered across pages, seeded from a shared link, made valid by tfm.sampling.
ss = st.session_state
links.restore(*KEYS)
links.url_init("next.temperature", "t", float)
links.url_init("next.top_k", "top_k", int)
links.url_init("next.top_p", "top_p", float)
raw = (ss.get("next.temperature", 1.0), ss.get("next.top_k", 0), ss.get("next.top_p", 1.0))
try:
    s0 = usable_settings(*raw, n_words)
except ValueError:
    s0 = SamplingSettings()
ss["next.temperature"], ss["next.top_k"], ss["next.top_p"] = sampling_figs.nearest_temperature(s0.temperature), s0.top_k, s0.top_p
moved = [f"{name} {plain(r)} → {v:g}" for name, r, v in zip(("temperature", "top-k", "top-p"), raw,
                                                            (ss["next.temperature"], ss["next.top_k"], ss["next.top_p"]))
         if not same_number(r, v)]
if moved:
    st.info("Moved to what the controls offer: " + "; ".join(moved) + ".")
ss.setdefault("next.count", 20)

c1, c2, c3, c4 = st.columns([4, 2, 3, 2])
t = c1.select_slider("Temperature", sampling_figs.TEMPERATURES, format_func=sampling_figs.temperature_label,
                     **links.keep("next.temperature"),
                     help="Logits are divided by T before the softmax. T < 1 sharpens, T > 1 flattens; "
                          "T = 0 is greedy: always the most likely token.")
k = c2.number_input("Top-k (0 = off)", 0, n_words, step=1, **links.keep("next.top_k"),
                    help=f"Keep only the k most likely tokens (0 keeps all {n_words:,}).")
p = c3.slider("Top-p (1 = off)", 0.0, 1.0, step=0.01, **links.keep("next.top_p"),
              help="Keep the smallest set of most likely tokens whose probability adds up to p.")
count = c4.slider("Tokens shown", 5, 60, **links.keep("next.count"))
d = SamplingSettings()   # what a link without t, top_k, top_p shows
links.url_set(t=t, top_k=k, top_p=p,
              defaults=dict(t=sampling_figs.nearest_temperature(d.temperature), top_k=d.top_k, top_p=d.top_p))

try:  # the widgets cannot produce bad values, but settings from elsewhere are checked anyway
    settings = SamplingSettings(t, int(k), float(p))
    bd = next_token(run.trace.logits_at(at), settings, n_words)
except ValueError as e:
    st.error(f"These sampling settings cannot be used: {message(e)}")
    st.stop()

st.caption(("What the model puts in the first [MASK] (it reads the whole prompt, both sides). " if fill else
            "What the model predicts after the last prompt token. ") + f"Temperature, then top-k, then top-p "
           f"(the Hugging Face order), over all {n_words:,} tokens of the vocabulary.")
if settings.greedy:
    st.info("T = 0 means **greedy** decoding: the most likely token is always chosen, so top-k "
            "and top-p have nothing to do and every run gives the same text.")

m = st.columns(5)
m[0].metric(f"Tokens kept (of {n_words:,})", f"{int(bd.n_kept):,}")
m[1].metric("Mass removed by top-k", f"{float(bd.mass_removed_top_k):.2%}",
            help="Probability (after temperature) of the tokens top-k cut.")
m[2].metric("Mass removed by top-p", f"{float(bd.mass_removed_top_p):.2%}",
            help="Probability (after temperature) of the tokens top-p cut from what top-k kept.")
m[3].metric("Entropy before", f"{float(bd.entropy_before):.3f} nats",
            help="Uncertainty of the model's own distribution (T = 1, nothing cut).")
m[4].metric("Entropy after", f"{float(bd.entropy_after) + 0.0:.3f} nats",  # + 0.0: no "-0.000"
            help=f"Uncertainty of the distribution actually sampled from; e^entropy ≈ "
                 f"{math.exp(float(bd.entropy_after)):,.1f} equally likely choices.")

ids = sampling_figs.shown_ids(bd.logits, count)
context = sampling_figs.esc("".join(tok.display_pieces(run.ids[max(at - 5, 0):at + 1])))  # as the model sees it
title = (f"Next-token probabilities: top {len(ids)} of {n_words:,} tokens (T = {sampling_figs.temperature_label(t)}, "
         f"top-k = {k or 'off'}, top-p = {p:g})")
fig = sampling_figs.next_token_figure(bd, ids, tok.display_pieces(ids), title,
                           xtitle=(f"token for the [MASK] in “…{context}”" if fill else f"next token after “…{context}”")
                           + " (most likely first)")
charts.show(fig, key="next.chart", config={"displaylogo": False})
st.caption("Filled bars: probability after temperature, coloured by what happens to the token. "
           "Black outlines: the model's own probability (T = 1). Diamonds: the probability it is "
           "actually sampled with, renormalised over the kept tokens. Purple line (right axis): "
           "running total that top-p compares with p. The small panel on the right sums every token not shown.")
