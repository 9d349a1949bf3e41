"""Streamlit's internals are used in one module only, and the Streamlit that runs is the one pinned.

Issue #52: private Streamlit names were spread over stopping, rooms and navigation, and the next
release could break all three on a fresh install with no test naming why. ui/st_private.py now
holds every use (its docstring says what each relies on); this test fails on any other module
(app, pages, ui, tests, deploy, scripts) that imports a Streamlit submodule other than the public
`streamlit.testing.v1` / `streamlit.components.v1`, reaches an `_`-prefixed attribute of
`st`/`streamlit`, names one of Streamlit's internal names, or writes a private module's name as
text (one sys.modules probe in services/server.py is allowed: ui/st_private.py says why). bench/ is left out: its scripts
speak Streamlit's websocket protocol (its protobuf messages) and time its script runner by design.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import streamlit
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.test_house import python_files

ROOT = Path(__file__).resolve().parents[1]
FENCE, FENCE_MODULE = "ui/st_private.py", "ui.st_private"
SELF = "tests/test_streamlit_fence.py"  # names the internals as data, in its cases
SCANNED = ("app.py", "pages/", "ui/", "services/", "tests/", "deploy/", "scripts/")
PUBLIC_MODULES = ("streamlit.testing.v1", "streamlit.components.v1")
# Module names written as text (a sys.modules probe), allowed where ui/st_private.py's docstring says why.
NAMED_ONLY = {("services/server.py", "streamlit.web.bootstrap")}
# Streamlit's internal names tfm has used or would reach for (ui/st_private.py uses them).
INTERNAL_NAMES = {
    "get_script_run_ctx",
    "add_script_run_ctx",
    "ScriptRunContext",
    "script_requests",
    "ScriptRequests",
    "ScriptRequestType",
    "RerunData",
    "_rerun_data",
    "Runtime",
    "_get_async_objs",
    "connect_session",
    "handle_backmsg",
    "mark_session_nonresumable",
    "SessionClient",
    "PagesManager",
    "uses_pages_directory",
    "TESTING_KEY",
    "manifest_scanner",
    "LocalScriptRunner",
    "_mpa_v1",
}


def _streamlit_aliases(tree: ast.AST) -> set[str]:
    """Names this module binds to the streamlit package (`import streamlit as st`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name for a in node.names if a.name == "streamlit"}
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _fenced_names(tree: ast.AST) -> set[str]:
    """Names this module imports from the fence (`from ui.st_private import RerunData`): fine."""
    return {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == FENCE_MODULE
        for a in node.names
    }


def _import_use(node: ast.Import | ast.ImportFrom) -> str | None:
    if isinstance(node, ast.ImportFrom):
        if node.module == FENCE_MODULE:
            return None
        if node.module and node.module.startswith("streamlit.") and not node.module.startswith(PUBLIC_MODULES):
            return f"from {node.module} import"
    for a in node.names:
        if a.name.startswith("streamlit.") and not a.name.startswith(PUBLIC_MODULES):
            return f"import {a.name}"
        if a.name.split(".")[-1] in INTERNAL_NAMES:
            return f"internal name {a.name}"
    return None


def _names_module(text: str) -> bool:
    return re.fullmatch(r"streamlit(\.\w+)+", text) is not None and not text.startswith(PUBLIC_MODULES)


def private_uses(path: str, source: str) -> list[str]:
    """`path:line: what` for each use of a Streamlit internal in this module's code."""
    tree, found = ast.parse(source, filename=path), []
    aliases, fenced = _streamlit_aliases(tree), _fenced_names(tree)
    for node in ast.walk(tree):
        what = None
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            what = _import_use(node)
        elif isinstance(node, ast.Attribute):
            if _root(node) in aliases and node.attr.startswith("_") and not node.attr.startswith("__"):
                what = f"streamlit attribute {node.attr}"
            elif node.attr in INTERNAL_NAMES and _root(node) != "st_private":
                what = f"internal name {node.attr}"
        elif isinstance(node, ast.Name) and node.id in INTERNAL_NAMES and node.id not in fenced:
            what = f"internal name {node.id}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _names_module(node.value):
            what = None if (path, node.value) in NAMED_ONLY else f"module named in text {node.value}"
        if what:
            found.append(f"{path}:{node.lineno}: {what}")
    return found


def test_streamlit_internals_are_used_in_st_private_only():
    bad = []
    for path in python_files():
        if path.startswith(SCANNED) and path not in (FENCE, SELF):
            bad += private_uses(path, (ROOT / path).read_text(encoding="utf-8"))
    assert not bad, (
        "Streamlit internals belong in ui/st_private.py (its docstring says what each relies "
        "on); call a function from it instead:\n" + "\n".join(bad)
    )


def test_the_scan_sees_every_kind_of_private_use():
    cases = {
        "from streamlit.runtime.scriptrunner import get_script_run_ctx": 1,
        "from streamlit import runtime\nruntime.Runtime.instance()": 1,
        "from somewhere import get_script_run_ctx\nget_script_run_ctx()": 2,
        "import streamlit.runtime.pages_manager": 1,
        "import streamlit as st\nst._main.write(1)": 1,
        "import streamlit as s2\nx = s2.runtime._x": 1,
        "def f(requests):\n    return requests._rerun_data": 1,
        "def f(ctx):\n    return ctx.script_requests": 1,
        "x = PagesManager.uses_pages_directory": 2,
        "import sys\nx = 'streamlit.web.bootstrap' in sys.modules": 1,
        "x = 'streamlit.testing.v1'; y = 'see streamlit.io'": 0,
        "from ui.st_private import RerunData\nfrom ui import st_private\nst_private.Runtime; RerunData()": 0,
        "from streamlit.testing.v1 import AppTest\nimport streamlit as st\nst.session_state.x = 1": 0,
        "class A:\n    def f(self):\n        return self._state": 0,  # tfm's own private names are its business
    }
    for source, n in cases.items():
        assert len(private_uses("m.py", source)) == n, (source, private_uses("m.py", source))


def _pins() -> dict[str, str]:
    """The streamlit requirement as requirements.txt and pyproject.toml write it."""
    req = next(line for line in (ROOT / "requirements.txt").read_text().splitlines() if re.match(r"streamlit\b", line))
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {"requirements.txt": req, "pyproject.toml": next(d for d in deps if re.match(r"streamlit\b", d))}


def test_streamlit_is_pinned_to_a_range_with_a_ceiling_in_both_files():
    pins = _pins()
    assert len(set(pins.values())) == 1, pins
    spec = SpecifierSet(pins["requirements.txt"].removeprefix("streamlit"))
    assert any(s.operator in ("<", "<=", "==", "~=") for s in spec), f"no ceiling: {spec}"
    assert Version("99.0") not in spec


def test_the_installed_streamlit_is_the_pinned_one():
    spec = SpecifierSet(_pins()["requirements.txt"].removeprefix("streamlit"))
    assert Version(streamlit.__version__) in spec, (
        f"streamlit {streamlit.__version__} is installed, the tests ran on {spec}: install the pinned range, "
        "or check ui/st_private.py's uses against the new release and widen the pin"
    )
