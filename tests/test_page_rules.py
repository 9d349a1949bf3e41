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
CACHE_CALLS = {"derived", "derived_status", "is_cached", "run_traced"}   # ui.cache: keys built by the caller
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
            is_cache = name in CACHE_CALLS or (isinstance(node.func, ast.Attribute)
                                               and isinstance(node.func.value, ast.Name) and node.func.value.id == "cache")
            if name in CACHE_CALLS:
                found.append(f"{node.lineno}: {name}(...)")
            if is_cache and any(isinstance(a, (ast.Lambda, ast.Tuple)) for a in args):
                found.append(f"{node.lineno}: a lambda or a key tuple given to {name}")
        elif isinstance(node, (ast.Name, ast.Attribute)) and (getattr(node, "id", None) or getattr(node, "attr", None)) in CACHES:
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
    assert cache_misuse('x = state.derived("a", lambda lm: 1, spec, device)')            # a call and its lambda
    assert cache_misuse('x = cache.finished(("induction", settings))')                   # a key tuple
    assert cache_misuse("n = models.PROMPTS.nbytes")
    assert cache_misuse('if run.spec == "smollm2":\n    pass') and cache_misuse('ok = "default" != spec')
    assert cache_misuse('big = spec in ("smollm2", "gpt2")')
    assert not cache_misuse("rows = run.pattern_rows(layer, a, b)\nres = cache.finished(settings)")


def test_every_ui_module_is_small():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in (ROOT / "ui").rglob("*.py")}
    assert sizes and all(n <= UI_MAX_LINES for n in sizes.values()), {p: n for p, n in sizes.items() if n > UI_MAX_LINES}


def test_pages_and_ui_name_what_they_import():
    files = [*pages(), *(ROOT / "ui").rglob("*.py")]
    bad = {str(p.relative_to(ROOT)): found for p in files if (found := short_aliases(p.read_text(encoding="utf-8")))}
    assert not bad, "e.g. from tfm.viz import sampling as sampling_figs: " + str(bad)
    assert short_aliases("from tfm.viz import sampling as fs") and not short_aliases("import numpy as np")


def code_files() -> list[Path]:
    return [*pages(), *(ROOT / "ui").rglob("*.py"), *(ROOT / "tfm").rglob("*.py")]


def written(pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return [f"{p.relative_to(ROOT)}:{n}" for p in code_files()
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if rx.search(line)]


def test_the_window_the_token_label_and_the_markdown_escape_are_written_once():
    assert [w.split(":")[0] for w in written(r"^\s*(KEY_)?WINDOW\s*=")] == ["tfm/viz/attention.py"]
    assert [w.split(":")[0] for w in written(r"\} ·\{")] == ["tfm/text/token_view.py"]   # f"{piece} ·{position}"
    assert not written(r"def (md|md_escape|escape_md)\(")
    assert [w.split(":")[0] for w in written(r"def escape_markdown\(")] == ["tfm/core/escape.py"]
