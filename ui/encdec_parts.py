"""The encoder-decoder page's model work (`tfm.teach.toy`): training in the script run with a live
loss chart, saving and loading a trained copy, running it on typed digits with its trace, and
the labels its charts use. What a session trained lives in its own session state (`RESULT`)."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st
import torch

from tfm.core import trace_read
from tfm.loaders.limits import check_count
from tfm.teach import toy
from tfm.text.token_view import position_labels
from tfm.viz import encdec as encdec_figs
from services import server
from ui import heavy
from ui.views.encdec import EncDecView

RESULT = "encdec.result"  # this user's trained model and its history (per session, never shared)
TASKS = toy.TASKS
PAD = toy.PAD


def _result(model, spec, losses=(), snapshots=(), seconds=None) -> dict:
    return {
        "model": model,
        "spec": spec,
        "losses": list(losses),
        "snapshots": list(snapshots),
        "seconds": seconds,
        "accuracy": toy.exact_match(model, spec, n=500),
    }


def train_here(view: EncDecView) -> dict:
    """Train in this script run with a progress bar and a loss chart redrawn as it learns."""
    spec, steps = toy.ToySpec(view.task), view.steps
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
    return _result(result.model, spec, result.losses, result.snapshots, result.seconds)


def max_steps() -> int:
    """The most training steps this server allows."""
    return server.limits().max_train_steps


def train(view: EncDecView) -> dict:
    """Train a fresh model in the server's heavy gate; ValueError (nothing trained) over the server's
    bound on steps, whatever the widget sent."""
    check_count("training steps", view.steps, max_steps())
    with heavy.slot("training"):
        return train_here(view)


def to_zip(res: dict) -> bytes:
    return toy.to_zip(res["model"], res["spec"])


def load_zip(data: bytes) -> dict:
    model, spec = toy.from_zip(data, "the uploaded zip", server.limits().max_model_bytes)
    return _result(model, spec)


def load_folder(folder: str) -> dict:
    model, spec = toy.load_folder(server.allowed_folder(folder), server.limits().max_model_bytes)
    return _result(model, spec)


def probe_text(spec) -> str:
    return "".join(map(str, toy.probe_digits(spec)))


@dataclass(frozen=True)
class Answer:
    """The model on typed digits: its answer, the right one, the axis labels and the trace."""

    answer: str
    right: str
    src_labels: list[str]
    tgt_labels: list[str]
    trace: object

    def cross(self, layer: int):
        """(H, T, S) the decoder layer's cross-attention."""
        return trace_read.cross_pattern(self.trace, layer).numpy()


def answer(res: dict, text: str) -> Answer:
    """Run the trained model on `text`; ValueError for text that is not 1..max_len digits."""
    spec, model = res["spec"], res["model"]
    batch = toy.make_batch(spec, [toy.encode_digits(text.strip())])
    with torch.inference_mode():
        said, written, trace = toy.answer_trace(model, batch)
    return Answer(
        said,
        toy.decode_text(batch.tgt_out[0].tolist()),
        position_labels([toy.token_label(t) for t in batch.src[0].tolist()]),
        position_labels([f"→{toy.token_label(t)}" for t in written]),
        trace,
    )


def probe_labels(spec) -> tuple[int, list[str], list[str]]:
    """The replay's fixed example: its answer length, source labels and target labels."""
    probe = toy.probe_batch(spec)
    n_out = int((probe.tgt_out[0] != PAD).sum())
    return (
        n_out,
        position_labels([toy.token_label(t) for t in probe.src[0].tolist()]),
        position_labels([f"→{toy.token_label(t)}" for t in probe.tgt_out[0, :n_out].tolist()]),
    )
