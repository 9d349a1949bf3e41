"""Why this token? Which parts of the model wrote the prediction (direct logit attribution),
and what happens when they are switched off (ablation) or copied from another prompt (patching)."""
import numpy as np
import streamlit as st

from tfm.analysis import attribution
from tfm.core.escape import escape_markdown
from tfm.viz import why as why_figs
from ui import charts, examples, links, needs, sidebar, why_panels
from ui.run import current_run
from ui.why_panels import as_np
from ui.text import head_label, message, plain

TABS = ["Attribution", "Attribution vs ablation", "Intervene", "MLP neurons", "Activation patching",
        "Contribution graph", "SAE features"]
DEFAULTS = {"why.token": "", "why.versus": ""}


def pick_head(n_head: int) -> None:
    """A click on the head heatmap opens that head below (the selectbox is the fallback)."""
    points = st.session_state["why.heads_chart"].selection.get("points", [])
    if points:
        x, y = str(points[0].get("x", "")), str(points[0].get("y", ""))
        if x[1:].isdigit() and y[1:].isdigit() and int(x[1:]) < n_head:
            st.session_state["why.head"] = (int(y[1:]), int(x[1:]))


sidebar.render()
st.title("Why this token?")
needs.next_token_head("Why this token?")
run = current_run()
examples.offer("why", run)
cfg, tok, n_tok = run.lm.config, run.lm.tokenizer, len(run.ids)
words = attribution.n_words(run.lm)  # ids that are tokens (a padded vocabulary has more rows)
L, H = cfg.n_layer, cfg.n_head
URL = (("why.pos", "pos", int), ("why.token", "token", str), ("why.versus", "vs", str), ("why.tab", "tab", str),
       ("why.clean", "clean", str), ("why.corrupt", "corrupt", str), ("why.answer", "answer", str),
       ("why.wrong", "wrong", str))
for key, param, cast in URL:  # the patching prompts are cut (with a word) by their panel
    links.url_init(key, param, cast, None if param in ("clean", "corrupt") else links.LINK_VALUE_CHARS)
defaults = DEFAULTS.copy()   # what a link without them shows
if not all(k in st.session_state for k in why_panels.PAIR_KEYS):  # the patching example this model knows
    defaults |= why_panels.opening_pair(run)
for k, v in defaults.items():
    st.session_state.setdefault(k, v)
for key, what in (("why.token", "token to explain"), ("why.versus", "versus token")):
    links.cap_text(key, what, links.LINK_VALUE_CHARS)  # typed or pasted: one token is never this long
if st.session_state.get("why.tab") not in TABS:  # links may hold anything
    if "why.tab" in st.session_state:
        st.warning(f"There is no tab {plain(repr(st.session_state['why.tab']))}; showing {TABS[0]}.")
    st.session_state["why.tab"] = TABS[0]
ss = st.session_state
if ss.get("why.pos_ids") != run.ids:  # a new prompt (or model): explain its last position again
    if ss.get("why.pos_ids") is not None or "why.pos" not in ss:
        ss["why.pos"] = n_tok - 1
    ss["why.pos_ids"] = run.ids
links.clamp_int("why.pos", 0, n_tok - 1, n_tok - 1, "Position")  # links may hold any number

c1, c2, c3 = st.columns([2, 2, 2])
pos = c1.number_input("Position (the token after it is explained)", 0, n_tok - 1, key="why.pos")
token_text = c2.text_input("Explain token (empty: the top prediction)", key="why.token")
versus_text = c3.text_input("…versus token (optional: logit difference)", key="why.versus")
links.url_set(pos=pos, token=token_text, vs=versus_text, defaults=dict(pos=n_tok - 1, token="", vs=""))
try:
    token = attribution.token_id(tok, token_text, words) if token_text else None
    versus = attribution.token_id(tok, versus_text, words) if versus_text else None
    if why_panels.same_tokens(run, pos, token, versus):
        st.stop()
    attr = run.attribution(pos, token, versus)
except ValueError as e:
    st.error(message(e))
    st.stop()
