"""How the suite is handed out to pytest-xdist's workers (run_tests.sh: `-n auto --dist loadgroup`).

Workers take tests in collection order as they free up, so `heavy_first` orders whole modules:
browser modules, then AppTest pages and slow (real-model) modules, then the engine's short tests; the
run ends on those instead of one worker finishing a long test while the other idles. Tests marked
`xdist_group(name)` run on one worker (a real-model module loads its model and oracle once).

`Groups` keeps that promise on pytest >= 9.2: pytest-xdist 3.8 tells its scheduler a test's group by
appending "@name" to the test's `_nodeid`, which pytest 9.2's structured node ids no longer read, so
every group was silently spread over both workers (pytest-dev/pytest-xdist#1386). It writes the same
suffix into the id pytest reads, where xdist's did not land.
"""

from __future__ import annotations

import pytest


def heavy_first(items: list) -> list:
    """The items, each module's kept together and in its own order, in three runs: browser modules
    (tests/e2e), then modules of AppTest pages (tests/app) or holding a slow test, then the rest."""
    rank: dict = {}
    for item in items:
        parts = item.path.parts
        here = 0 if "e2e" in parts else 1 if "app" in parts or item.get_closest_marker("slow") else 2
        rank[item.path] = min(rank.get(item.path, 2), here)
    return sorted(items, key=lambda item: rank[item.path])


def group_of(item) -> str | None:
    """The worker group of a test: its `xdist_group` marks' names joined as xdist joins them."""
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    return "_".join(sorted(names)) or None


class Groups:
    """Registered by tests/conftest.py; runs after pytest-xdist's own collection hook."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        if not getattr(config.option, "loadgroup", False):  # set on workers of `--dist loadgroup` only
            return
        for item in items:
            group = group_of(item)
            if group and not item.nodeid.endswith(f"@{group}"):
                item._id = type(item._id).parse(f"{item.nodeid}@{group}")
