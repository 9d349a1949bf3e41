"""A house people can keep (issue #41): every Python file of the repository (tracked, or new and
not ignored) is at most 400 lines, and every function or method at most 40 (`end_lineno - lineno
+ 1` of its `def`: decorators not counted, a nested function counted on its own and inside its
parent). Split by meaning: a sibling module, a test file per topic, a named helper that reads well."""

from __future__ import annotations

import ast
import functools
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 40


def python_files() -> list[str]:
    """The repository's Python files as git sees them: tracked, plus new ones not ignored."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted({line for line in out.splitlines() if (ROOT / line).is_file()})


def offenders(path: str, source: str) -> list[str]:
    """`path:name:lines` for a file over MAX_FILE_LINES (name `<file>`) and each function over
    MAX_FUNCTION_LINES."""
    found = []
    if (n := len(source.splitlines())) > MAX_FILE_LINES:
        found.append(f"{path}:<file>:{n}")
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                found.append(f"{path}:{node.name}:{n}")
    return found


@functools.lru_cache(maxsize=1)  # both whole-tree tests read the same scan
def every_offender() -> dict[str, list[str]]:
    found = {}
    for path in python_files():
        if bad := offenders(path, (ROOT / path).read_text(encoding="utf-8")):
            found[path] = bad
    return found


def test_every_file_and_function_is_small():
    bad = [o for path, found in every_offender().items() for o in found]
    assert not bad, (
        f"files <= {MAX_FILE_LINES} lines, functions <= {MAX_FUNCTION_LINES} (path:name:lines); "
        "split by meaning:\n" + "\n".join(bad)
    )


def test_the_scan_sees_a_long_file_and_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    long_function = f"@decorator\ndef long():\n{body}\n"  # the def line + 40: 41 lines
    assert offenders("a.py", long_function) == ["a.py:long:41"]
    assert offenders("a.py", "def short():\n" + body.split("\n", 1)[1] + "\n") == []  # exactly 40
    inner_body = "\n".join(f"            x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    nested = f"class C:\n    def method(self):\n        def inner():\n{inner_body}\n"
    assert offenders("b.py", nested) == ["b.py:method:42", "b.py:inner:41"]
    assert offenders("c.py", "x = 1\n" * (MAX_FILE_LINES + 1)) == [f"c.py:<file>:{MAX_FILE_LINES + 1}"]
