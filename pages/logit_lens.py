"""Logit lens: read the residual stream after every layer through the final norm and the
unembedding, as if that layer were the last: what would the model predict at that depth? The
tuned lens (a trained affine map per layer first, where the model ships one) reads it better."""

import streamlit as st

from tfm.viz import lens as lens_figs
from tfm.viz import sampling as sampling_figs
from ui import charts, examples, lens_parts, links, needs, sidebar
from ui.lens_parts import LENSES, TRAIN_COMMAND
from ui.run import PromptRun, current_run
from ui.text import message, plain
from ui.views.logit_lens import LensView

WIDTHS = (8, 16, 24, 32, 48, 64)


def settings(run: PromptRun, top, window) -> LensView:
    """The lens (in `top`, from the link and back into it) and the window of positions (in `window`)."""
    ss, n_pos = st.session_state, len(run.ids)
    links.restore("lens.kind", "lens.width", "lens.start")
    links.url_init("lens.kind", "lens", str)
    if ss.get("lens.kind", "logit") not in LENSES:  # links may hold anything
        top.warning(f"There is no lens {plain(repr(ss['lens.kind']))}; showing the logit lens.")
        ss["lens.kind"] = "logit"
    kind = top.radio(
        "Lens",
        LENSES,
        horizontal=True,
        **links.keep("lens.kind"),
        help="logit: every stream decoded as it is; tuned: through the layer's trained translator first.",
    )
    links.put("lens.width", min(WIDTHS, key=lambda w: abs(w - int(ss.get("lens.width", 32)))))
    width = window.select_slider(
        "Positions shown",
        WIDTHS,
        **links.keep("lens.width"),
        help="A window keeps long prompts readable; slide it with 'First position'.",
    )
    start = 0
    if n_pos > width:
        links.put("lens.start", min(max(int(ss.get("lens.start", n_pos - width)), 0), n_pos - width))
        start = window.slider("First position", 0, n_pos - width, **links.keep("lens.start", n_pos - width))
    view = LensView(kind, width, start)
    links.url_set(**view.link(), defaults=LensView("logit", width, start).link())
    return view


def tuned_lens(run: PromptRun):
    """The tuned lens the model ships, or None (saying why, and how to train one)."""
    try:
        tuned = run.tuned_lens()
    except ValueError as e:
        tuned = None
        st.error(f"This model's tuned lens cannot be read: {message(e)}")
    if tuned is None:
        st.info(
            "This model ships no tuned lens, so the page shows the logit lens only. Train one with "
            f"`{TRAIN_COMMAND}` (a rerun goes on where a stopped one left off; the bundled model and SmolLM2 ship "
            "theirs under assets/lens)."
        )
    return tuned


def lens_grid(run: PromptRun, view: LensView, tuned) -> None:
    use, n_pos = tuned if view.kind == "tuned" else None, len(run.ids)
    start, stop = view.start, min(n_pos, view.start + view.width)
    g = lens_parts.grid(run, start, stop, use)
    title = (
        f"{'Tuned' if use else 'Logit'} lens: top prediction after each layer, positions {start}–{stop - 1} of {n_pos}"
    )
    fig = sampling_figs.lens_grid_figure(
        g.top_prob,
        g.pieces,
        g.hover,
        g.rows,
        run.labels[start:stop],
        title,
        "position (input token); each cell predicts the token after it",
        bold=g.bold,
    )
    charts.show(fig, key="lens.chart", config={"displaylogo": False})


def fits_chart(run: PromptRun, tuned) -> None:
    fits = run.lens_fits(tuned)
    kl = {name: fit.mean_kl() for name, fit in fits.items()}
    agree = {name: fit.agreement() for name, fit in fits.items()}
    st.subheader("How close is each layer to the final prediction?")
    st.caption(
        "KL divergence from the model's final next-token distribution to each layer's reading (0: the same "
        "distribution), and how often the layer's top token is the final top token, averaged over "
        f"{lens_parts.fit_span(len(run.ids))} (position 0 is the attention sink: the tuned lens is not trained "
        "on it)."
    )
    fig = lens_figs.lens_fit_figure(
        kl, agree, fits["logit"].labels, "Each layer's reading against the final prediction"
    )
    charts.show(fig, key="lens.fits", config={"displaylogo": False})


def main() -> None:
    sidebar.render()
    st.title("Logit lens")
    needs.next_token_head("The logit lens")
    run = current_run()
    examples.offer("logit_lens", run)
    st.caption(
        "Each row decodes the residual stream after one layer (row 'embed': before any block) with the "
        "model's own final norm and unembedding (the **tuned** lens first maps each layer's stream with an "
        "affine translator trained for that layer, Belrose et al. 2023). Cell text: that layer's most likely "
        "next token; colour: its probability; **bold**: it is the token that really comes next in the prompt. "
        "Hover for the top 5."
    )
    top, notes, window = st.container(), st.container(), st.container()
    view = settings(run, top, window)
    with notes:
        tuned = tuned_lens(run)
    lens_grid(run, view, tuned)
    fits_chart(run, tuned)


main()
