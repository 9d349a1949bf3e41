"""The one way pages draw a plotly chart: on the page, and saved for slides.

`show(fig, name, settings, key=...)` draws the chart with the modebar's camera saving a PNG
or SVG (a per-chart choice) named after the chart, the model, the prompt and the page's
settings, and offers the chart as a standalone interactive HTML file. That file embeds
plotly.js (~4 MB), so it is built only when the button is pressed (a callable `data`).
"""

from __future__ import annotations

import html
import re

import plotly.graph_objects as go
import streamlit as st

FORMATS = ("png", "svg")
MAX_NAME = 120  # characters of a file name, before the extension


def slug(text: str, limit: int = 40) -> str:
    """File-name-safe: letters, digits and dashes only, at most `limit` characters."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:limit].strip("-")


def model_slug() -> str:
    spec = st.session_state.get("app.model_spec", "default")
    if spec.startswith("random:"):
        return "random"
    return slug(spec.removeprefix("path:").rstrip("/").rsplit("/", 1)[-1], 20) or "model"


def file_name(name: str, settings: dict | None = None) -> str:
    """tfm_<chart>_<model>_<prompt start>_<k-v settings>: says what the picture shows."""
    parts = ["tfm", slug(name, 30), model_slug(), slug(st.session_state.get("sidebar.prompt", ""), 30)]
    parts += [f"{slug(str(k), 12)}-{slug(str(v), 12)}" for k, v in (settings or {}).items()]
    return "_".join(p for p in parts if p)[:MAX_NAME]


def describe(settings: dict | None) -> str:
    """The prompt and settings as one readable line (for the HTML file's title)."""
    prompt = st.session_state.get("sidebar.prompt", "")
    extra = ", ".join(f"{k} = {v}" for k, v in (settings or {}).items())
    return f"“{prompt[:80]}{'…' if len(prompt) > 80 else ''}”" + (f" ({extra})" if extra else "")


def standalone_html(fig: go.Figure, title: str, config: dict) -> str:
    """The figure as one self-contained interactive page (plotly.js embedded: works offline)."""
    page = fig.to_html(include_plotlyjs=True, full_html=True, config=config)
    return page.replace("<head>", f'<head><meta charset="utf-8"><title>{html.escape(title)}</title>', 1)


def show(
    fig: go.Figure,
    name: str | None = None,
    settings: dict | None = None,
    key: str | None = None,
    config: dict | None = None,
    where=st,
    **kwargs,
) -> None:
    """Draw `fig` in `where` (a column or container; default: the page), with PNG/SVG saving from the
    modebar and an interactive HTML download. `name` (default: the widget key) goes into the file
    name with the model, prompt and `settings`."""
    if name is None and key is None:
        raise ValueError("charts.show needs a name or a key for the chart")
    name = name or key
    base = key or f"chart.{slug(name)}"
    fname = file_name(name, settings)
    fmt = st.session_state.get(f"{base}.format", "png")
    fmt = fmt if fmt in FORMATS else "png"
    config = {
        **(config or {}),
        "displaylogo": False,
        "toImageButtonOptions": {"format": fmt, "filename": fname, "scale": 2},
    }
    where.plotly_chart(fig, key=key, config=config, **kwargs)
    _save_popover(fig, where, base, fname, f"tfm · {name} · {describe(settings)}", config)


def _save_popover(fig: go.Figure, where, base: str, fname: str, title: str, config: dict) -> None:
    """The chart's 💾 popover: the camera button's format, and the interactive HTML download."""
    with where.popover("Save this chart", icon="💾"):
        st.segmented_control(
            "The camera button in the chart's toolbar saves",
            FORMATS,
            key=f"{base}.format",
            format_func=str.upper,
            default="png",
        )
        st.download_button(
            "Interactive HTML file (~4 MB, works offline)",
            lambda: standalone_html(fig, title, config),
            file_name=f"{fname}.html",
            mime="text/html",
            key=f"{base}.html",
            on_click="ignore",
        )
