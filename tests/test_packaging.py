"""tfm as an installable package: pyproject.toml's metadata, the `tfm` console script (its `app`
command serves the app), and a wheel built from the repository (~10 s on the shared 2-core
machine, so it runs here). A fresh-virtualenv `pip install -e .` is checked by hand (README)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tfm import cli

ROOT = Path(__file__).resolve().parents[1]
META = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def requirement_lines(path: Path) -> list[str]:
    return [
        line.strip()
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "-r"))
    ]


def test_metadata_mirrors_requirements_and_names_the_script():
    project = META["project"]
    assert project["name"] == "tfm" and project["requires-python"] == ">=3.11"
    assert project["dependencies"] == requirement_lines(ROOT / "requirements.txt")
    assert "torch==2.13.0" in project["dependencies"]  # the README's pin: the CPU build
    assert project["scripts"] == {"tfm": "tfm.cli:main"}
    assert META["build-system"]["build-backend"] == "setuptools.build_meta"
    module, func = project["scripts"]["tfm"].split(":")
    assert module == cli.__name__ and callable(getattr(cli, func))


def test_every_engine_folder_is_a_package_and_nothing_else_is():
    """A folder of modules without __init__.py would be silently left out of the wheel."""
    from setuptools import find_packages

    found = set(find_packages(str(ROOT), **META["tool"]["setuptools"]["packages"]["find"]))
    folders = {str(p.parent.relative_to(ROOT)).replace(os.sep, ".") for p in (ROOT / "tfm").rglob("*.py")}
    assert found == folders
    assert not {"ui", "services", "pages", "tests", "bench", "scripts"} & {f.split(".")[0] for f in found}


def test_app_command_runs_the_checkouts_app(tmp_path, capsys):
    assert cli.app_argv(["--server.port", "8600"]) == [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(ROOT / "app.py"),
        "--server.port",
        "8600",
    ]
    with pytest.raises(cli.UsageError, match="needs the tfm repository checkout.*pip install -e"):
        cli.app_argv([], checkout=tmp_path)  # what a wheel install (no app beside tfm/) says
    assert cli.main(["app", "--help"]) == 0
    assert "usage: tfm app [STREAMLIT ARGS]" in capsys.readouterr().out
    assert cli.main([]) == cli.EXIT_USAGE
    assert "app" in capsys.readouterr().err  # listed among the commands


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(proc: subprocess.Popen, port: int) -> bytes:
    """The server's health answer, asked every half second for up to 90 s while it runs."""
    deadline, body = time.monotonic() + 90, b""
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read()
        except OSError:
            time.sleep(0.5)
    return body


def test_tfm_app_serves_the_app(tmp_path):
    port = free_port()
    # run from another folder, tfm importable as an installed package would be
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfm",
            "app",
            "--server.headless",
            "true",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--browser.gatherUsageStats",
            "false",
            "--server.fileWatcherType",
            "none",
        ],
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        body = _health(proc, port)
        assert body == b"ok", proc.stdout.read().decode() if proc.poll() is not None else "no answer"
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read()
        assert b"<title>Streamlit</title>" in page or b"streamlit" in page.lower()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_wheel_builds_with_the_engine_only(tmp_path):
    """`pip wheel . --no-deps` (without build isolation: the venv's setuptools, no download), on a
    copy of the files the build reads, so the checkout gets no build/ or egg-info."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "tfm", src / "tfm", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(src),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "out"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "out").glob("tfm-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
        meta = z.read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert {"tfm/__init__.py", "tfm/cli.py", "tfm/viz/notebook.py", "tfm/loaders/convert/llama.py"} <= names
    assert not any(n.startswith(("ui/", "services/", "pages/", "tests/", "assets/")) or n == "app.py" for n in names)
    assert "tfm = tfm.cli:main" in entry
    assert "Requires-Dist: torch==2.13.0" in meta
