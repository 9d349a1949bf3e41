"""The sidebar every page shares: model, device, prompt, seed. Writes them into the URL."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from tfm.loaders import limits as tfm_limits
from tfm.loaders.loading import available_devices
from tfm.loaders.spec import format_spec, parse_spec

from ui import links, models, packaged, random_model, st_private
from ui.random_model import CUSTOM, FIELDS, SEED_MAX, SIZE_MAX, SIZES
from services import server
from ui.rooms import live
from ui.text import message, plain
from ui.views import Sidebar

APP = Path(__file__).resolve().parents[1] / "app.py"
DEFAULT_PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play with her ball. One day, Lily"
REAL_PROMPT = "The capital of France is"  # a fact a pretrained model knows (SmolLM2: " Paris", p 0.77)
PAIR_PROMPT = "The bank of the river was muddy. [SEP] She sat on the bank and fished."  # an encoder's pair
KINDS = {
    "smollm2": "SmolLM2-135M (real)",
    "gemma3": "Gemma 3 270M (real)",
    "minilm": "MiniLM (encoder)",
    "default": "Bundled tiny",
    "random": "Random model",
    "folder": "Model folder / GGUF",
}


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
        random_model.show_random(spec)
    elif spec.kind == "folder":
        try:
            server.allowed_folder(spec.path)
        except ValueError as e:
            st.error(f"The link's model folder was not opened: {message(e)}. Showing the default model.")
            return
        st.session_state["sidebar.model_kind"] = "folder"
        st.session_state["sidebar.folder"] = spec.path
    else:  # a model known by name: "default", "smollm2", "gemma3", "minilm"
        st.session_state["sidebar.model_kind"] = spec.kind
    st.session_state["app.model_spec"] = format_spec(spec)
    links.remember(*PERSISTENT)


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
            cfg = random_model.random_config()
            st.session_state.setdefault("sidebar.random_seed", 0)
            seed = st.number_input("init seed", 0, SEED_MAX, **links.keep("sidebar.random_seed"))
        if cfg is not None:
            preset = st.session_state["sidebar.preset"]
            spec = models.random_spec(cfg, int(seed), None if preset == CUSTOM else preset)
    else:
        found = st.session_state["app.found"] = models.found_model_folders()
        if found:
            st.selectbox(
                "Found models",
                [""] + list(found),
                key="sidebar.found",
                on_change=_use_found_folder,
                format_func=models.shown_folder,
            )  # named as the app sees them, not by install path
        folder = st.text_input(
            "Folder or file (tfm; Hugging Face GPT-2, Llama, Qwen2, Mistral or GPT-NeoX; a .gguf "
            "file or an Ollama manifest; nanoGPT ckpt.pt)",
            **links.keep("sidebar.folder"),
        )
        if folder.strip():
            spec = "path:" + folder.strip()
    st.session_state["app.model_spec"] = spec


PERSISTENT = (
    "sidebar.model_kind",
    "sidebar.device",
    "sidebar.prompt",
    "sidebar.seed",
    "sidebar.folder",
    "sidebar.preset",
    "sidebar.random_seed",
    *(f"sidebar.{n}" for n in FIELDS),
)


def leave_legacy_pages_mode() -> None:
    """Make app.py's st.navigation route this run, even on a fresh server's first request.

    Streamlit decides per server whether `pages/` is a legacy (v1) pages folder; until some
    run calls st.navigation it assumes so, and a first request for /attention runs
    pages/attention.py without app.py: no wide layout, no sections. (AppTest resets that
    flag before every run, so there it is every run.) Then app.py runs inside this run and
    this outer run stops before drawing anything (ui.st_private.route_through_app)."""
    st_private.route_through_app(APP)


def _defaults() -> None:
    """What a session starts with; a link's prompt cut to the server's limit and a device this
    server lacks replaced, each saying so."""
    st.session_state.setdefault(
        "sidebar.model_kind", "smollm2" if models.default_model_spec() == "smollm2" else "default"
    )
    st.session_state.setdefault("sidebar.prompt", default_prompt())
    max_chars = server.limits().max_prompt_chars
    # A link or a paste can carry any length: the widget has no max_chars (the browser would drop
    # a longer paste without a word); it is cut here, before any work, and says so.
    links.cap_text("sidebar.prompt", "prompt", max_chars)
    st.session_state.setdefault("sidebar.seed", 0)
    if st.session_state.get("sidebar.device") not in available_devices():
        if "sidebar.device" in st.session_state:  # only a link can hold another
            st.warning(
                f"Ignored the link's device={plain(st.session_state['sidebar.device'])}: this server has "
                f"{', '.join(available_devices())}."
            )
        st.session_state["sidebar.device"] = available_devices()[-1]


def render() -> Sidebar:
    """Draw the sidebar, keep the URL in step with it and hand the page its settings."""
    leave_legacy_pages_mode()
    links.restore(*PERSISTENT)
    _spec_from_url()
    links.url_init("sidebar.prompt", "prompt", max_chars=None)  # cut below, with a word
    links.url_init("sidebar.seed", "seed", int, bounds=(0, SEED_MAX))
    links.url_init("sidebar.device", "device")
    _defaults()
    with st.sidebar:
        _choose_model()
        st.selectbox("Device", available_devices(), **links.keep("sidebar.device"))
        st.text_area(
            "Prompt",
            **links.keep("sidebar.prompt"),
            height=140,
            help="Typed text is always plain text: '<|endoftext|>' here is not the control token.",
        )
        st.number_input("Seed (sampling)", 0, SEED_MAX, **links.keep("sidebar.seed"))
    links.remember(*PERSISTENT)
    ss = st.session_state
    shown = Sidebar(ss["app.model_spec"], ss["sidebar.prompt"], int(ss["sidebar.seed"]), ss["sidebar.device"])
    links.url_set(
        **shown.link(),
        defaults=Sidebar(models.default_model_spec(), default_prompt(), 0, available_devices()[-1]).link(),
    )
    live.banner()  # a class room: the teacher's push button, or a student following the teacher
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
