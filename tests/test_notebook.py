"""The example notebook runs top to bottom in a Jupyter kernel (nbclient + ipykernel, the venv's
Python), draws every figure, and is stored without outputs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "tfm_in_a_notebook.ipynb"


def test_saved_without_outputs():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)


def test_kernel_is_this_python():
    """The kernelspec `python3` (ipykernel's, in the venv) starts this interpreter, so the
    notebook sees the venv's packages."""
    from jupyter_client import KernelManager

    assert KernelManager(kernel_name="python3").format_kernel_cmd()[0] == sys.executable


def test_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    # tfm importable as after `pip install -e .`; one thread: the model is small, the machine shared
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) == 15  # every figure of the notebook drew
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "the drawn pattern equals trace.pattern(1)[2]" in printed
    html = tmp_path / "head_view.html"
    assert html.stat().st_size > 1_000_000 and b"plotly" in html.read_bytes()[:200_000].lower()
