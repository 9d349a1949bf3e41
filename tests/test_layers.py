"""The house rules of tfm's packages (DEVELOPERS.md, "The map"): imports only go down the layers,
no module imports another inside a function, and the module import graph has no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("core", "text", "loaders", "generation", "analysis", "teach", "train", "viz")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    p = ROOT.joinpath(*name.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def targets(path: Path, node: ast.AST) -> list[str]:
    """The tfm modules an import statement loads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "tfm"]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        pkg = module_name(path).split(".")
        pkg = pkg if path.name == "__init__.py" else pkg[:-1]
        base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    if base.split(".")[0] != "tfm":
        return []
    subs = [f"{base}.{a.name}" for a in node.names if is_module(f"{base}.{a.name}")]
    return subs if len(subs) == len(node.names) else [base] + subs


def all_modules() -> dict[str, tuple[Path, ast.Module]]:
    return {module_name(p): (p, ast.parse(p.read_text())) for p in sorted((ROOT / "tfm").rglob("*.py"))}


def layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else None


def module_level_imports(tree: ast.Module) -> list[ast.AST]:
    """Imports that run when the module is imported (including under a module-level if/try)."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, (ast.If, ast.Try)):
            todo += (
                node.body
                + node.orelse
                + getattr(node, "finalbody", [])
                + [s for h in getattr(node, "handlers", []) for s in h.body]
            )
    return found


def test_every_package_is_a_layer_and_the_top_is_small():
    packages = sorted(p.name for p in (ROOT / "tfm").iterdir() if (p / "__init__.py").is_file())
    assert packages == sorted(LAYERS)
    entries = [p.name for p in (ROOT / "tfm").iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 12, entries


def test_imports_only_go_down():
    wrong = []
    for name, (path, tree) in all_modules().items():
        mine = layer(name)
        if mine is None:  # tfm/__init__.py, cli.py, __main__.py: the top
            continue
        for node in module_level_imports(tree):
            for target in targets(path, node):
                theirs = layer(target)
                if theirs is None or theirs > mine or (theirs == mine and target.split(".")[1] != name.split(".")[1]):
                    wrong.append(f"{name} imports {target}")
    assert not wrong, wrong


def test_no_import_of_tfm_inside_a_function():
    inner = []
    for name, (path, tree) in all_modules().items():
        top = set(map(id, module_level_imports(tree)))
        for node in ast.walk(tree):
            if id(node) not in top and targets(path, node):
                inner.append(f"{name}:{node.lineno}")
    assert not inner, inner


def test_the_import_graph_has_no_cycle():
    graph = {
        name: {t for node in module_level_imports(tree) for t in targets(path, node) if t != name}
        for name, (path, tree) in all_modules().items()
    }
    # a package imports its own submodules through __init__: an edge package -> member is not a cycle
    # with the member importing a sibling, so drop edges from a package to its own members
    graph = {n: {t for t in ts if not t.startswith(n + ".")} for n, ts in graph.items()}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(n: str, stack: list[str]) -> bool:
        state[n] = 1
        for t in sorted(graph.get(n, ())):
            if state.get(t) == 1:
                cycle.extend(stack[stack.index(t) :] + [n, t] if t in stack else [n, t])
                return True
            if t not in state and visit(t, stack + [n]):
                return True
        state[n] = 2
        return False

    for n in sorted(graph):
        if n not in state and visit(n, []):
            break
    assert not cycle, " -> ".join(cycle)


def test_the_checks_see_a_violation(tmp_path):
    """The walkers find an upward import, an import inside a function and a cycle when present."""
    tree = ast.parse("from ..viz import attention\ndef f():\n    from ..core import model\n")
    path = ROOT / "tfm" / "core" / "fake.py"
    assert [t for n in module_level_imports(tree) for t in targets(path, n)] == ["tfm.viz.attention"]
    assert layer("tfm.viz.attention") > layer("tfm.core.fake")
    inner = [n for n in ast.walk(tree) if n not in module_level_imports(tree) and targets(path, n)]
    assert len(inner) == 1


def imported_tops(tree: ast.Module) -> set[str]:
    """The top-level package of every absolute import anywhere in a module (inside functions too)."""
    tops = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            tops.add(node.module.split(".")[0])
    return tops


def test_services_sit_between_the_engine_and_the_app():
    """services/ (the server's parts without Streamlit) never imports ui or streamlit; tfm never
    imports services or ui. The app (ui, pages) imports services."""
    wrong = [
        f"{p.relative_to(ROOT)} imports {t}"
        for p in sorted((ROOT / "services").rglob("*.py"))
        for t in imported_tops(ast.parse(p.read_text())) & {"ui", "streamlit", "pages"}
    ]
    wrong += [
        f"{p.relative_to(ROOT)} imports {t}"
        for p in sorted((ROOT / "tfm").rglob("*.py"))
        for t in imported_tops(ast.parse(p.read_text())) & {"services", "ui"}
    ]
    assert not wrong, wrong
    assert imported_tops(ast.parse("import streamlit as st\ndef f():\n    from ui import x\n")) == {"streamlit", "ui"}