piece = tok.display_piece(attr.token)
what = f"logit({piece!r})" + (f" − logit({tok.display_piece(attr.versus)!r})" if attr.versus is not None else "")
top_piece = tok.display_piece(int(run.trace.logits_at(pos)[:words].argmax()))
st.markdown(f"After **{escape_markdown(run.labels[pos])}** the model's top prediction is "
            f"**{escape_markdown(repr(top_piece))}**. Explaining {escape_markdown(what)} = **{attr.target:.4f}**.")
st.caption(f"Direct logit attribution: the stream before the final norm is a sum of what every part wrote; with "
           f"the final norm's scale frozen at its value here ({attr.scale:.4f}) each part's share, in logits, "
           f"adds up exactly to the number above (sum {float(attr.values.sum()):.4f}). Positive = pushes toward it.")
numbers = {"prompt_ids": list(run.ids), "position": pos, "token": piece, "target": attr.target,
           "components": list(attr.components), "values": attr.values.tolist()}

tabs = st.tabs(TABS, key="why.tab", on_change="rerun")  # only the open tab is computed
with tabs[0]:
    if tabs[0].open:
        charts.show(why_figs.contrib_bars(list(attr.components), as_np(attr.values), f"Top contributions to {what}"),
                    key="why.bars")
        charts.show(why_figs.head_heatmap(as_np(attr.heads), "Every head's direct contribution (click a cell)",
                                          clickable=True),
                    key="why.heads_chart", on_select=lambda: pick_head(H), selection_mode="points")
        options = [(l, h) for l in range(L) for h in range(H)]
        if st.session_state.get("why.head") not in options:
            st.session_state["why.head"] = tuple(int(i) for i in divmod(int(attr.heads.abs().argmax()), H))
        layer, head = st.selectbox("Head", options, format_func=lambda p: head_label(*p), key="why.head")
        src = as_np(attr.by_source(layer, head))
        charts.show(why_figs.source_bars(src, run.labels, f"{head_label(layer, head)}: its {float(attr.heads[layer, head]):.4f}"
                                         " logits, split over the positions it read"), key="why.sources")
        numbers["sources"] = {"layer": layer, "head": head, "values": src.tolist()}
        why_panels.induction_text(run)
with tabs[1]:
    if tabs[1].open:
        sweep = run.ablation_sweep(pos, attr.token, attr.versus)
        att = as_np(attr.heads).ravel().tolist() + as_np(attr.mlps).tolist()
        eff = as_np(sweep.head_effects).ravel().tolist() + as_np(sweep.mlp_effects).tolist()
        order = attribution.head_and_mlp_names(L, H)
        st.caption("Attribution is an estimate from one forward pass; ablation (zeroing the part, one per row of "
                   f"one batched run) measures what the logit really loses. Unedited: {sweep.base:.4f}.")
        charts.show(why_figs.estimate_vs_reality(order, np.array(att), np.array(eff),
                                                 "Estimate vs reality: attribution against ablation"), key="why.scatter")
        charts.show(why_figs.contrib_bars(order, np.array(att), "Top heads and MLPs: attribution beside ablation",
                                          np.array(eff)), key="why.bars_vs")
        charts.show(why_figs.head_heatmap(-as_np(sweep.head_effects), "Logit lost when each head is zero-ablated"),
                    key="why.ablation_heads")
        numbers["ablation"] = {"base": sweep.base, "components": order, "effects": eff}
with tabs[2]:
    if tabs[2].open:
        numbers.update(why_panels.ablate_panel(run, pos, attr.token, L, H))
with tabs[3]:
    if tabs[3].open:
        numbers.update(why_panels.neuron_panel(run, attr, pos, attr.token))
with tabs[4]:
    if tabs[4].open:
        numbers.update(why_panels.patch_panel(run, L))
with tabs[5]:
    if tabs[5].open:
        why_panels.graph_panel(run, pos)
with tabs[6]:
    if tabs[6].open:
        numbers.update(why_panels.feature_panel(run, attr, pos))
links.url_set(tab=st.session_state["why.tab"], defaults=dict(tab=TABS[0]))
why_panels.export(numbers)
