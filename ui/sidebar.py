"""The sidebar every page shares: model, device, prompt, seed. Writes them into the URL."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from typing import get_args

from tfm.core.config import PRESETS, ModelConfig
from tfm.core.config import Activation, NormPlacement, NormType, PosEncoding, RopeScaling
from tfm.loaders import limits as tfm_limits
from tfm.loaders.loading import available_devices
from tfm.loaders.spec import ModelSpec, format_spec, parse_spec

from ui import links, models, packaged, st_private
from services import server
from ui.rooms import live
from ui.text import message, plain
from ui.views import Sidebar

APP = Path(__file__).resolve().parents[1] / "app.py"
DEFAULT_PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play with her ball. One day, Lily"
REAL_PROMPT = "The capital of France is"   # a fact a pretrained model knows (SmolLM2: " Paris", p 0.77)
PAIR_PROMPT = "The bank of the river was muddy. [SEP] She sat on the bank and fished."   # an encoder's pair
KINDS = {"smollm2": "SmolLM2-135M (real)", "gemma3": "Gemma 3 270M (real)", "minilm": "MiniLM (encoder)",
         "default": "Bundled tiny",
         "random": "Random model", "folder": "Model folder / GGUF"}
SIZES = ("n_layer", "n_head", "n_kv_head", "d_model", "d_ff", "context_length", "vocab_size")
VARIANTS = {name: list(get_args(kind)) for name, kind in (
    ("pos_encoding", PosEncoding), ("norm", NormType), ("norm_placement", NormPlacement), ("activation", Activation),
    ("rope_scaling", RopeScaling))}
VARIANTS["rope_scaling"].remove("factors")   # a file's own per-pair numbers: nothing to pick in a widget
# Float fields: (step, display format, help).
FLOATS = {"rope_base": (1000.0, "%g", "RoPE's base θ (rope_theta): larger means slower-turning pairs"),
          "rotary_pct": (0.05, "%.2f", "fraction of each head's dims RoPE rotates (Pythia: 0.25)"),
          "rope_factor": (1.0, "%g", "rope_scaling's factor (linear / llama3)"),
          "norm_eps": (1e-6, "%.0e", "ε added inside the norm's square root")}
FLAGS = {"bias": "biases", "qkv_bias": "q/k/v bias (Qwen2)", "tied_embeddings": "tied embeddings",
         "parallel_block": "parallel block (GPT-NeoX)"}
FIELDS = (*VARIANTS, *SIZES, *FLOATS, *FLAGS)  # every config field the sidebar shows
SIZE_MAX, SEED_MAX = 1_000_000, 2**31 - 1  # the widgets' bounds (Qwen2.5 has 151,936 tokens; limits bound the cost)
CUSTOM = "custom"  # the preset shown for a link's config that matches none


def _spec_from_url() -> None:
    """Open a shared link: `model=` holds a spec (`tfm.loaders.spec`: "default", "smollm2", "random:...", "path:...")."""
    text = st.query_params.get("model")
    if text is None or "app.model_spec" in st.session_state:
        return
    try:
        spec = parse_spec(text)
    except ValueError as e:
        st.warning(f"The link's model setting could not be read ({message(e)}); using the default model.")
        return
    if spec.kind == "random":
        try:
            tfm_limits.check_model(spec.config, server.limits())
            for name in SIZES:
                tfm_limits.check_count(name, getattr(spec.config, name), SIZE_MAX)
            tfm_limits.check_count("seed", spec.seed, SEED_MAX, low=0)
        except ValueError as e:
            st.error(f"The link's random model was not built: {message(e)}. Showing the default model.")
            return
        _show_random(spec)
    elif spec.kind == "folder":
        try:
            server.allowed_folder(spec.path)
        except ValueError as e:
            st.error(f"The link's model folder was not opened: {message(e)}. Showing the default model.")
            return
        st.session_state["sidebar.model_kind"] = "folder"
        st.session_state["sidebar.folder"] = spec.path
    else:   # a model known by name: "default", "smollm2", "gemma3", "minilm"
        st.session_state["sidebar.model_kind"] = spec.kind
    st.session_state["app.model_spec"] = format_spec(spec)
    links.remember(*PERSISTENT)


def _show_random(spec: ModelSpec) -> None:
    """Put a random spec into the widgets: its preset (or "custom"), fields and seed. Its config
    is the base the widgets edit, so fields without a widget keep the link's values."""
    ss = st.session_state
    ss["sidebar.model_kind"], ss["sidebar.random_seed"] = "random", spec.seed
    ss["sidebar.preset"] = spec.preset or CUSTOM
    ss["sidebar.base"] = spec.config.to_dict()
    for name in FIELDS:
        ss[f"sidebar.{name}"] = getattr(spec.config, name)


