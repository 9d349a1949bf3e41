"""Tour: one forward pass, step by step, with the running model's real numbers.

The steps come from `tfm.teach.tour.tour` (computed from the cached trace of the sidebar's prompt);
this page picks a position, block and head, shows one step at a time, asks the step's
question, and switches to large type for a projector (presentation mode, `?present=1`).
"""

import streamlit as st

from tfm.viz import tour as tour_figs
from tfm.viz.attention import plotly_text
from ui import charts, sidebar, tour_parts
from ui.run import current_run
from ui.text import escape_markdown
from ui.views.tour import TourView


def check(step) -> None:
    """The step's question in a form, graded once answered."""
    ss, chk = st.session_state, step.check
    with st.form(f"tour.form.{step.key}"):
        st.markdown("**Check:** " + escape_markdown(chk.question))
        choice = st.radio(
            "Your answer",
            range(len(chk.options)),
            format_func=lambda j: escape_markdown(chk.options[j]),
            index=None,
            key=f"tour.answer.{step.key}",
        )
        if st.form_submit_button("Check my answer") and choice is not None:
            ss[f"tour.graded.{step.key}"] = (chk.question, choice)
    graded = ss.get(f"tour.graded.{step.key}")
    if graded and graded[0] == chk.question:  # a graded answer belongs to this question only
        right = tour_parts.grade(chk, graded[1])
        (st.success if right else st.error)(
            escape_markdown(
                ("Right. " if right else f"Not this time: the answer is {chk.options[chk.answer]}. ") + chk.explanation
            )
        )


def draw(view: TourView, step, labels: list[str]) -> None:
    """One step: its formula, text, tensors, chart and check, and a link to the page that goes deeper."""
    st.header(step.title)
    st.latex(step.formula_latex)
    st.markdown(escape_markdown(step.text))
    for name, shown in step.tensors.items():
        st.markdown(tour_figs.describe(name, shown))
        st.table(tour_figs.formatted(tour_figs.table(shown)))
    if step.chart is not None:
        charts.show(
            tour_figs.bar_figure(
                step.chart,
                f"{step.title} · {plotly_text(labels[view.pos])}",
                tour_figs.CHART_AXIS.get(step.key, "value"),
            ),
            "tour-" + step.key,
            {"pos": view.pos, "layer": view.layer, "head": view.head},
        )
    if step.check is not None:
        check(step)
    st.page_link(step.deeper_page, label="Go deeper on this step", icon="🔎")


def main() -> None:
    shown = sidebar.render()
    run = current_run()
    view, steps = tour_parts.controls(run, shown.seed)
    draw(view, next(s for s in steps if s.key == view.step), run.labels)


main()
