"""The sidebar's random model: a preset and every config field as widgets (`random_config`), a
link's random model put into them (`show_random`), its cost checked against the server's limits
before anything is built. `ui.sidebar` draws it when "Random model" is chosen."""

from __future__ import annotations

from typing import get_args

import streamlit as st

from tfm.core.config import PRESETS, ModelConfig
from tfm.core.config import Activation, NormPlacement, NormType, PosEncoding, RopeScaling
from tfm.loaders import limits as tfm_limits
from tfm.loaders.spec import ModelSpec

from ui import links
from services import server
from ui.text import message

SIZES = ("n_layer", "n_head", "n_kv_head", "d_model", "d_ff", "context_length", "vocab_size")
VARIANTS = {
    name: list(get_args(kind))
    for name, kind in (
        ("pos_encoding", PosEncoding),
        ("norm", NormType),
        ("norm_placement", NormPlacement),
        ("activation", Activation),
        ("rope_scaling", RopeScaling),
    )
}
VARIANTS["rope_scaling"].remove("factors")  # a file's own per-pair numbers: nothing to pick in a widget
# Float fields: (step, display format, help).
FLOATS = {
    "rope_base": (1000.0, "%g", "RoPE's base θ (rope_theta): larger means slower-turning pairs"),
    "rotary_pct": (0.05, "%.2f", "fraction of each head's dims RoPE rotates (Pythia: 0.25)"),
    "rope_factor": (1.0, "%g", "rope_scaling's factor (linear / llama3)"),
    "norm_eps": (1e-6, "%.0e", "ε added inside the norm's square root"),
}
FLAGS = {
    "bias": "biases",
    "qkv_bias": "q/k/v bias (Qwen2)",
    "tied_embeddings": "tied embeddings",
    "parallel_block": "parallel block (GPT-NeoX)",
}
FIELDS = (*VARIANTS, *SIZES, *FLOATS, *FLAGS)  # every config field the sidebar shows
SIZE_MAX, SEED_MAX = 1_000_000, 2**31 - 1  # the widgets' bounds (Qwen2.5 has 151,936 tokens; limits bound the cost)
CUSTOM = "custom"  # the preset shown for a link's config that matches none


def show_random(spec: ModelSpec) -> None:
    """Put a random spec into the widgets: its preset (or "custom"), fields and seed. Its config
    is the base the widgets edit, so fields without a widget keep the link's values."""
    ss = st.session_state
    ss["sidebar.model_kind"], ss["sidebar.random_seed"] = "random", spec.seed
    ss["sidebar.preset"] = spec.preset or CUSTOM
    ss["sidebar.base"] = spec.config.to_dict()
    for name in FIELDS:
        ss[f"sidebar.{name}"] = getattr(spec.config, name)


def random_config() -> ModelConfig | None:
    """Config widgets for a random model; a bad combination shows why and returns None."""
    if "sidebar.preset" not in st.session_state:
        st.session_state["sidebar.preset"] = "tfm-small"
        apply_preset(only_missing=True)
    preset = st.selectbox(
        "Start from preset",
        [*sorted(PRESETS), CUSTOM],
        key="sidebar.preset",
        on_change=apply_preset,
        help=f"{CUSTOM!r}: a link's config that matches no preset",
    )
    base = _base(preset)
    fields = {}
    for name, options in VARIANTS.items():
        fields[name] = st.selectbox(name.replace("_", " "), options, **links.keep(f"sidebar.{name}"))
    cols = st.columns(2)
    for i, name in enumerate(SIZES):
        fields[name] = int(
            cols[i % 2].number_input(name, min_value=1, max_value=SIZE_MAX, step=1, **links.keep(f"sidebar.{name}"))
        )
    cols = st.columns(2)
    for i, (name, (step, fmt, hint)) in enumerate(FLOATS.items()):
        fields[name] = float(
            cols[i % 2].number_input(
                name.replace("_", " "), min_value=0.0, step=step, format=fmt, help=hint, **links.keep(f"sidebar.{name}")
            )
        )
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
    st.caption(
        f"{n:,} parameters ({tfm_limits.fmt_bytes(n * tfm_limits.FLOAT_BYTES)}); a trace at the full "
        f"{cfg.context_length} tokens holds at most {tfm_limits.fmt_bytes(trace.held)} "
        f"({tfm_limits.fmt_bytes(trace.per_block)} per block read)."
    )
    try:
        tfm_limits.check_model(cfg, server.limits())
    except ValueError as e:
        st.error(f"Not built: {message(e)}. Still showing the previous model.")
        return None
    return cfg


def apply_preset(only_missing: bool = False) -> None:
    if st.session_state["sidebar.preset"] == CUSTOM:  # nothing to apply: keep the fields as they are
        links.remember("sidebar.preset")
        return
    st.session_state.pop("sidebar.base", None)  # the preset is the base again
    cfg = ModelConfig.preset(st.session_state["sidebar.preset"])
    for name in FIELDS:
        if not (only_missing and f"sidebar.{name}" in st.session_state):
            st.session_state[f"sidebar.{name}"] = getattr(cfg, name)
    links.remember("sidebar.preset", *(f"sidebar.{n}" for n in FIELDS))
