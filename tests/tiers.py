"""The quick tier's rule (issue #52): `./run_tests.sh -m "not slow"` keeps at least one test module of
every page and every engine module. tests/conftest.py records which test files a session collected
and which of them hold a quick (not slow) test; tests/test_tiers.py checks the rule on that record.

A module is tested by a test file when the file's code imports it or names it (a dotted name in a
string: a monkeypatch target; `-m NAME` of a command line or runpy's `run_module("NAME")` runs
NAME.__main__), itself or through a helper module of tests/ it imports (tests/app/matrix.py, ...);
a page when the code opens it
(`"pages/NAME.py"`, NAME given to open_page / open_cell / switch_page, or a key of a `PAGES` table).
Docstrings and comments do not count. What a tested page or ui module imports is tested with it
(a page test runs them), and so are a tested engine module's parts: the modules of its own package
it imports (tfm.analysis.quant.requantize's blocks), except through an `__init__` that only re-exports."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
# {test file relative to the repository: whether it holds a quick test}, as the session collected it.
COLLECTED = pytest.StashKey[dict]()
OPENERS = {"open_page", "open_cell", "switch_page"}
DOTTED = re.compile(r"\btfm(?:\.\w+)+")
PAGE_FILE = re.compile(r"\bpages/(\w+)\.py\b")


def record(config, items) -> None:
    """Called at collection, after the slow marks are added and before `-m` deselects anything."""
    found = config.stash.setdefault(COLLECTED, {})
    for item in items:
        path = item.path.relative_to(ROOT).as_posix()
        found[path] = found.get(path, False) or item.get_closest_marker("slow") is None


def test_files() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in TESTS.rglob("test_*.py")}


def engine_modules() -> set[str]:
    """Every module of tfm/ by its dotted name (a package by its own: `tfm.analysis`)."""
    out = set()
    for path in (ROOT / "tfm").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def pages() -> set[str]:
    return {f"pages/{p.name}" for p in (ROOT / "pages").glob("*.py")}


def _docstrings(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
    return skip


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _opened(node: ast.Call) -> str | None:
    callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
    if callee in OPENERS and node.args and isinstance(node.args[0], ast.Constant):
        name = str(node.args[0].value)
        return name if name.startswith("pages/") else f"pages/{name}.py"
    return None


def _page_table(node: ast.AST) -> list[str]:
    """The keys of `PAGES = {...}` / `PAGES: dict[...] = {...}` (tests/app/matrix.py's table)."""
    target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
    value = getattr(node, "value", None)
    if isinstance(target, ast.Name) and target.id == "PAGES" and isinstance(value, ast.Dict):
        return [f"pages/{k.value}.py" for k in value.keys if isinstance(k, ast.Constant)]
    return []


def names_in(source: str) -> set[str]:
    """What a test file's code imports or names: dotted module names and `pages/NAME.py`."""
    tree = ast.parse(source)
    skip, names = _docstrings(tree), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
        elif isinstance(node, ast.Attribute) and (dotted := _dotted(node)):
            names.add(dotted)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            names.update(DOTTED.findall(node.value))
            names.update(f"pages/{m}.py" for m in PAGE_FILE.findall(node.value))
        elif isinstance(node, ast.Call) and (page := _opened(node)):
            names.add(page)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            names.update(_page_table(node))
        if isinstance(node, (ast.List, ast.Tuple, ast.Call)):
            names.update(_run_as_main(node))
    return names


def _run_as_main(node: ast.AST) -> list[str]:
    """`NAME.__main__` for each `"-m", "NAME"` pair of a command line and each `run_module("NAME")`."""
    args = node.args if isinstance(node, ast.Call) else node.elts
    text = [a.value if isinstance(a, ast.Constant) else None for a in args]
    pairs = list(zip(text, text[1:]))
    if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "run_module" and text:
        pairs.append(("-m", text[0]))
    return [f"{name}.__main__" for flag, name in pairs if flag == "-m" and isinstance(name, str)]


@functools.lru_cache(maxsize=None)
def _file_names(path: str) -> frozenset[str]:
    return frozenset(names_in((ROOT / path).read_text(encoding="utf-8")))


def _helpers(names: set[str]) -> set[str]:
    """The helper modules of tests/ (not test files) among `names`, as paths."""
    out = set()
    for name in names:
        if name.startswith("tests."):
            path = Path(*name.split(".")).with_suffix(".py")
            if (ROOT / path).is_file() and not path.name.startswith("test_"):
                out.add(path.as_posix())
    return out


def names_of(test_file: str) -> set[str]:
    """`names_in` of a test file and of every helper module it imports, helpers' helpers too."""
    names, seen, todo = set(), set(), {test_file}
    while todo:
        path = todo.pop()
        seen.add(path)
        names |= _file_names(path)
        todo |= _helpers(set(_file_names(path))) - seen
    return names


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(path: Path, node: ast.AST) -> list[str]:
    """The modules an import statement loads (a package and its named submodules)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    pkg = _module_name(path).split(".")
    pkg = pkg if path.name == "__init__.py" else pkg[:-1]
    base = ".".join(pkg[: len(pkg) - node.level + 1] + [node.module or ""]) if node.level else node.module
    return [base.rstrip("."), *(f"{base.rstrip('.')}.{a.name}" for a in node.names)]


def _imports(path: Path) -> tuple[bool, str, tuple[str, ...]]:
    """(whether the module is an `__init__` that only re-exports, its package, what it imports at
    module level)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [t for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom)) for t in _targets(path, node)]
    code = any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in tree.body)
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    return path.name == "__init__.py" and not code, package, tuple(found)


@functools.lru_cache(maxsize=1)
def import_graph() -> dict[str, tuple[bool, str, tuple[str, ...]]]:
    """{module or `pages/NAME.py`: `_imports` of it} of tfm/, ui/ and pages/."""
    graph = {_module_name(p): _imports(p) for p in [*(ROOT / "tfm").rglob("*.py"), *(ROOT / "ui").rglob("*.py")]}
    return graph | {f"pages/{p.name}": _imports(p) for p in (ROOT / "pages").glob("*.py")}


def covers(names: set[str], module: str) -> bool:
    return module in names or any(n.startswith(module + ".") for n in names)


def tested(names: set[str], graph: dict) -> set[str]:
    """The modules of `graph` that `names` test: named ones, then what they carry (the module docstring)."""
    done = {m for m in graph if covers(names, m)}
    todo = list(done)
    while todo:
        module = todo.pop()
        reexports, package, found = graph[module]
        app = module.startswith(("pages/", "ui."))
        for target in () if reexports else found:
            if target in graph and target not in done and (app or target.rsplit(".", 1)[0] == package):
                done.add(target)
                todo.append(target)
    return done


def uncovered(modules: set[str], files: set[str], graph: dict | None = None) -> list[str]:
    """The modules (dotted names or `pages/NAME.py`) no file of `files` tests."""
    named = set().union(*(names_of(f) for f in files)) if files else set()
    return sorted(modules - tested(named, import_graph() if graph is None else graph))
