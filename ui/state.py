"""The one module that owns Streamlit caching and the state every page shares.

Models are loaded once per process (`st.cache_resource`) and shared by every browser
session, so nothing here mutates them. The trace of a prompt is computed once per
(model, device, token ids) and reused by every page and session; traces are read-only.
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
import torch

import tfm
from tfm.config import ModelConfig
from tfm.loading import REGISTRY
from tfm.model import ModelOutput
from tfm.trace import Trace

MAX_PROMPT_CHARS = 20_000


def default_model_spec() -> str:
    """The bundled model once it exists; a small random model of its shape until then."""
    if REGISTRY["default"].is_dir():
        return "default"
    return random_spec(ModelConfig.preset("tfm-small"), seed=0)


def random_spec(cfg: ModelConfig, seed: int) -> str:
    return "random:" + json.dumps({"config": cfg.to_dict(), "seed": seed}, sort_keys=True)


def describe_spec(spec: str) -> str:
    if spec == "default":
        return "bundled default model"
    if spec.startswith("random:"):
        data = json.loads(spec.removeprefix("random:"))
        c = data["config"]
        return (f"random model ({c['n_layer']} layers, d_model {c['d_model']}, {c['n_head']} heads, "
                f"{c['pos_encoding']}, {c['norm']}, {c['norm_placement']}-norm, {c['activation']}; seed {data['seed']})")
    return f"model folder {spec.removeprefix('path:')}"


@st.cache_resource(max_entries=4, show_spinner="Loading the model…")
def load_lm(spec: str, device: str) -> tfm.LM:
    """Load by spec: "default", "random:{json}" or "path:/folder". Errors propagate (ValueError,
    FileNotFoundError) for the caller to show; failures are not cached."""
    if spec.startswith("random:"):
        data = json.loads(spec.removeprefix("random:"))
        cfg = ModelConfig.from_dict(data["config"])
        return tfm.random_model(cfg, seed=int(data["seed"]), device=device)
    return tfm.load(spec.removeprefix("path:"), device=device)


@st.cache_resource(max_entries=64, show_spinner="Running the model…")
def run_traced(spec: str, device: str, ids: tuple[int, ...]) -> ModelOutput:
    """One traced forward of `ids`; the result lives on the CPU, shared read-only."""
    lm = load_lm(spec, device)
    with torch.inference_mode():
        out = lm.model(torch.tensor([ids], device=lm.device), trace=True)
    cpu = Trace({k: v.float().cpu() for k, v in out.trace.items()}, out.trace.shapes)
    return ModelOutput(out.logits.float().cpu(), cpu)


@st.cache_resource(max_entries=256, show_spinner=False)
def derived(name: str, _fn, spec: str, device: str, *args):
    """Cache a pure function of the loaded model across sessions: `_fn(lm, *args)`.

    `name` identifies the function (the callable itself is not hashed); `args` must be
    hashable (tuples of ids, numbers, strings). Results are shared: treat them as read-only.
    """
    return _fn(load_lm(spec, device), *args)


@dataclass(frozen=True)
class PromptRun:
    """What every page needs: the model, the prompt's tokens and the traced forward."""

    lm: tfm.LM
    spec: str
    device: str
    ids: tuple[int, ...]
    labels: list[str]      # display pieces, made unique per position for chart axes
    dropped: int           # tokens cut from the left to fit the context
    output: ModelOutput

    @property
    def trace(self) -> Trace:
        return self.output.trace


def token_labels(lm: tfm.LM, ids: tuple[int, ...]) -> list[str]:
    """Readable piece per position, suffixed with its position so axis labels stay distinct."""
    return [f"{lm.tokenizer.display_piece(t)} ·{i}" for i, t in enumerate(ids)]


