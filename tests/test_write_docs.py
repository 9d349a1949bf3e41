"""bench/write_docs.py: a bench's --write-docs replaces its own block of docs/benchmarks.md and
nothing else, refuses a block that is missing or doubled, and every bench that offers the flag
has its block there."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load():
    spec = importlib.util.spec_from_file_location("write_docs", ROOT / "bench" / "write_docs.py")
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


DOC = """# B

<!-- bench:bench_x -->
old x
<!-- /bench:bench_x -->
between
<!-- bench:bench_x-big -->
old big
<!-- /bench:bench_x-big -->
end
"""


def test_replaces_only_its_block(tmp_path):
    wd, doc = load(), tmp_path / "b.md"
    doc.write_text(DOC)
    wd.write_table("bench_x", wd.markdown(["a", "b"], [[1, "2 s"]]), doc)
    assert doc.read_text() == DOC.replace("old x", "| a | b |\n|---|---|\n| 1 | 2 s |")
    wd.write_table("bench_x", "new x\n", doc)  # written again: still one block
    assert doc.read_text() == DOC.replace("old x", "new x")
    wd.write_table("bench_x-big", "new big", doc)  # a name that extends another's
    assert doc.read_text() == DOC.replace("old x", "new x").replace("old big", "new big")


@pytest.mark.parametrize(
    "text, name",
    [
        (DOC, "bench_y"),
        (DOC + "<!-- bench:bench_x -->\n", "bench_x"),
        (DOC.replace("<!-- /bench:bench_x -->", ""), "bench_x"),
        (DOC, "Bench X"),
        (DOC, "../x"),
    ],
)
def test_refuses_a_missing_doubled_or_misnamed_block(tmp_path, text, name):
    wd, doc = load(), tmp_path / "b.md"
    doc.write_text(text)
    with pytest.raises(ValueError, match="block"):
        wd.write_table(name, "t", doc)
    assert doc.read_text() == text


def test_stamp_names_the_command_without_the_flag(monkeypatch):
    wd = load()
    monkeypatch.setattr(sys, "argv", ["bench/bench_x.py", "--students", "30", "--write-docs", "bench_x-big"])
    line = wd.stamp("bench_x-big", "model default")
    assert "`bench/bench_x.py --students 30`" in line and "cores, load average" in line and "model default" in line


def test_every_bench_with_the_flag_has_its_block():
    names = {
        m.group(1)
        for f in (ROOT / "bench").glob("bench_*.py")
        for m in re.finditer(r'write_docs\.add_flag\(ap, "([^"]+)"\)', f.read_text())
    }
    assert {"bench_load", "bench_batcher", "bench_class_generate", "bench_scale", "bench_kernels"} <= names
    wd = load()
    docs = wd.DOCS.read_text(encoding="utf-8")
    for name in names:  # a bench may write one block per variant, NAME.VARIANT (bench_rooms: per store)
        blocks = re.findall(rf"<!-- bench:({re.escape(name)}(?:\.[\w-]+)?) -->", docs)
        assert blocks, f"docs/benchmarks.md has no block for {name}"
        for block in blocks:
            wd._split(block, wd.DOCS)  # raises ValueError naming the block when it is not whole
