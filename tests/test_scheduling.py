"""tests/scheduling.py: long modules first, and an `xdist_group` runs on one worker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import scheduling

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Item:
    path: Path
    name: str
    slow: bool = False

    def get_closest_marker(self, name):
        return name == "slow" and self.slow or None


def test_heavy_first_puts_browser_then_app_and_slow_modules_first_keeping_each_module_in_order():
    items = [
        Item(Path("tests/test_a.py"), "a1"),
        Item(Path("tests/test_b.py"), "b1"),
        Item(Path("tests/test_b.py"), "b2", slow=True),
        Item(Path("tests/app/test_c.py"), "c1"),
        Item(Path("tests/e2e/test_d.py"), "d1"),
        Item(Path("tests/e2e/test_d.py"), "d2"),
        Item(Path("tests/test_e.py"), "e1"),
    ]
    order = [i.name for i in scheduling.heavy_first(items)]
    assert order == ["d1", "d2", "b1", "b2", "c1", "a1", "e1"]


def test_a_group_runs_on_one_worker_and_its_ids_carry_the_group(tmp_path):
    """Two modules of one `xdist_group` under `-n 2 --dist loadgroup`: every test on the same worker
    (pytest 9.2 with pytest-xdist 3.8 spread them over both without the Groups plugin)."""
    for name in ("test_one.py", "test_two.py"):
        (tmp_path / name).write_text(
            "import pytest\n\n"
            "@pytest.mark.xdist_group('g')\n"
            "@pytest.mark.parametrize('i', range(4))\n"
            "def test_x(i):\n    pass\n"
        )
    (tmp_path / "conftest.py").write_text(
        "from tests import scheduling\n\n\n"
        "def pytest_configure(config):\n"
        "    config.pluginmanager.register(scheduling.Groups(), 'groups')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = ["-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider", str(tmp_path)]
    out = subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    ).stdout
    ran = re.findall(r"\[(gw\d)\].*PASSED (\S+)", out)
    assert len(ran) == 8, out
    assert len({worker for worker, _ in ran}) == 1, out
    assert all(test.endswith("@g") for _, test in ran), out


@pytest.mark.parametrize("marks, want", [((), None), (("b", "a"), "a_b"), (("g", "g"), "g")])
def test_group_of_joins_the_names_as_xdist_does(marks, want):
    class Marked:
        def iter_markers(self, name):
            return [pytest.mark.xdist_group(m).mark for m in marks] if name == "xdist_group" else []

    assert scheduling.group_of(Marked()) == want
