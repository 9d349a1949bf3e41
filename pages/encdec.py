"""Encoder-decoder, trained live: a small 2017-style Transformer learns a toy task in the browser."""
import streamlit as st
import torch

from tfm.teach import toy
from tfm.core import trace_read
from tfm.loaders.limits import check_count
from tfm.text.token_view import position_labels
from tfm.viz import encdec as encdec_figs
from ui import charts, heavy, links, sidebar
from services import server
from ui.text import message

sidebar.render()
st.title("The 2017 Transformer: encoder-decoder, trained live")
st.markdown(
    "The **encoder** reads the whole source at once (no causal mask); the **decoder** writes the answer "
    "one token at a time with masked self-attention, and its **cross-attention** looks back at the "
    "encoder's output. Train a small one here on a task whose right alignment you know in advance."
)
RESULT = "encdec.result"  # this user's trained model and its history (per session, never shared)
links.restore("encdec.task", "encdec.steps", "encdec.layer", "encdec.head", "encdec.input")
st.session_state.setdefault("encdec.steps", 400)
max_steps = server.limits().max_train_steps
st.session_state["encdec.steps"] = min(int(st.session_state["encdec.steps"]), max_steps)
c1, c2, c3 = st.columns([3, 2, 2], vertical_alignment="bottom")
task = c1.selectbox("Task", list(toy.TASKS), format_func=lambda t: f"{t}: {toy.TASKS[t]}", **links.keep("encdec.task"))
steps = int(c2.number_input("Training steps", 10, max(10, max_steps), step=50, **links.keep("encdec.steps"),
                            help="Batches of 64 random examples; about 400 steps solve reversal."))
train_clicked = c3.button("Train a fresh model", key="encdec.train", type="primary")