def _random_config() -> ModelConfig | None:
    """Config widgets for a random model; a bad combination shows why and returns None."""
    if "sidebar.preset" not in st.session_state:
        st.session_state["sidebar.preset"] = "tfm-small"
        _apply_preset(only_missing=True)
    preset = st.selectbox("Start from preset", [*sorted(PRESETS), CUSTOM], key="sidebar.preset", on_change=_apply_preset,
                          help=f"{CUSTOM!r}: a link's config that matches no preset")
    base = _base(preset)
    fields = {}
    for name, options in VARIANTS.items():
        fields[name] = st.selectbox(name.replace("_", " "), options, **links.keep(f"sidebar.{name}"))
    cols = st.columns(2)
    for i, name in enumerate(SIZES):
        fields[name] = int(cols[i % 2].number_input(name, min_value=1, max_value=SIZE_MAX, step=1,
                                                    **links.keep(f"sidebar.{name}")))
    cols = st.columns(2)
    for i, (name, (step, fmt, hint)) in enumerate(FLOATS.items()):
        fields[name] = float(cols[i % 2].number_input(name.replace("_", " "), min_value=0.0, step=step, format=fmt,
                                                      help=hint, **links.keep(f"sidebar.{name}")))
    for name, label in FLAGS.items():  # one per line: the labels are too long for two columns
        fields[name] = st.checkbox(label, **links.keep(f"sidebar.{name}"))
    try:
        cfg = base.replace(**fields)
    except ValueError as e:
        st.error(f"Invalid model config: {message(e)}")
        return None
    return _within_limits(cfg)


def _base(preset: str) -> ModelConfig:
    """The config the widgets edit: a link's (so fields without a widget keep its values) until
    another preset is chosen, else the preset's."""
    if "sidebar.base" in st.session_state:
        return ModelConfig.from_dict(st.session_state["sidebar.base"])
    return ModelConfig.preset("tfm-small" if preset == CUSTOM else preset)  # CUSTOM chosen by hand


def _within_limits(cfg: ModelConfig) -> ModelConfig | None:
    """The config's cost, from its shape alone; over the server's limits: why, and None."""
    n, trace = tfm_limits.count_params(cfg), tfm_limits.trace_cost(cfg)
    st.caption(f"{n:,} parameters ({tfm_limits.fmt_bytes(n * tfm_limits.FLOAT_BYTES)}); a trace at the full "
               f"{cfg.context_length} tokens holds at most {tfm_limits.fmt_bytes(trace.held)} "
               f"({tfm_limits.fmt_bytes(trace.per_block)} per block read).")
    try:
        tfm_limits.check_model(cfg, server.limits())
    except ValueError as e:
        st.error(f"Not built: {message(e)}. Still showing the previous model.")
        return None
    return cfg


def _apply_preset(only_missing: bool = False) -> None:
    if st.session_state["sidebar.preset"] == CUSTOM:   # nothing to apply: keep the fields as they are
        links.remember("sidebar.preset")
        return
    st.session_state.pop("sidebar.base", None)   # the preset is the base again
    cfg = ModelConfig.preset(st.session_state["sidebar.preset"])
    for name in FIELDS:
        if not (only_missing and f"sidebar.{name}" in st.session_state):
            st.session_state[f"sidebar.{name}"] = getattr(cfg, name)
    links.remember("sidebar.preset", *(f"sidebar.{n}" for n in FIELDS))


def _use_found_folder() -> None:
    st.session_state["sidebar.folder"] = st.session_state["app.found"].get(st.session_state["sidebar.found"], "")
    links.remember("sidebar.folder")


