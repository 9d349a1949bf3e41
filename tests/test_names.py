"""Every dotted `tfm.` / `ui.` / `services.` name written in the code, its strings and docstrings, the tests,
benches, README, DEVELOPERS.md and docs/ resolves: it imports, and each attribute after the
module exists (a dataclass field counts). Old paths live only in docs/moved.md's table."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"(?<![\w./-])((?:tfm|ui|services)(?:\.[A-Za-z_]\w*)+)")
FOLDERS = ("tfm", "ui", "services", "pages", "tests", "bench", "deploy", "scripts", "examples")
MIGRATION = ROOT / "docs" / "moved.md"  # the one place old paths may be written
MADE_UP = {"tfm.core.fake"}  # tests/test_layers.py checks its walkers on a module that does not exist


def text_files() -> list[Path]:
    found = [*ROOT.glob("*.py"), *ROOT.glob("*.md"), *ROOT.glob("docs/**/*.md")]
    for folder in FOLDERS:
        found += [
            p
            for p in (ROOT / folder).rglob("*")
            if p.suffix in (".py", ".md", ".ipynb", ".sh") and "__pycache__" not in p.parts
        ]
    return [p for p in found if p not in (MIGRATION, Path(__file__).resolve())]  # this file names stale ones


def resolves(name: str) -> bool:
    """The longest importable module prefix, then each attribute (or dataclass field) after it."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if hasattr(obj, attr):
                obj = getattr(obj, attr)
            elif dataclasses.is_dataclass(obj) and attr in obj.__dataclass_fields__:
                return True
            else:
                return False
        return True
    return False


def unresolved() -> dict[str, list[str]]:
    seen: dict[str, bool] = {}
    bad: dict[str, list[str]] = {}
    for path in text_files():
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for m in NAME.finditer(line):
                name = m.group(1)
                if name not in seen:
                    seen[name] = name in MADE_UP or resolves(name)
                if not seen[name]:
                    bad.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{n}")
    return bad


def test_every_dotted_name_in_the_tree_resolves():
    bad = unresolved()
    assert not bad, "\n".join(f"{name}: {', '.join(where[:4])}" for name, where in sorted(bad.items()))


def test_the_check_finds_a_stale_name():
    assert resolves("tfm.core.kv_cache.KVCache") and resolves("tfm.text.chat.ChatPrompt.stop_ids")
    assert not resolves("tfm.cache.KVCache") and not resolves("ui.fig_why")
    assert NAME.findall("see `tfm.core.lazy.LazyTrace`, ui/state.py and tfm.core.") == [
        "tfm.core.lazy.LazyTrace",
        "tfm.core",
    ]


def test_old_paths_are_listed_once_in_the_migration_table():
    rows = [line for line in MIGRATION.read_text(encoding="utf-8").splitlines() if line.startswith("| `tfm.")]
    olds = [row.split("|")[1].strip(" `") for row in rows]
    assert olds and len(olds) == len(set(olds))
    for row in rows:
        new = row.split("|")[2].split("`")[1]
        assert resolves(new), row
