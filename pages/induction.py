"""Induction head, live: train a 2-layer attention-only model here and watch the circuit form.

Training runs in `tfm.teach.lessons.train` (bounded steps, one CPU thread); the finished run is
kept per (settings) in `ui.cache`'s small shared store of finished runs, so a class re-opening the page does
not train again.
"""

import math

import streamlit as st

from tfm.viz import lessons as lesson_figs
from ui import cache, charts, lesson_parts, links, sidebar
from ui.lesson_parts import DEFAULT_STEPS, MAX_STEPS
from ui.views.induction import InductionView


INTRO = (
    "A tiny transformer with **two layers of attention and nothing else** learns to continue random "
    "token sequences in which a few tokens always come with the same partner right after them. The "
    "partner after a token's second appearance can only be predicted by finding its earlier appearance "
    "and copying what came next: an **induction head** in layer 1, fed by a **previous-token head** in "
    "layer 0. The charts show the loss on those partners and each head's induction score as it trains."
)


def settings() -> tuple[InductionView, bool]:
    """The view from the widgets, and whether Train was pressed."""
    ss = st.session_state
    links.restore("lesson.seed", "lesson.steps")
    ss.setdefault("lesson.seed", 0)
    ss.setdefault("lesson.steps", DEFAULT_STEPS)
    links.put("lesson.steps", min(max(int(ss["lesson.steps"]), 100), MAX_STEPS))
    c1, c2, c3 = st.columns([1, 2, 1], vertical_alignment="bottom")
    seed = c1.number_input("Seed", 0, 2**31 - 1, **links.keep("lesson.seed"))
    steps = c2.slider("Training steps", 100, MAX_STEPS, step=100, **links.keep("lesson.steps"))
    go_now = c3.button("Train", type="primary", key="lesson.train", use_container_width=True)
    return InductionView(int(seed), int(steps)), go_now


def trained(settings, go_now: bool):
    """The finished run of these settings (trained now, drawn live, when Train was pressed), else None."""
    res = cache.finished(settings)
    if res is None and go_now:
        bar, live = st.progress(0.0, text="Training…"), st.empty()
        losses: list[float] = []

        def progress(step: int, loss: float, snap) -> None:
            losses.append(loss)
            if step % 25 == 0 or step == settings.steps:
                bar.progress(step / settings.steps, text=f"step {step} of {settings.steps}: loss {loss:.3f}")
                live.line_chart({"loss on the copied tokens": losses}, height=260, x_label="step", y_label="loss")

        res = lesson_parts.train(settings, progress)
        cache.keep_finished(settings, res)
        bar.empty()
        live.empty()
    return res


def verdict(res, settings) -> None:
    """Did an induction head form, when, and how the loss moved."""
    formed, dropped, plateau = res.formed_at(), res.dropped_at(), res.plateau()
    best = float(res.snapshots[-1].induction.max())
    end_loss = sum(res.losses[-20:]) / len(res.losses[-20:])
    if formed is not None:
        step_f, layer_f, head_f = formed
        prev_head = int(res.snapshots[-1].previous[0].argmax())
        prev = float(res.snapshots[-1].previous[0, prev_head])
        flat = (
            f"The loss sat on a plateau near {plateau[1]:.2f} nats (chance: {math.log(settings.vocab):.2f}) until "
            f"step {plateau[0]}, then fell to {end_loss:.2f}; "
            if plateau
            else f"The loss fell to {end_loss:.2f}; "
        )
        st.success(
            flat + f"**layer {layer_f}, head {head_f}** became an induction head, its score crossing "
            f"{settings.threshold:g} at step {step_f} ({float(res.snapshots[0].induction[layer_f, head_f]):.2f} "
            f"at step 0, {float(res.snapshots[-1].induction[layer_f, head_f]):.2f} at the end), and layer 0 "
            f"head {prev_head}'s previous-token score reached {prev:.2f} (trained in {res.seconds:.0f} s)."
        )
    elif dropped is not None:
        st.info(
            f"At step {dropped} the loss on the graded tokens halved (to {end_loss:.2f} nats by the end), but no "
            f"head's induction score reached {settings.threshold:g} (best {best:.2f}): the model predicts them "
            "some other way. Scrub the patterns below to see how, or train longer."
        )
    else:
        st.warning(
            f"Neither the loss nor an induction score moved much in {settings.steps} steps (best score "
            f"{best:.2f}): the model is still on its plateau. Try more steps or another seed."
        )


def scrub(res, settings, run_settings: dict) -> None:
    """One head's attention on the repeated probe at a chosen snapshot."""
    formed = res.formed_at()
    st.subheader("Scrub through training: one head's attention on a repeated sequence")
    top_layer, top_head = (formed[1], formed[2]) if formed else (res.snapshots[-1].induction.shape[0] - 1, 0)
    n_layer, n_head = res.snapshots[0].induction.shape
    h1, h2, h3 = st.columns([1, 1, 3])
    layer = h1.selectbox("Layer", range(n_layer), index=top_layer, key="lesson.layer")
    head = h2.selectbox("Head", range(n_head), index=top_head, key="lesson.head")
    snap_steps = [s.step for s in res.snapshots]
    at_step = h3.select_slider("Snapshot at step", snap_steps, value=snap_steps[-1], key="lesson.snap")
    snap = res.snapshots[snap_steps.index(at_step)]
    labels = lesson_parts.probe_labels(settings)
    charts.show(
        lesson_figs.pattern_figure(
            snap.patterns[layer, head],
            labels,
            f"Step {at_step}: layer {layer} head {head} (induction score {float(snap.induction[layer, head]):.2f})",
        ),
        "induction-pattern",
        {**run_settings, "layer": layer, "head": head, "at": at_step},
    )
    st.caption(
        f"The probe is {len(labels) // 2} distinct random tokens written twice. An induction head's weight "
        "sits on the diagonal stripe one step right of the repeat: from each token of the second copy it looks "
        "at the token that followed the same token in the first copy; its induction score is the mean weight "
        "on that stripe. The layer-0 head that feeds it looks at the previous token (best previous-token score "
        f"{float(snap.previous[0].max()):.2f} at this step)."
    )


def main() -> None:
    sidebar.render()
    st.title("Induction head, live")
    st.markdown(INTRO)
    view, go_now = settings()
    lesson = lesson_parts.lesson(view)
    res = trained(lesson, go_now)
    if res is None:
        st.info(
            f"Press **Train**: {lesson.steps} steps take roughly {max(1, round(lesson.steps / 60))} s on one CPU core."
        )
        st.stop()
    verdict(res, lesson)
    formed, run_settings = res.formed_at(), {"seed": lesson.seed, "steps": lesson.steps}
    charts.show(
        lesson_figs.loss_figure(res.losses, formed[0] if formed else None, res.plateau(), lesson.steps),
        "induction-loss",
        run_settings,
    )
    charts.show(lesson_figs.score_figure(res), "induction-scores", run_settings)
    scrub(res, lesson, run_settings)


main()
