"""Induction head, live: train a 2-layer attention-only model here and watch the circuit form.

Training runs in `tfm.lessons.train` (bounded steps, one CPU thread); the finished run is
kept per (settings) in `ui.state`'s small shared store, so a class re-opening the page does
not train again.
"""
import streamlit as st

from tfm.lessons import MAX_STEPS, LessonSettings, probe_tokens, train
from ui import charts, fig_lessons as fl
from ui import sidebar, state

ss = st.session_state
sidebar.render()
st.title("Induction head, live")
st.markdown("A tiny transformer with **two layers of attention and nothing else** learns to continue random "
            "token sequences in which a segment appears twice. The only way to predict the second copy is to "
            "find the token's earlier occurrence and copy what came next. The textbook circuit for that is an "
            "**induction head** fed by a previous-token head; the charts show whether this model built it (its "
            "induction score) or found another way, and when the loss left its plateau.")

state.restore("lesson.seed", "lesson.steps")
ss.setdefault("lesson.seed", 0)
ss.setdefault("lesson.steps", LessonSettings().steps)
ss["lesson.steps"] = min(max(int(ss["lesson.steps"]), 100), MAX_STEPS)
c1, c2, c3 = st.columns([1, 2, 1], vertical_alignment="bottom")
seed = c1.number_input("Seed", 0, 2**31 - 1, **state.keep("lesson.seed"))
steps = c2.slider("Training steps", 100, MAX_STEPS, step=100, **state.keep("lesson.steps"))
go_now = c3.button("Train", type="primary", key="lesson.train", use_container_width=True)
settings = LessonSettings(seed=int(seed), steps=int(steps))
key = ("induction", settings)
res = state.finished(key)

if res is None and go_now:
    bar, live = st.progress(0.0, text="Training…"), st.empty()
    losses: list[float] = []

    def progress(step: int, loss: float, snap) -> None:
        losses.append(loss)
        if step % 25 == 0 or step == settings.steps:
            bar.progress(step / settings.steps, text=f"step {step} of {settings.steps}: loss {loss:.3f}")
            live.line_chart({"loss on the copied tokens": losses}, height=260, x_label="step", y_label="loss")

    res = train(settings, progress)
    state.keep_finished(key, res)
    bar.empty()
    live.empty()
if res is None:
    st.info(f"Press **Train**: {settings.steps} steps take well under a minute on one CPU core.")
    st.stop()

formed, dropped = res.formed_at(), res.dropped_at()
best = float(res.snapshots[-1].induction.max())
if formed is not None:
    step_f, layer_f, head_f = formed
    st.success(f"At step {step_f}, **layer {layer_f}, head {head_f}** became an induction head: its induction "
               f"score crossed {settings.threshold:g} and the loss on the copied tokens fell from "
               f"{res.losses[0]:.2f} to {res.losses[-1]:.2f} nats (trained in {res.seconds:.0f} s).")
elif dropped is not None:
    st.info(f"At step {dropped} the loss on the copied tokens halved (from {res.losses[0]:.2f} to "
            f"{res.losses[-1]:.2f} nats by the end): the model learned to copy from the first copy. No head's "
            f"induction score reached {settings.threshold:g} (best {best:.2f}): this model copies through heads "
            "that look a fixed distance back and combine in layer 1, not through the textbook pair. "
            "Scrub the patterns below to see how.")
else:
    st.warning(f"Neither the loss nor an induction score moved much in {settings.steps} steps (best score "
               f"{best:.2f}). Try more steps or another seed.")
run_settings = {"seed": settings.seed, "steps": settings.steps}
charts.show(fl.loss_figure(res.losses, formed[0] if formed else None, dropped, settings.steps), "induction-loss", run_settings)
charts.show(fl.score_figure(res), "induction-scores", run_settings)

st.subheader("Scrub through training: one head's attention on a repeated sequence")
top_layer, top_head = (formed[1], formed[2]) if formed else (res.snapshots[-1].induction.shape[0] - 1, 0)
n_layer, n_head = res.snapshots[0].induction.shape
h1, h2, h3 = st.columns([1, 1, 3])
layer = h1.selectbox("Layer", range(n_layer), index=top_layer, key="lesson.layer")
head = h2.selectbox("Head", range(n_head), index=top_head, key="lesson.head")
snap_steps = [s.step for s in res.snapshots]
at_step = h3.select_slider("Snapshot at step", snap_steps, value=snap_steps[-1], key="lesson.snap")
snap = res.snapshots[snap_steps.index(at_step)]
tokens = probe_tokens(settings).tolist()
labels = [f"{t} ·{i}" for i, t in enumerate(tokens)]
charts.show(fl.pattern_figure(snap.patterns[layer, head], labels,
                              f"Step {at_step}: layer {layer} head {head} (induction score "
                              f"{float(snap.induction[layer, head]):.2f})"),
            "induction-pattern", {**run_settings, "layer": layer, "head": head, "at": at_step})
st.caption(f"The probe is {len(tokens) // 2} random tokens written twice. An induction head's weight sits on the "
           "diagonal stripe one step right of the repeat: from each token of the second copy it looks at the token "
           "that followed the same token in the first copy. The layer-0 head that feeds it looks at the previous "
           "token (previous-token score {:.2f} at this step).".format(float(snap.previous[0].max())))
