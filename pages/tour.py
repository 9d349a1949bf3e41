"""Tour: one forward pass, step by step, with the running model's real numbers.

The steps come from `tfm.teach.tour.tour` (computed from the cached trace of the sidebar's prompt);
this page picks a position, block and head, shows one step at a time, asks the step's
question, and switches to large type for a projector (presentation mode, `?present=1`).
"""
import streamlit as st

from tfm.teach.checks import grade
from tfm.generation.sampling import SamplingSettings
from tfm.teach.tour import Focus, tour
from tfm.core.escape import escape_markdown
from tfm.viz import tour as tour_figs
from tfm.viz.attention import plotly_text
from ui import charts, links, sidebar
from ui.run import current_run
from ui.text import message, plain

ss = st.session_state
sidebar.render()
run = current_run()
cfg, n = run.lm.config, len(run.ids)

# Settings from a shared link first, clamped to this model and prompt.
links.restore("tour.pos", "tour.layer", "tour.head", "tour.step", "next.temperature", "next.top_k", "next.top_p")
links.url_init("tour.present", "present", lambda v: v in ("1", "true", "True"))
links.url_init("tour.step", "step")
for key, param in (("tour.pos", "pos"), ("tour.layer", "layer"), ("tour.head", "head")):
    links.url_init(key, param, int)
for key, top, default, what in (("tour.pos", n - 1, n - 1, "Position"), ("tour.layer", cfg.n_layer - 1, 0, "Block"),
                                ("tour.head", cfg.n_head - 1, 0, "Head")):
    links.clamp_int(key, 0, top, default, what)

present = st.toggle("Presentation mode", key="tour.present",
                    help="Large type, no sidebar, one step per screen. ← and → move between steps.")
st.markdown(tour_figs.TABLE_CSS + (tour_figs.PRESENT_CSS if present else ""), unsafe_allow_html=True)
if not present:
    st.title("A tour of one forward pass")
    st.caption("From text to the next token, with the real numbers of the model in the sidebar. "
               "Pick the token to follow, and which block and head to open up.")
box = st.expander("Token, block and head", expanded=not present)
c1, c2, c3 = box.columns(3)
pos = c1.selectbox("Follow the token at", range(n), format_func=lambda i: run.labels[i], **links.keep("tour.pos"))
layer = c2.selectbox("Block", range(cfg.n_layer), **links.keep("tour.layer"))
head = c3.selectbox("Head", range(cfg.n_head), **links.keep("tour.head"))

try:
    settings = SamplingSettings(ss.get("next.temperature", 1.0), int(ss.get("next.top_k", 0)),
                                float(ss.get("next.top_p", 1.0)))
except (TypeError, ValueError) as e:
    st.error(f"The sampling settings from the Next-token page cannot be used: {message(e)}")
    st.stop()
steps = tour(run.lm, run.trace, run.ids, run.labels, Focus(pos, layer, head), settings, int(ss["sidebar.seed"]))
keys = [s.key for s in steps]
if ss.get("tour.step") not in keys:
    if "tour.step" in ss:
        st.warning(f"There is no step {plain(repr(ss['tour.step']))}; starting at the first.")
    ss["tour.step"] = keys[0]


def move(delta: int) -> None:
    """Button callback: go to the previous or next step (runs before the widgets are drawn)."""
    i = keys.index(ss["tour.step"])
    ss["tour.step"] = keys[min(max(i + delta, 0), len(keys) - 1)]
    links.remember("tour.step")


i = keys.index(ss["tour.step"])
b1, b2, b3 = st.columns([1, 4, 1], vertical_alignment="bottom")
b1.button("◀ Previous", key="tour.prev", on_click=move, args=(-1,), shortcut="Left", disabled=i == 0,
          use_container_width=True)
b2.selectbox("Step", keys, format_func=lambda k: f"{keys.index(k) + 1} / {len(keys)} · {steps[keys.index(k)].title}",
             **links.keep("tour.step"), label_visibility="collapsed")
b3.button("Next ▶", key="tour.next", on_click=move, args=(1,), shortcut="Right", disabled=i == len(keys) - 1,
          use_container_width=True)
links.url_set(step=ss["tour.step"], pos=pos, layer=layer, head=head, present=int(present),
              defaults=dict(step=keys[0], pos=n - 1, layer=0, head=0, present=0))   # what a bare link opens

step = steps[keys.index(ss["tour.step"])]
st.header(step.title)
st.latex(step.formula_latex)
st.markdown(escape_markdown(step.text))
for name, shown in step.tensors.items():
    st.markdown(tour_figs.describe(name, shown))
    st.table(tour_figs.formatted(tour_figs.table(shown)))
if step.chart is not None:
    charts.show(tour_figs.bar_figure(step.chart, f"{step.title} · {plotly_text(run.labels[pos])}", tour_figs.CHART_AXIS.get(step.key, "value")),
                "tour-" + step.key, {"pos": pos, "layer": layer, "head": head})
if step.check is not None:
    chk = step.check
    with st.form(f"tour.form.{step.key}"):
        st.markdown("**Check:** " + escape_markdown(chk.question))
        choice = st.radio("Your answer", range(len(chk.options)), format_func=lambda j: escape_markdown(chk.options[j]),
                          index=None, key=f"tour.answer.{step.key}")
        if st.form_submit_button("Check my answer") and choice is not None:
            ss[f"tour.graded.{step.key}"] = (chk.question, choice)
    graded = ss.get(f"tour.graded.{step.key}")
    if graded and graded[0] == chk.question:  # a graded answer belongs to this question only
        right = grade(chk, graded[1])
        (st.success if right else st.error)(escape_markdown(
            ("Right. " if right else f"Not this time: the answer is {chk.options[chk.answer]}. ") + chk.explanation))
st.page_link(step.deeper_page, label="Go deeper on this step", icon="🔎")
