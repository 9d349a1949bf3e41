"""Why this token? Which parts of the model wrote the prediction (direct logit attribution),
and what happens when they are switched off (ablation) or copied from another prompt (patching)."""

import numpy as np
import streamlit as st

from tfm.viz import why as why_figs
from ui import charts, examples, links, needs, patch_panel, sidebar, why_panels
from ui.run import PromptRun, current_run
from ui.text import escape_markdown, head_label, message, plain
from ui.views.why import TABS, WhyView
from ui.why_panels import as_np

DEFAULTS = {"why.token": "", "why.versus": ""}
URL = (
    ("why.pos", "pos", int),
    ("why.token", "token", str),
    ("why.versus", "vs", str),
    ("why.tab", "tab", str),
    ("why.clean", "clean", str),
    ("why.corrupt", "corrupt", str),
    ("why.answer", "answer", str),
    ("why.wrong", "wrong", str),
)


def pick_head(n_head: int) -> None:
    """A click on the head heatmap opens that head below (the selectbox is the fallback)."""
    points = st.session_state["why.heads_chart"].selection.get("points", [])
    if points:
        x, y = str(points[0].get("x", "")), str(points[0].get("y", ""))
        if x[1:].isdigit() and y[1:].isdigit() and int(x[1:]) < n_head:
            st.session_state["why.head"] = (int(y[1:]), int(x[1:]))


def settings(run: PromptRun) -> WhyView:
    """The view from the link and the widgets: position (reset to the last on a new prompt), tokens, tab."""
    n_tok, ss = len(run.ids), st.session_state
    for key, param, cast in URL:  # the patching prompts are cut (with a word) by their panel
        links.url_init(key, param, cast, None if param in ("clean", "corrupt") else links.LINK_VALUE_CHARS)
    defaults = DEFAULTS.copy()  # what a link without them shows
    if not all(k in ss for k in patch_panel.PAIR_KEYS):  # the patching example this model knows
        defaults |= patch_panel.opening_pair(run)
    for k, v in defaults.items():
        ss.setdefault(k, v)
    for key, what in (("why.token", "token to explain"), ("why.versus", "versus token")):
        links.cap_text(key, what, links.LINK_VALUE_CHARS)  # typed or pasted: one token is never this long
    if ss.get("why.tab") not in TABS:  # links may hold anything
        if "why.tab" in ss:
            st.warning(f"There is no tab {plain(repr(ss['why.tab']))}; showing {TABS[0]}.")
        ss["why.tab"] = TABS[0]
    if ss.get("why.pos_ids") != run.ids:  # a new prompt (or model): explain its last position again
        if ss.get("why.pos_ids") is not None or "why.pos" not in ss:
            ss["why.pos"] = n_tok - 1
        ss["why.pos_ids"] = run.ids
    links.clamp_int("why.pos", 0, n_tok - 1, n_tok - 1, "Position")  # links may hold any number
    c1, c2, c3 = st.columns([2, 2, 2])
    pos = c1.number_input("Position (the token after it is explained)", 0, n_tok - 1, key="why.pos")
    token_text = c2.text_input("Explain token (empty: the top prediction)", key="why.token")
    versus_text = c3.text_input("…versus token (optional: logit difference)", key="why.versus")
    return WhyView(pos, token_text, versus_text, ss["why.tab"])


def explained(run: PromptRun, view: WhyView):
    """The direct attribution the view asks for; a bad token shows why and stops the page."""
    try:
        token, versus = run.token_id(view.token), run.token_id(view.versus)
        if why_panels.same_tokens(run, view.pos, token, versus):
            st.stop()
        return run.attribution(view.pos, token, versus)
    except ValueError as e:
        st.error(message(e))
        st.stop()


def headline(run: PromptRun, view: WhyView, attr) -> tuple[str, dict]:
    """What is explained, said above the tabs; returns it and the numbers to download."""
    tok, pos = run.lm.tokenizer, view.pos
    piece = tok.display_piece(attr.token)
    what = f"logit({piece!r})" + (f" − logit({tok.display_piece(attr.versus)!r})" if attr.versus is not None else "")
    top_piece = tok.display_piece(run.top_token(pos))
    st.markdown(
        f"After **{escape_markdown(run.labels[pos])}** the model's top prediction is "
        f"**{escape_markdown(repr(top_piece))}**. Explaining {escape_markdown(what)} = **{attr.target:.4f}**."
    )
    st.caption(
        f"Direct logit attribution: the stream before the final norm is a sum of what every part wrote; with "
        f"the final norm's scale frozen at its value here ({attr.scale:.4f}) each part's share, in logits, "
        f"adds up exactly to the number above (sum {float(attr.values.sum()):.4f}). Positive = pushes toward it."
    )
    return what, {
        "prompt_ids": list(run.ids),
        "position": pos,
        "token": piece,
        "target": attr.target,
        "components": list(attr.components),
        "values": attr.values.tolist(),
    }


