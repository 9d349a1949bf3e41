"""Encoder-decoder, trained live: a small 2017-style Transformer learns a toy task in the browser."""

import streamlit as st

from tfm.viz import encdec as encdec_figs
from ui import charts, encdec_parts, links, sidebar
from ui.encdec_parts import RESULT, TASKS
from ui.text import message
from ui.views.encdec import EncDecView


def settings() -> tuple[EncDecView, bool]:
    """The view from the widgets, and whether Train was pressed."""
    ss = st.session_state
    links.restore("encdec.task", "encdec.steps", "encdec.layer", "encdec.head", "encdec.input")
    ss.setdefault("encdec.steps", 400)
    max_steps = encdec_parts.max_steps()
    links.put("encdec.steps", min(int(ss["encdec.steps"]), max_steps))
    c1, c2, c3 = st.columns([3, 2, 2], vertical_alignment="bottom")
    task = c1.selectbox("Task", list(TASKS), format_func=lambda t: f"{t}: {TASKS[t]}", **links.keep("encdec.task"))
    steps = int(
        c2.number_input(
            "Training steps",
            10,
            max(10, max_steps),
            step=50,
            **links.keep("encdec.steps"),
            help="Batches of 64 random examples; about 400 steps solve reversal.",
        )
    )
    train_clicked = c3.button("Train a fresh model", key="encdec.train", type="primary")
    return EncDecView(task, steps), train_clicked


def train(view: EncDecView) -> None:
    try:  # the widget's bounds are the browser's; the server checks again
        st.session_state[RESULT] = encdec_parts.train(view)
    except ValueError as e:
        st.error(f"Not trained: {message(e)}.")
        st.stop()


def save_or_load() -> None:
    ss = st.session_state
    with st.expander("Save or load a trained model"):
        res = ss.get(RESULT)
        if res is not None:
            st.download_button(
                "Download this model (.zip: config.json + model.safetensors)",
                encdec_parts.to_zip(res),
                file_name=f"encdec-{res['spec'].task}.zip",
                mime="application/zip",
                key="encdec.download",
            )
        upload = st.file_uploader("Load a downloaded .zip", type=["zip"], key="encdec.upload")
        folder = st.text_input(
            "…or a model folder on the server (config.json + model.safetensors)", key="encdec.folder"
        )
        try:
            if upload is not None and ss.get("encdec.loaded_upload") != upload.file_id:
                ss["encdec.loaded_upload"] = upload.file_id
                ss[RESULT] = encdec_parts.load_zip(upload.getvalue())
            if st.button("Load folder", key="encdec.load", disabled=not folder.strip()):
                ss[RESULT] = encdec_parts.load_folder(folder)
        except (ValueError, FileNotFoundError, OSError) as e:
            st.error(f"Could not load that model: {message(e)}")


def summary(res: dict) -> None:
    spec, model, cfg = res["spec"], res["model"], res["model"].config
    how = (
        f"trained {len(res['losses'])} steps in {res['seconds']:.1f} s" if res["losses"] else "loaded from a saved copy"
    )
    st.success(
        f"**{spec.task}** model ({model.num_params():,} parameters: {cfg.n_enc_layer} encoder + "
        f"{cfg.n_dec_layer} decoder layers, d_model {cfg.d_model}, {cfg.n_head} heads) {how}: "
        f"exact-match accuracy **{res['accuracy']:.1%}** on 500 fresh examples."
    )
    if res["losses"]:
        charts.show(encdec_figs.loss_figure(res["losses"]), key="encdec.loss")


def try_it(res: dict) -> tuple[int, int]:
    """Typed digits through the model, and one decoder layer's cross-attention; returns (layer, head)."""
    spec, cfg, ss = res["spec"], res["model"].config, st.session_state
    st.subheader("Try it, and see where the decoder looks")
    ss.setdefault("encdec.input", encdec_parts.probe_text(spec))
    text = st.text_input(
        f"Digits ({spec.min_len}-{spec.max_len} were trained; 1-{spec.max_len} fit)", **links.keep("encdec.input")
    )
    try:
        ans = encdec_parts.answer(res, text)
    except ValueError as e:
        st.error(f"{message(e)}. Type 1 to {spec.max_len} digits.")
        st.stop()
    st.markdown(
        f"Model's answer: **{ans.answer or '(empty)'}** · correct: **{ans.right}** · "
        f"{':green[**right**]' if ans.answer == ans.right else ':red[**wrong**]'}"
    )
    for key, n in (("encdec.layer", cfg.n_dec_layer), ("encdec.head", cfg.n_head)):
        if ss.get(key, 0) >= n:  # a loaded model may be smaller than the last one
            ss[key] = 0
    cl, ch = st.columns(2)
    layer = cl.selectbox("Decoder layer", range(cfg.n_dec_layer), **links.keep("encdec.layer"))
    head = ch.selectbox("Head (for the close-up and the replay)", range(cfg.n_head), **links.keep("encdec.head"))
    charts.show(
        encdec_figs.cross_attention_grid(
            ans.cross(layer),
            ans.src_labels,
            ans.tgt_labels,
            f"Cross-attention, decoder layer {layer}: each output (row) over the source digits",
        ),
        key="encdec.grid",
    )
    st.caption(
        "Rows are the decoder's steps (labelled with the token each step wrote); columns are source "
        "positions, – marks padding, which gets exactly 0. For reversal, look for the anti-diagonal."
    )
    return layer, head


def replay(res: dict, layer: int, head: int) -> None:
    """The fixed example's cross-attention at each training snapshot."""
    snaps = res["snapshots"]
    if not snaps:
        return
    st.subheader("Replay: how the alignment formed")
    n_out, p_src, p_tgt = encdec_parts.probe_labels(res["spec"])
    steps_taken = [s.step for s in snaps]
    if st.session_state.get("encdec.snapshot") not in steps_taken:
        st.session_state["encdec.snapshot"] = steps_taken[-1]
    step = st.select_slider("Training step", steps_taken, key="encdec.snapshot")
    snap = next(s for s in snaps if s.step == step)
    charts.show(
        encdec_figs.head_heatmap(
            snap.cross[layer, head, :n_out].numpy(),
            p_src,
            p_tgt,
            f"Step {step}: layer {layer} head {head} on the fixed example (answer then: {snap.answer or '(empty)'})",
        ),
        key="encdec.replay",
    )
    st.caption("The fixed example is fed the correct answer (teacher forcing), as in training.")


def main() -> None:
    sidebar.render()
    st.title("The 2017 Transformer: encoder-decoder, trained live")
    st.markdown(
        "The **encoder** reads the whole source at once (no causal mask); the **decoder** writes the answer "
        "one token at a time with masked self-attention, and its **cross-attention** looks back at the "
        "encoder's output. Train a small one here on a task whose right alignment you know in advance."
    )
    view, train_clicked = settings()
    if train_clicked:
        train(view)
    save_or_load()
    res = st.session_state.get(RESULT)
    if res is None:
        st.info("Pick a task and press **Train a fresh model** (reversal takes well under a minute).")
        st.stop()
    summary(res)
    replay(res, *try_it(res))


main()