def _choose_model() -> None:
    kind = st.radio("Model", list(KINDS), format_func=KINDS.get, **links.keep("sidebar.model_kind"), horizontal=True)
    spec = st.session_state.get("app.model_spec", models.default_model_spec())
    if kind in packaged.PACKAGED:
        spec = kind
        packaged.offer(kind)
    elif kind == "default":
        spec = models.bundled_model_spec()
        if spec != "default":
            st.caption("No bundled model is installed yet: showing a random model of its shape.")
    elif kind == "random":
        with st.expander("Random model config", expanded=True):
            cfg = _random_config()
            st.session_state.setdefault("sidebar.random_seed", 0)
            seed = st.number_input("init seed", 0, SEED_MAX, **links.keep("sidebar.random_seed"))
        if cfg is not None:
            preset = st.session_state["sidebar.preset"]
            spec = models.random_spec(cfg, int(seed), None if preset == CUSTOM else preset)
    else:
        found = st.session_state["app.found"] = models.found_model_folders()
        if found:
            st.selectbox("Found models", [""] + list(found), key="sidebar.found", on_change=_use_found_folder,
                         format_func=models.shown_folder)  # named as the app sees them, not by install path
        folder = st.text_input("Folder or file (tfm; Hugging Face GPT-2, Llama, Qwen2, Mistral or GPT-NeoX; a .gguf "
                               "file or an Ollama manifest; nanoGPT ckpt.pt)", **links.keep("sidebar.folder"))
        if folder.strip():
            spec = "path:" + folder.strip()
    st.session_state["app.model_spec"] = spec


PERSISTENT = ("sidebar.model_kind", "sidebar.device", "sidebar.prompt", "sidebar.seed", "sidebar.folder",
              "sidebar.preset", "sidebar.random_seed", *(f"sidebar.{n}" for n in FIELDS))


def leave_legacy_pages_mode() -> None:
    """Make app.py's st.navigation route this run, even on a fresh server's first request.

    Streamlit decides per server whether `pages/` is a legacy (v1) pages folder; until some
    run calls st.navigation it assumes so, and a first request for /attention runs
    pages/attention.py without app.py: no wide layout, no sections. (AppTest resets that
    flag before every run, so there it is every run.) Then app.py runs inside this run and
    this outer run stops before drawing anything (ui.st_private.route_through_app)."""
    st_private.route_through_app(APP)


def render() -> Sidebar:
    """Draw the sidebar, keep the URL in step with it and hand the page its settings."""
    leave_legacy_pages_mode()
    links.restore(*PERSISTENT)
    _spec_from_url()
    links.url_init("sidebar.prompt", "prompt", max_chars=None)  # cut below, with a word
    links.url_init("sidebar.seed", "seed", int, bounds=(0, SEED_MAX))
    links.url_init("sidebar.device", "device")
    st.session_state.setdefault("sidebar.model_kind", "smollm2" if models.default_model_spec() == "smollm2" else "default")
    st.session_state.setdefault("sidebar.prompt", default_prompt())
    max_chars = server.limits().max_prompt_chars
    # A link or a paste can carry any length: the widget has no max_chars (the browser would drop
    # a longer paste without a word); it is cut here, before any work, and says so.
    links.cap_text("sidebar.prompt", "prompt", max_chars)
    st.session_state.setdefault("sidebar.seed", 0)
    if st.session_state.get("sidebar.device") not in available_devices():
        if "sidebar.device" in st.session_state:   # only a link can hold another
            st.warning(f"Ignored the link's device={plain(st.session_state['sidebar.device'])}: this server has "
                       f"{', '.join(available_devices())}.")
        st.session_state["sidebar.device"] = available_devices()[-1]
    with st.sidebar:
        _choose_model()
        st.selectbox("Device", available_devices(), **links.keep("sidebar.device"))
        st.text_area("Prompt", **links.keep("sidebar.prompt"), height=140,
                     help="Typed text is always plain text: '<|endoftext|>' here is not the control token.")
        st.number_input("Seed (sampling)", 0, SEED_MAX, **links.keep("sidebar.seed"))
    links.remember(*PERSISTENT)
    ss = st.session_state
    shown = Sidebar(ss["app.model_spec"], ss["sidebar.prompt"], int(ss["sidebar.seed"]), ss["sidebar.device"])
    links.url_set(**shown.link(), defaults=Sidebar(models.default_model_spec(), default_prompt(), 0,
                                                   available_devices()[-1]).link())
    live.banner()   # a class room: the teacher's push button, or a student following the teacher
    return shown


def set_prompt(text: str) -> None:
    """Put `text` in the sidebar's prompt box (a page's button or callback), kept across pages."""
    st.session_state["sidebar.prompt"] = text
    links.remember("sidebar.prompt")


def default_prompt() -> str:
    """The prompt a session starts with (and a link without one shows): a fact for a pretrained decoder, a pair
    for MiniLM."""
    kind = st.session_state.get("sidebar.model_kind")
    return PAIR_PROMPT if kind == "minilm" else REAL_PROMPT if kind in packaged.PACKAGED else DEFAULT_PROMPT
