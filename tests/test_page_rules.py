"""One typed run per page (issue #41): pages ask `ui.run.PromptRun` / `ui.model_run.ModelRun` for
what they draw, so no page builds a cache key or hands a closure to a cache; no page branches on a
model's name; `ui/` modules stay small; a page names what it imports; the attention window, the
token-label format and the Markdown escape are each written once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tfm.loaders.loading import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
CACHE_CALLS = {"derived", "derived_status", "is_cached", "run_traced"}  # ui.cache: keys built by the caller
CACHES = {"PROMPTS", "MODELS"}
MODEL_NAMES = {"smollm2", *REGISTRY}
UI_MAX_LINES = 250


def called_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def cache_misuse(source: str) -> list[str]:
    """What a page must not do: call a cache with a key it builds, hand a lambda to a cache, touch
    the caches themselves, or compare anything with a model's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name, args = called_name(node), [*node.args, *(k.value for k in node.keywords)]
            is_cache = name in CACHE_CALLS or (
                isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "cache"
            )
            if name in CACHE_CALLS:
                found.append(f"{node.lineno}: {name}(...)")
            if is_cache and any(isinstance(a, (ast.Lambda, ast.Tuple)) for a in args):
                found.append(f"{node.lineno}: a lambda or a key tuple given to {name}")
        elif (
            isinstance(node, (ast.Name, ast.Attribute))
            and (getattr(node, "id", None) or getattr(node, "attr", None)) in CACHES
        ):
            found.append(f"{node.lineno}: the cache itself")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            sides += [e for c in sides if isinstance(c, (ast.Tuple, ast.List, ast.Set)) for e in c.elts]
            names = [c.value for c in sides if isinstance(c, ast.Constant)]
            if set(names) & MODEL_NAMES:
                found.append(f"{node.lineno}: compares with a model's name")
    return found


def short_aliases(source: str) -> list[str]:
    """Imports of tfm or ui modules under names of one or two letters (`fs`, `fa`, `wp`)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = getattr(node, "module", None) or ""
            for a in node.names:
                if a.asname and len(a.asname) <= 2 and (module or a.name).split(".")[0] in ("tfm", "ui"):
                    out.append(f"{node.lineno}: {a.name} as {a.asname}")
    return out


def pages() -> list[Path]:
    return sorted((ROOT / "pages").glob("*.py"))


def test_no_page_builds_a_cache_key_or_passes_a_closure_or_branches_on_a_model_name():
    bad = {p.name: found for p in pages() if (found := cache_misuse(p.read_text(encoding="utf-8")))}
    assert not bad, f"ask the typed run (ui/run.py, ui/model_run.py) instead: {bad}"


def test_the_scan_sees_each_kind_of_misuse():
    assert cache_misuse('x = state.derived("a", lambda lm: 1, spec, device)')  # a call and its lambda
    assert cache_misuse('x = cache.finished(("induction", settings))')  # a key tuple
    assert cache_misuse("n = models.PROMPTS.nbytes")
    assert cache_misuse('if run.spec == "smollm2":\n    pass') and cache_misuse('ok = "default" != spec')
    assert cache_misuse('big = spec in ("smollm2", "gpt2")')
    assert not cache_misuse("rows = run.pattern_rows(layer, a, b)\nres = cache.finished(settings)")


def test_every_ui_module_is_small():
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in (ROOT / "ui").rglob("*.py")
    }
    assert sizes and all(n <= UI_MAX_LINES for n in sizes.values()), {
        p: n for p, n in sizes.items() if n > UI_MAX_LINES
    }


def test_pages_and_ui_name_what_they_import():
    files = [*pages(), *(ROOT / "ui").rglob("*.py")]
    bad = {str(p.relative_to(ROOT)): found for p in files if (found := short_aliases(p.read_text(encoding="utf-8")))}
    assert not bad, "e.g. from tfm.viz import sampling as sampling_figs: " + str(bad)
    assert short_aliases("from tfm.viz import sampling as fs") and not short_aliases("import numpy as np")


def code_files() -> list[Path]:
    return [*pages(), *(ROOT / "ui").rglob("*.py"), *(ROOT / "tfm").rglob("*.py")]


def written(pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return [
        f"{p.relative_to(ROOT)}:{n}"
        for p in code_files()
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if rx.search(line)
    ]


def test_the_window_the_token_label_and_the_markdown_escape_are_written_once():
    assert [w.split(":")[0] for w in written(r"^\s*(KEY_)?WINDOW\s*=")] == ["tfm/viz/attention.py"]
    assert [w.split(":")[0] for w in written(r"\} ·\{")] == ["tfm/text/token_view.py"]  # f"{piece} ·{position}"
    assert not written(r"def (md|md_escape|escape_md)\(")
    assert [w.split(":")[0] for w in written(r"def escape_markdown\(")] == ["tfm/core/escape.py"]


# Issue #52: pages import ui and tfm.viz only, name no sidebar key, and keep their body in functions.
# Pages still to be moved over (each still breaks a rule: the list only shrinks).
ENGINE_IMPORTS_LEFT: set[str] = set()
SIDEBAR_KEYS_LEFT: set[str] = set()
TOP_LEVEL_LEFT: set[str] = set()


def engine_imports(source: str) -> list[str]:
    """Imports of the engine (anything under tfm but tfm.viz) or of the services below ui."""
    out = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.module != "tfm" else [f"tfm.{a.name}" for a in node.names]
        out += [
            f"{node.lineno}: {n}"
            for n in names
            if n.split(".")[0] == "services" or n.split(".")[0] == "tfm" and not n.startswith("tfm.viz")
        ]
    return out


def sidebar_keys(source: str) -> list[str]:
    """Session-state keys of the sidebar's values (`sidebar.*`, `app.model_spec`) named by a page."""
    return [
        f"{node.lineno}: {node.value}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value.startswith(("sidebar.", "keep.sidebar.")) or node.value == "app.model_spec")
    ]


