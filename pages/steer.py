"""Steer: add a direction to the residual stream (from a pair of prompts or an SAE feature) and
watch the text change; the shared model is never changed (a per-call tfm.core.edits.Steer). The
page opens where a measurement on the running model says steering works
(`tfm.analysis.steering.calibrate.calibrate`, once per model), whatever the model is."""

import numpy as np
import streamlit as st

from tfm.viz import steer as steer_figs
from tfm.viz.attention import plotly_text
from ui import charts, needs, sidebar, steer_controls
from ui.model_run import ModelRun, active_model
from ui.steer_run import Direction
from ui.steer_controls import MAX_STRENGTH, SWEEP_POINTS
from ui.text import escape_markdown, message
from ui.text import plain as shown
from ui.views.steer import SteerView


def direction_caption(run: ModelRun, vec, strength: float) -> None:
    typical = run.stream_norms()[vec.layer]
    st.caption(
        f"Direction: {shown(vec.source, 200)}; read, it was {vec.raw_length:.3f} long, "
        f"{vec.raw_length / typical:.2f}× the stream's typical length entering layer {vec.layer} "
        f"({typical:.3f}: the median over a neutral text's tokens, position 0 left out). Steering adds "
        f"{strength:+.2f} × {float(vec.vector.norm()):.3f}."
    )


def why_here(run: ModelRun) -> None:
    """What the calibration measured on this model, in an expander."""
    cal = steer_controls.calibration(run)
    if cal is None:
        return
    with st.expander(f"Why layer {cal.layer}, strength {cal.strength:g} and this prompt: measured on this model"):
        if not cal.moves:
            st.warning("No layer tried moved both moods while keeping the text fluent: these are the best found.")
        st.markdown(
            f"Each layer tried got the strength at which steering costs {steer_controls.MAX_DAMAGE} nats per "
            "token of ordinary text; three short texts toward and away on each prompt then counted the mood "
            "words."
        )
        st.dataframe(
            [
                {
                    "prompt": t.prompt,
                    "layer": t.layer,
                    "strength": t.strength,
                    "damage": round(t.damage, 3),
                    "pull +": round(t.pull_toward, 2),
                    "pull −": round(t.pull_away, 2),
                    "words +": t.toward,
                    "words −": t.away,
                    "plain (+, −)": str(t.plain),
                    "fluent": t.fluent,
                }
                for t in cal.trials
            ]
        )


def texts(run: ModelRun, view: SteerView, direction: Direction, seed: int) -> None:
    """The continuation without and with steering, then the direction read through the unembedding."""
    tok = run.lm.tokenizer
    try:
        pair = run.steered_texts(
            direction, view.prompt, view.strength, seed, view.new, view.temperature, view.where, view.first
        )
    except ValueError as e:
        st.error(f"Cannot generate: {message(e)}")
        st.stop()
    left, right = st.columns(2)
    for col, title, text in (
        (left, "Without steering", pair.plain),
        (right, f"Steered (strength {view.strength:+.2f})", pair.steered),
    ):
        col.subheader(title)
        col.markdown(escape_markdown(text).replace("\n", "  \n") or "*(nothing)*")
    r = steer_controls.read_out(run, direction, 10)
    charts.show(
        steer_figs.read_out_figure(
            tok.display_piece,
            r,
            "The direction read through the unembedding: tokens it promotes (+) and suppresses (−)",
        ),
        key="steer.readout",
    )


def sweep(run: ModelRun, view: SteerView, direction: Direction) -> None:
    """p(each word to follow) after the prompt as the strength sweeps."""
    tok = run.lm.tokenizer
    try:
        tokens = steer_controls.mood_tokens(run, view.words)
    except ValueError as e:
        st.warning(message(e))
        st.stop()
    strengths = np.linspace(-MAX_STRENGTH, MAX_STRENGTH, SWEEP_POINTS).round(6).tolist()
    ids = steer_controls.prompt_ids(run, view.prompt)
    found = run.mood_sweep(direction, ids, tuple(tokens), tuple(strengths), view.first)
    charts.show(
        steer_figs.mood_sweep(
            found.strengths,
            found.probs,
            [tok.display_piece(t) for t in tokens],
            view.strength,
            f"p(word) after {plotly_text(repr(view.prompt[:60]))}, steering the prompt "
            f"(one batched run of {SWEEP_POINTS} strengths)",
        ),
        key="steer.sweep",
    )


def main() -> None:
    shown_bar = sidebar.render()
    st.title("Steer")
    needs.next_token_head("Steering")
    st.caption(
        "Add a direction to the residual stream entering one block, at every chosen position, during "
        "generation: activation steering. The model is untouched; the same seed gives the same draws."
    )
    run = active_model()
    if run is None:
        st.stop()
    top, body, words_slot = st.container(), st.container(), st.container()
    with top:
        view = steer_controls.controls(run, words_slot)
    direction = steer_controls.direction(run, view)
    with body:
        direction_caption(run, direction.vector, view.strength)
        why_here(run)
        texts(run, view, direction, shown_bar.seed)
    sweep(run, view, direction)


main()