def attribution_tab(run: PromptRun, attr, what: str, numbers: dict) -> None:
    L, H = run.lm.config.n_layer, run.lm.config.n_head
    charts.show(
        why_figs.contrib_bars(list(attr.components), as_np(attr.values), f"Top contributions to {what}"), key="why.bars"
    )
    charts.show(
        why_figs.head_heatmap(as_np(attr.heads), "Every head's direct contribution (click a cell)", clickable=True),
        key="why.heads_chart",
        on_select=lambda: pick_head(H),
        selection_mode="points",
    )
    options = [(l, h) for l in range(L) for h in range(H)]
    if st.session_state.get("why.head") not in options:
        st.session_state["why.head"] = attr.strongest_head()
    layer, head = st.selectbox("Head", options, format_func=lambda p: head_label(*p), key="why.head")
    src = as_np(attr.by_source(layer, head))
    charts.show(
        why_figs.source_bars(
            src,
            run.labels,
            f"{head_label(layer, head)}: its {float(attr.heads[layer, head]):.4f}"
            " logits, split over the positions it read",
        ),
        key="why.sources",
    )
    numbers["sources"] = {"layer": layer, "head": head, "values": src.tolist()}
    why_panels.induction_text(run)


def ablation_tab(run: PromptRun, view: WhyView, attr, numbers: dict) -> None:
    sweep = run.ablation_sweep(view.pos, attr.token, attr.versus)
    both = run.versus_ablation(attr, sweep)
    att, eff, order = np.array(both.estimate), np.array(both.effect), list(both.names)
    st.caption(
        "Attribution is an estimate from one forward pass; ablation (zeroing the part, one per row of "
        f"one batched run) measures what the logit really loses. Unedited: {sweep.base:.4f}."
    )
    charts.show(
        why_figs.estimate_vs_reality(order, att, eff, "Estimate vs reality: attribution against ablation"),
        key="why.scatter",
    )
    charts.show(
        why_figs.contrib_bars(order, att, "Top heads and MLPs: attribution beside ablation", eff), key="why.bars_vs"
    )
    charts.show(
        why_figs.head_heatmap(-as_np(sweep.head_effects), "Logit lost when each head is zero-ablated"),
        key="why.ablation_heads",
    )
    numbers["ablation"] = {"base": sweep.base, "components": order, "effects": list(both.effect)}


def main() -> None:
    sidebar.render()
    st.title("Why this token?")
    needs.next_token_head("Why this token?")
    run = current_run()
    examples.offer("why", run)
    view = settings(run)
    links.url_set(pos=view.pos, token=view.token, vs=view.versus, defaults=dict(pos=len(run.ids) - 1, token="", vs=""))
    attr = explained(run, view)
    what, numbers = headline(run, view, attr)
    L, H, pos = run.lm.config.n_layer, run.lm.config.n_head, view.pos
    panels = (
        lambda: attribution_tab(run, attr, what, numbers),
        lambda: ablation_tab(run, view, attr, numbers),
        lambda: numbers.update(why_panels.ablate_panel(run, pos, attr.token, L, H)),
        lambda: numbers.update(why_panels.neuron_panel(run, attr, pos, attr.token)),
        lambda: numbers.update(patch_panel.patch_panel(run, L)),
        lambda: why_panels.graph_panel(run, pos),
        lambda: numbers.update(why_panels.feature_panel(run, attr, pos)),
    )
    tabs = st.tabs(list(TABS), key="why.tab", on_change="rerun")  # only the open tab is computed
    for tab, panel in zip(tabs, panels):
        with tab:
            if tab.open:
                panel()
    links.url_set(tab=st.session_state["why.tab"], defaults=dict(tab=TABS[0]))
    why_panels.export(numbers)


main()
