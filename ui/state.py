"""The one module that owns Streamlit caching and the state every page shares.

Models are loaded once per process (`st.cache_resource`) and shared by every browser
session, so nothing here mutates them. The trace of a prompt is computed once per
(model, device, token ids) and reused by every page and session; traces are read-only.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import streamlit as st
import torch

import tfm
from tfm import limits as tfm_limits
from tfm.config import ModelConfig
from tfm.loading import REGISTRY
from tfm.model import ModelOutput
from tfm.trace import Trace

from . import server


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
    with server.heavy("loading a model", quiet=True):
        if spec.startswith("random:"):
            data = json.loads(spec.removeprefix("random:"))
            cfg = ModelConfig.from_dict(data["config"])
            return tfm.random_model(cfg, seed=int(data["seed"]), device=device)
        return tfm.load(spec.removeprefix("path:"), device=device)


@st.cache_resource(max_entries=64, show_spinner="Running the model…")
def run_traced(spec: str, device: str, ids: tuple[int, ...]) -> ModelOutput:
    """One traced forward of `ids`; the result lives on the CPU, shared read-only."""
    lm = load_lm(spec, device)  # before taking a slot (ui.heavy: never load while holding one)
    with server.heavy("a traced forward", quiet=True), torch.inference_mode():
        out = lm.model(torch.tensor([ids], device=lm.device), trace=True)
    cpu = Trace({k: v.float().cpu() for k, v in out.trace.items()}, out.trace.shapes)
    return ModelOutput(out.logits.float().cpu(), cpu)


@st.cache_resource(max_entries=256, show_spinner=False)
def derived(name: str, _fn, spec: str, device: str, *args):
    """Cache a pure function of the loaded model across sessions: `_fn(lm, *args)`.

    `name` identifies the function (the callable itself is not hashed); `args` must be
    hashable (tuples of ids, numbers, strings). Results are shared: treat them as read-only.
    """
    lm = load_lm(spec, device)
    with server.heavy(name, quiet=True):
        return _fn(lm, *args)


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
        checked = checked_spec(spec)  # limits and allowed folders, before anything is loaded; a folder
        lm = load_lm(checked, device)  # resolved, so every page and cache keys it the same way
        st.session_state["app.good_model"] = (checked, device)
        return lm, checked, device
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
    ids = lm.tokenizer.encode(text[:server.limits().max_prompt_chars])
    limit = min(lm.config.context_length, max_tokens or lm.config.context_length)
    dropped = max(0, len(ids) - limit)
    if dropped:
        st.warning(f"The prompt has {len(ids)} tokens; this view shows the last {limit} "
                   f"(the first {dropped} were cut from the left).")
        ids = ids[dropped:]
    ids_t = tuple(ids)
    try:
        tfm_limits.check_trace(lm.config, server.limits(), len(ids_t))
    except ValueError as e:
        st.error(f"This prompt is too long to trace here: {e}.")
        st.stop()
    notice = st.empty()
    if server.gate().busy():
        notice.info("⏳ The server is busy with other students' heavy work: this page starts when a slot frees up…")
    output = run_traced(spec, device, ids_t)
    notice.empty()
    return PromptRun(lm, spec, device, ids_t, token_labels(lm, ids_t), dropped, output)


def checked_spec(spec: str) -> str:
    """A spec a browser sent, checked before anything is loaded: a random model within the
    server's limits, a folder inside the allowed roots (returned resolved). ValueError otherwise."""
    if spec.startswith("random:"):
        try:
            cfg = ModelConfig.from_dict(json.loads(spec.removeprefix("random:"))["config"])
        except (KeyError, TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"the random model's settings could not be read ({e})") from None
        tfm_limits.check_model(cfg, server.limits())
        return spec
    if spec.startswith("path:"):
        folder = server.allowed_folder(spec.removeprefix("path:"))
        tfm_limits.check_folder(folder, server.limits())
        return f"path:{folder}"
    if spec != "default":
        raise ValueError(f"unknown model setting {spec[:40]!r}; use the sidebar's Model choice")
    return spec


def found_model_folders() -> list[str]:
    """Model folders in the allowed roots (assets/models, models, and the owner's) with a config.json or ckpt.pt."""
    found = []
    for base in server.settings().model_roots:
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
