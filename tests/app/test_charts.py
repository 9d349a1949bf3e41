"""Figure export: every chart's camera saves PNG or SVG under a name saying what it shows, and the
interactive HTML file is a full plotly page of the same figure."""

from __future__ import annotations

import json

from tests.app.conftest import open_page


def chart_configs(at):
    return [json.loads(el.proto.config) for el in at.get("plotly_chart")]


def test_chart_file_names_carry_prompt_and_format_choice():
    at = open_page("next_token", "Lily <b>saw</b> a ball")
    cfg = chart_configs(at)[0]
    opts = cfg["toImageButtonOptions"]
    assert opts["format"] == "png" and opts["filename"].startswith("tfm_next-chart_default_Lily-b-saw-b-a-ball")
    assert all(c.isalnum() or c in "-_" for c in opts["filename"])
    at.segmented_control(key="next.chart.format").set_value("svg").run()
    assert not at.exception
    assert chart_configs(at)[0]["toImageButtonOptions"]["format"] == "svg"
    assert at.get("download_button")  # the HTML file, built only when pressed


def test_standalone_html_embeds_the_figure():
    import plotly.graph_objects as go

    from ui.charts import standalone_html

    fig = go.Figure(go.Bar(x=["a"], y=[0.123456]), layout=dict(title="T"))
    page = standalone_html(fig, "tfm · <x> · “prompt”", {"displaylogo": False})
    assert "<title>tfm · &lt;x&gt; · “prompt”</title>" in page and "0.123456" in page
    assert "plotly.js" in page.lower() or "Plotly.newPlot" in page


def test_every_chart_of_the_column_pages_has_the_save_controls():
    """Charts drawn in columns (`charts.show(..., where=column)`) save like the others."""
    for name in ("norms", "shapes", "positions"):
        at = open_page(name)
        assert not at.exception, at.exception
        charts = at.get("plotly_chart")
        formats = [w for w in at.segmented_control if str(w.key).endswith(".format")]
        assert charts and len(formats) == len(charts), (name, len(formats), len(charts))
        assert all(c["toImageButtonOptions"]["filename"].startswith("tfm_") for c in chart_configs(at))