def active_model() -> tuple[tfm.LM | None, str, str]:
    """The model the sidebar chose; on failure the previous good one, with the error shown."""
    spec = st.session_state.get("app.model_spec", default_model_spec())
    device = st.session_state.get("sidebar.device", "cpu")
    try:
        lm = load_lm(spec, device)
        st.session_state["app.good_model"] = (spec, device)
        return lm, spec, device
    except (ValueError, FileNotFoundError, OSError, KeyError) as e:
        st.error(f"Could not load {describe_spec(spec)}: {e}")
        good = st.session_state.get("app.good_model")
        if good and good != (spec, device):
            st.info(f"Still showing the previous model: {describe_spec(good[0])}.")
            return load_lm(*good), good[0], good[1]
        return None, spec, device


def current_run(max_tokens: int | None = None) -> PromptRun:
    """The traced prompt for the page, or a clear message and a stopped script."""
    lm, spec, device = active_model()
    if lm is None:
        st.stop()
    text = st.session_state.get("sidebar.prompt", "")
    if not text.strip():
        st.info("The prompt is empty: type some text in the sidebar's **Prompt** box.")
        st.stop()
    ids = lm.tokenizer.encode(text[:MAX_PROMPT_CHARS])
    limit = min(lm.config.context_length, max_tokens or lm.config.context_length)
    dropped = max(0, len(ids) - limit)
    if dropped:
        st.warning(f"The prompt has {len(ids)} tokens; this view shows the last {limit} "
                   f"(the first {dropped} were cut from the left).")
        ids = ids[dropped:]
    ids_t = tuple(ids)
    return PromptRun(lm, spec, device, ids_t, token_labels(lm, ids_t), dropped, run_traced(spec, device, ids_t))


def found_model_folders() -> list[str]:
    """Model folders beside the app: assets/models/* and models/* with a config.json or ckpt.pt."""
    root = Path(__file__).resolve().parent.parent
    found = []
    for base in (root / "assets" / "models", root / "models"):
        if base.is_dir():
            found += [str(p) for p in sorted(base.iterdir()) if (p / "config.json").is_file() or (p / "ckpt.pt").is_file()]
    return found


def url_init(widget_key: str, param: str, cast=str) -> None:
    """Seed a widget from the URL once per session, so shared links open the same view."""
    done = st.session_state.setdefault("app.url_loaded", set())
    if widget_key in done:
        return
    done.add(widget_key)
    if param in st.query_params:
        try:
            st.session_state[widget_key] = cast(st.query_params[param])
        except (TypeError, ValueError):
            st.warning(f"Ignored the link's {param}={st.query_params[param]!r}: not a valid value.")


def url_set(**params) -> None:
    """Write the current settings into the URL (only the ones that changed)."""
    for name, value in params.items():
        if st.query_params.get(name) != str(value):
            st.query_params[name] = str(value)


def restore(*widget_keys: str) -> None:
    """Streamlit drops a widget's value when the page changes; put back the remembered one."""
    for key in widget_keys:
        shadow = "keep." + key
        if shadow in st.session_state:
            st.session_state[key] = st.session_state[shadow]


def remember(*widget_keys: str) -> None:
    """Save widget values (as an on_change callback, so a user's edit wins over the old copy)."""
    for key in widget_keys:
        if key in st.session_state:
            st.session_state["keep." + key] = st.session_state[key]


def keep(key: str) -> dict:
    """Widget kwargs for a value that survives page changes: `st.slider(..., **keep("x.y"))`."""
    return {"key": key, "on_change": remember, "args": (key,)}


class _Finished:
    """A small bounded store of finished runs (the oldest goes first), shared by every session."""

    def __init__(self, size: int) -> None:
        self.size, self.items, self.lock = size, OrderedDict(), threading.Lock()


@st.cache_resource
def _finished_runs() -> _Finished:
    return _Finished(8)  # a lesson run is ~1 MB (its pattern snapshots)


def finished(key: tuple):
    """A finished run stored under `key` (hashable settings), or None."""
    store = _finished_runs()
    with store.lock:
        return store.items.get(key)


def keep_finished(key: tuple, value) -> None:
    store = _finished_runs()
    with store.lock:
        store.items[key] = value
        store.items.move_to_end(key)
        while len(store.items) > store.size:
            store.items.popitem(last=False)