def train_here(spec: toy.ToySpec, steps: int) -> dict:
    """Train in this script run with a progress bar and a loss chart redrawn as it learns."""
    bar, chart, losses = st.progress(0.0, text="Starting…"), st.empty(), []
    every = max(1, steps // 20)

    def on_step(step: int, loss: float) -> None:
        losses.append(loss)
        if step % every == 0 or step == steps:
            bar.progress(step / steps, text=f"step {step}/{steps} · loss {loss:.4f}")
            chart.plotly_chart(encdec_figs.loss_figure(losses, "Training loss (live)"), key=f"encdec.live.{step}")

    result = toy.train(spec, steps, seed=0, snapshot_every=max(1, steps // 40), on_step=on_step)
    bar.empty()
    chart.empty()
    return {"model": result.model, "spec": spec, "losses": result.losses, "snapshots": result.snapshots,
            "seconds": result.seconds, "accuracy": toy.exact_match(result.model, spec, n=500)}


if train_clicked:
    try:  # the widget's bounds are the browser's; the server checks again
        check_count("training steps", steps, max_steps)
    except ValueError as e:
        st.error(f"Not trained: {message(e)}.")
        st.stop()
    with heavy.slot("training"):
        st.session_state[RESULT] = train_here(toy.ToySpec(task), steps)

with st.expander("Save or load a trained model"):
    res = st.session_state.get(RESULT)
    if res is not None:
        st.download_button("Download this model (.zip: config.json + model.safetensors)",
                           toy.to_zip(res["model"], res["spec"]), file_name=f"encdec-{res['spec'].task}.zip",
                           mime="application/zip", key="encdec.download")
    upload = st.file_uploader("Load a downloaded .zip", type=["zip"], key="encdec.upload")
    folder = st.text_input("…or a model folder on the server (config.json + model.safetensors)", key="encdec.folder")
    try:
        if upload is not None and st.session_state.get("encdec.loaded_upload") != upload.file_id:
            st.session_state["encdec.loaded_upload"] = upload.file_id
            model, spec = toy.from_zip(upload.getvalue(), "the uploaded zip", server.limits().max_model_bytes)
            st.session_state[RESULT] = {"model": model, "spec": spec, "losses": [], "snapshots": [], "seconds": None,
                                        "accuracy": toy.exact_match(model, spec, n=500)}
        if st.button("Load folder", key="encdec.load", disabled=not folder.strip()):
            model, spec = toy.load_folder(server.allowed_folder(folder), server.limits().max_model_bytes)
            st.session_state[RESULT] = {"model": model, "spec": spec, "losses": [], "snapshots": [], "seconds": None,
                                        "accuracy": toy.exact_match(model, spec, n=500)}
    except (ValueError, FileNotFoundError, OSError) as e:
        st.error(f"Could not load that model: {message(e)}")

res = st.session_state.get(RESULT)
if res is None:
    st.info("Pick a task and press **Train a fresh model** (reversal takes well under a minute).")
    st.stop()

spec, model, cfg = res["spec"], res["model"], res["model"].config
how = f"trained {len(res['losses'])} steps in {res['seconds']:.1f} s" if res["losses"] else "loaded from a saved copy"
st.success(f"**{spec.task}** model ({model.num_params():,} parameters: {cfg.n_enc_layer} encoder + "
           f"{cfg.n_dec_layer} decoder layers, d_model {cfg.d_model}, {cfg.n_head} heads) {how}: "
           f"exact-match accuracy **{res['accuracy']:.1%}** on 500 fresh examples.")
if res["losses"]:
    charts.show(encdec_figs.loss_figure(res["losses"]), key="encdec.loss")

st.subheader("Try it, and see where the decoder looks")
st.session_state.setdefault("encdec.input", "".join(map(str, toy.probe_digits(spec))))
text = st.text_input(f"Digits ({spec.min_len}-{spec.max_len} were trained; 1-{spec.max_len} fit)",
                     **links.keep("encdec.input"))
try:
    batch = toy.make_batch(spec, [toy.encode_digits(text.strip())])
except ValueError as e:
    st.error(f"{message(e)}. Type 1 to {spec.max_len} digits.")
    st.stop()
with torch.inference_mode():
    answer, written, trace = toy.answer_trace(model, batch)
right = toy.decode_text(batch.tgt_out[0].tolist())
st.markdown(f"Model's answer: **{answer or '(empty)'}** · correct: **{right}** · "
            f"{':green[**right**]' if answer == right else ':red[**wrong**]'}")

src_labels = position_labels([toy.token_label(t) for t in batch.src[0].tolist()])
tgt_labels = position_labels([f"→{toy.token_label(t)}" for t in written])
for key, n in (("encdec.layer", cfg.n_dec_layer), ("encdec.head", cfg.n_head)):
    if st.session_state.get(key, 0) >= n:  # a loaded model may be smaller than the last one
        st.session_state[key] = 0
cl, ch = st.columns(2)
layer = cl.selectbox("Decoder layer", range(cfg.n_dec_layer), **links.keep("encdec.layer"))
head = ch.selectbox("Head (for the close-up and the replay)", range(cfg.n_head), **links.keep("encdec.head"))
pats = trace_read.cross_pattern(trace, layer).numpy()           # (H, T, S)
charts.show(encdec_figs.cross_attention_grid(
    pats, src_labels, tgt_labels, f"Cross-attention, decoder layer {layer}: each output (row) over the source digits"),
    key="encdec.grid")
st.caption("Rows are the decoder's steps (labelled with the token each step wrote); columns are source "
           "positions, – marks padding, which gets exactly 0. For reversal, look for the anti-diagonal.")

snaps = res["snapshots"]
if snaps:
    st.subheader("Replay: how the alignment formed")
    probe = toy.probe_batch(spec)
    n_out = int((probe.tgt_out[0] != toy.PAD).sum())
    p_src = position_labels([toy.token_label(t) for t in probe.src[0].tolist()])
    p_tgt = position_labels([f"→{toy.token_label(t)}" for t in probe.tgt_out[0, :n_out].tolist()])
    steps_taken = [s.step for s in snaps]
    if st.session_state.get("encdec.snapshot") not in steps_taken:
        st.session_state["encdec.snapshot"] = steps_taken[-1]
    step = st.select_slider("Training step", steps_taken, key="encdec.snapshot")
    snap = next(s for s in snaps if s.step == step)
    charts.show(encdec_figs.head_heatmap(
        snap.cross[layer, head, :n_out].numpy(), p_src, p_tgt,
        f"Step {step}: layer {layer} head {head} on the fixed example (answer then: {snap.answer or '(empty)'})"),
        key="encdec.replay")
    st.caption("The fixed example is fed the correct answer (teacher forcing), as in training.")