def top_level_work(source: str) -> list[str]:
    """Statements a page runs at import besides imports, definitions, constants and its one last call."""
    body = ast.parse(source).body
    body = body[1:] if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else body
    calls = [s for s in body if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)]
    allowed = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
    out = [f"{s.lineno}: {type(s).__name__}" for s in body if not isinstance(s, allowed) and s not in calls[-1:]]
    out += [
        f"{s.lineno}: a call in a constant"
        for s in body
        if isinstance(s, (ast.Assign, ast.AnnAssign))
        and any(
            isinstance(n, ast.Call)
            and not called_name(n)[:1].isupper()  # a constant may build a settings
            and called_name(n) not in ("frozenset", "dict", "tuple")
            for n in ast.walk(s)
        )
    ]  # object
    if not calls or calls[-1] is not body[-1]:
        out.append("the module does not end with one call (main())")
    return out


def rule_breaks(rule) -> dict[str, list[str]]:
    return {p.stem: found for p in pages() if (found := rule(p.read_text(encoding="utf-8")))}


def test_pages_import_ui_and_tfm_viz_only():
    bad = rule_breaks(engine_imports)
    assert set(bad) == ENGINE_IMPORTS_LEFT, (
        "re-export what a page needs through its ui module: "
        f"{ {p: f for p, f in bad.items() if p not in ENGINE_IMPORTS_LEFT} }"
    )


def test_no_page_names_a_sidebar_key():
    bad = rule_breaks(sidebar_keys)
    assert set(bad) == SIDEBAR_KEYS_LEFT, (
        "read the Sidebar that sidebar.render() returns: "
        f"{ {p: f for p, f in bad.items() if p not in SIDEBAR_KEYS_LEFT} }"
    )


def test_page_bodies_live_in_functions():
    bad = rule_breaks(top_level_work)
    assert set(bad) == TOP_LEVEL_LEFT, (
        f"def main(): ... then main(): { {p: f for p, f in bad.items() if p not in TOP_LEVEL_LEFT} }"
    )


def test_the_scan_sees_engine_imports_sidebar_keys_and_top_level_work():
    assert engine_imports("from tfm.analysis import norms") and engine_imports("import tfm.core.escape")
    assert engine_imports("from tfm import analysis") and engine_imports("import tfm")
    assert engine_imports("from services import server") and engine_imports("import services.rooms")
    assert not engine_imports("from tfm.viz import norms as norm_figs\nimport tfm.viz.figure_dicts\nfrom ui import run")
    assert sidebar_keys('seed = st.session_state["sidebar.seed"]') and sidebar_keys('ss.get("sidebar.prompt", "")')
    assert sidebar_keys('spec = ss["app.model_spec"]') and not sidebar_keys('layer = ss["norms.layer"]')
    assert top_level_work('import streamlit as st\nst.title("x")\nmain()')  # work outside main
    assert top_level_work("def main():\n    pass\nmain()\nx = 1")  # not ending with the call
    assert top_level_work("def main():\n    pass\nfor i in range(2):\n    pass\nmain()")
    assert top_level_work("run = current_run()\ndef main():\n    pass\nmain()")  # a call hidden in a constant
    assert not top_level_work("SETTINGS = GraphSettings(max_tokens=64)\ndef main():\n    pass\nmain()")
    assert not top_level_work(
        '"""Doc."""\nimport streamlit as st\nKEYS = ("a", "b")\n\ndef main():\n    pass\n\nmain()'
    )
