"""AppTest helpers: run a page headless and read plotly charts back as numbers."""

from __future__ import annotations

import copy
import dataclasses
import functools

import base64
import os
import tempfile
import json
import re
from pathlib import Path

import numpy as np
import pytest
import streamlit
import streamlit as st
from streamlit.testing.v1 import AppTest

from ui import models, st_private
from services import server

# Tests keep the bundled model (fast, and its numbers are what they assert); tests of SmolLM2
# ask for it (server.configure / TFM_DEFAULT_MODEL=smollm2 for a server they start).
os.environ["TFM_DEFAULT_MODEL"] = "default"
# Class rooms go to a file of this test run, never the user's data folder (services.rooms.default_db).
os.environ.setdefault("TFM_ROOMS_DB", os.path.join(tempfile.mkdtemp(prefix="tfm-rooms-"), "rooms.sqlite3"))

# Models a test process keeps between tests, in bytes (SmolLM2 in float32 is ~0.54 GB; one worker per core).
KEPT_MODEL_BYTES = 2 << 30

# Every new AppTest scans the metadata of every installed package for Streamlit components (most of
# a small page's first run: torch, transformers and ~200 more); the installed set is fixed for a test
# run, so each test process scans once.
st_private.cache_component_scan()

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def open_page(page: str | None = None, prompt: str | None = None, timeout: float = 120) -> AppTest:
    """A fresh session opening `pages/<page>.py` (the home page without one), the prompt given by
    the address as a shared link gives it: one first run, not the home page, then the page, then
    the prompt typed (tests/app/test_shell.py types it; tests/app/matrix.py opens links too)."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    if prompt is not None:
        at.query_params["prompt"] = prompt
    if page:
        at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, at.exception
    return at


def use_random(at: AppTest, preset: str = "tiny", **fields) -> None:
    """Switch the sidebar to a random model of `preset` with some fields changed (text values are
    select boxes, true/false check boxes, numbers number inputs)."""
    at.radio(key="sidebar.model_kind").set_value("random").run()
    at.selectbox(key="sidebar.preset").set_value(preset).run()
    for name, value in fields.items():
        widget = at.selectbox if isinstance(value, str) else at.checkbox if isinstance(value, bool) else at.number_input
        widget(key=f"sidebar.{name}").set_value(value)
    at.run()
    assert not at.exception, at.exception


def as_shown(markdown: str) -> str:
    """An element's Markdown source as the reader sees it: echoed values are escaped (ui.text.plain),
    and a backslash-escaped character shows as itself."""
    return re.sub(r"\\(.)", r"\1", markdown).replace("\u200b", "")  # (zero-width: breaks autolinks)


def decode(value):
    """plotly 7 stores arrays as {"dtype", "bdata", "shape"}; lists stay lists."""
    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        if "shape" in value:
            arr = arr.reshape([int(n) for n in str(value["shape"]).split(",")])
        return arr
    return np.asarray(value)


def charts(at: AppTest) -> list[dict]:
    """Every plotly chart on the page as {"data": [...], "layout": {...}}."""
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def chart_by_title(at: AppTest, text: str) -> dict:
    for fig in charts(at):
        title = fig["layout"].get("title", {})
        title = title.get("text", "") if isinstance(title, dict) else str(title)
        if text in title:
            return fig
    raise AssertionError(
        f"no chart titled with {text!r}; titles: {[str(f['layout'].get('title')) for f in charts(at)]}"
    )


def allow_models(*folders, **limits) -> None:
    """Serve as if started with `--allow-models folder` (and limits changed) for this test."""
    s = server.settings()
    roots = s.model_roots + tuple(Path(f).resolve() for f in folders)
    server.configure(dataclasses.replace(s, limits=s.limits.replace(**limits), model_roots=roots))


@pytest.fixture(autouse=True)
def fresh_caches():
    """The caches are process-wide: each test starts clean, with the default server settings.
    Loaded models stay (loading SmolLM2 is seconds; a model is never mutated, and a spec names
    the same weights in every test: path specs are tmp folders of their own)."""
    models.clear_caches(keep_models=models.MODELS.nbytes < KEPT_MODEL_BYTES)
    st.cache_resource.clear()
    st.cache_data.clear()
    server.configure(None)
    yield
    server.configure(None)


@pytest.fixture
def experiments_once(monkeypatch):
    """The Experiments page's computations (tfm.teach.experiments, fixed seeds) once per test and
    arguments, each call given its own copy: a browser reruns only the section whose control moved
    (a fragment), AppTest reruns every section, so a test moving one control recomputed the rest at
    every step. For tests of the page's behaviour, never of the numbers (test_experiments_page.py)."""
    from tfm.teach import experiments

    for name in (
        "softmax_scaling",
        "residual_gradients",
        "norm_placement_depth",
        "norm_axes",
        "norm_timing",
        "mask_demo",
        "head_split_shapes",
    ):
        monkeypatch.setattr(experiments, name, _once(getattr(experiments, name)))


def _once(fn):
    done = {}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in done:
            done[key] = fn(*args, **kwargs)
        return copy.deepcopy(done[key])

    return wrapper


@pytest.fixture
def downloads(monkeypatch) -> dict:
    """What each st.download_button was given, by its key (the page's data, before the browser)."""
    captured, real = {}, streamlit.download_button

    def spy(label, data, *args, **kwargs):
        captured[kwargs.get("key")] = data
        return real(label, data, *args, **kwargs)

    monkeypatch.setattr(streamlit, "download_button", spy)
    return captured
