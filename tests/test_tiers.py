"""The quick tier (`./run_tests.sh -m "not slow"`, a contributor's loop, issue #52) keeps at least one
test module of every page and every engine module (tests/tiers.py says what counts). The session's
own collection says which files hold a quick test; a session that collected only some files (one
test file run alone) collects the whole tree's quick tier in a subprocess instead."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import tiers

MAIN = "__main__"  # (a module run as a script: tests/test_names.py would import it if spelled whole)


def quick_files(config) -> set[str]:
    found = config.stash.get(tiers.COLLECTED, {})
    if tiers.test_files() <= set(found):
        return {path for path, quick in found.items() if quick}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "not slow",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            "tests",
        ],
        cwd=tiers.ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return {line.split("::")[0] for line in out.stdout.splitlines() if line.startswith("tests/") and "::" in line}


@pytest.fixture(scope="module")
def quick(request) -> set[str]:
    return quick_files(request.config)


def test_every_page_and_engine_module_has_a_quick_test(quick):
    missing = tiers.uncovered(tiers.engine_modules() | tiers.pages(), quick)
    assert not missing, (
        "no quick test module imports or names these: give one a test that is not slow "
        f"(or leave a cheap one unmarked): {missing}"
    )


def test_the_quick_tier_leaves_out_the_slow_files(quick):
    assert quick and quick <= tiers.test_files()
    assert not any(path.startswith("tests/e2e/") for path in quick)  # browsers: slow by folder
    assert "tests/test_deploy.py" not in quick and "tests/test_model.py" in quick


def test_a_module_only_slow_tests_name_is_reported(quick):
    graph = tiers.import_graph()
    imported = {t for _, _, found in graph.values() for t in found}
    leaves = sorted(m for m in tiers.engine_modules() if m not in imported and "__main__" not in m)
    module = next(m for m in leaves if any(tiers.covers(tiers.names_of(f), m) for f in quick))
    naming = {f for f in quick if tiers.covers(tiers.names_of(f), module)}
    assert tiers.uncovered({module, "tfm.core.model"}, quick - naming) == [module]
    assert tiers.uncovered({"pages/why.py"}, set()) == ["pages/why.py"]


def test_what_a_tested_module_carries():
    graph = {
        "pkg": (True, "pkg", ("pkg.a", "pkg.b")),  # an __init__ that only re-exports
        "pkg.a": (False, "pkg", ("pkg.part", "other.x")),
        "pkg.b": (False, "pkg", ()),
        "pkg.part": (False, "pkg", ()),
        "other.x": (False, "other", ()),
        "pages/x.py": (False, "pages", ("other.x",)),
    }
    assert tiers.tested({"pkg"}, graph) == {"pkg"}
    assert tiers.tested({"pkg.a.f"}, graph) == {"pkg", "pkg.a", "pkg.part"}  # its package's parts, not pkg.b
    assert tiers.tested({"pages/x.py"}, graph) == {"pages/x.py", "other.x"}  # a page: all it imports
    assert tiers.uncovered(set(graph), set(), graph) == sorted(graph)


def test_names_are_read_from_code_not_from_docstrings():
    source = '''"""Tests of tfm.analysis.lens.logit and pages/why.py."""
import tfm.core.model as M
from tfm.analysis.lens import compare as LC
from tests.app.conftest import open_page

def test_x(monkeypatch):
    """tfm.core.rope"""
    monkeypatch.setattr("tfm.core.kernels.ONEDNN_MIN_MACS", 0)
    open_page("norms")
    tfm.teach.tour.tour
    subprocess.run([sys.executable, "-m", "tfm.train", "--help"])
    runpy.run_module("tfm", run_name="__main__")
'''
    names = tiers.names_in(source)
    for module in (
        "tfm.core.model",
        "tfm.analysis.lens.compare",
        "tfm.core.kernels",
        "pages/norms.py",
        "tfm.teach.tour",
        f"tfm.train.{MAIN}",
        f"tfm.{MAIN}",
    ):
        assert tiers.covers(names, module), module
    for module in ("tfm.analysis.lens.logit", "pages/why.py", "tfm.core.rope", f"tfm.core.{MAIN}"):
        assert not tiers.covers(names, module), module


def test_helpers_count_for_the_file_that_imports_them():
    names = tiers.names_of("tests/app/test_matrix.py")  # its pages come from tests/app/matrix.py's PAGES
    assert tiers.covers(names, "pages/steer.py") and tiers.covers(names, "pages/look_at.py")
    assert not tiers.covers(tiers.names_in("PAGE = {'steer': 1}\n"), "pages/steer.py")
