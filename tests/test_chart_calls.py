"""Every chart on every page goes through `ui.charts.show` (PNG/SVG from the camera, a standalone
HTML download): no page or ui module calls plotly_chart itself."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A chart redrawn at every training step into one placeholder: the finished chart goes through charts.show.
ALLOWED = {("ui/encdec_parts.py", 'chart.plotly_chart(encdec_figs.loss_figure(losses, "Training loss (live)")')}


def direct_calls() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted([*ROOT.glob("pages/*.py"), *ROOT.glob("ui/*.py"), ROOT / "app.py"]):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "ui/charts.py":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"plotly_chart\s*\(", line) and not any(rel == f and s in line for f, s in ALLOWED):
                found.append((rel, n, line.strip()))
    return found


def test_no_page_draws_a_plotly_chart_without_charts_show():
    assert direct_calls() == [], "use charts.show(fig, name, settings, key=..., where=column)"


def test_the_scan_finds_a_direct_call_and_the_allowed_live_chart_is_still_there():
    source = (ROOT / "ui/encdec_parts.py").read_text(encoding="utf-8")
    assert all(s in source for _, s in ALLOWED)  # the exception is not stale
    assert re.search(r"plotly_chart\s*\(", "    left.plotly_chart(fig, key='x')")
