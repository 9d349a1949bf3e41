"""deploy/run_class.sh: two app processes behind nginx. A session's websocket works through it,
two sessions each see only their own prompt, and a browser's cookie keeps it on one process while
the class spreads over both. Skipped where nginx is not installed (.ci installs it)."""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed")


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_load", ROOT / "bench" / "bench_load.py")
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up there
    spec.loader.exec_module(mod)
    return mod


def free_base() -> int:
    """A port p with p, p+1, p+2 all free (nginx, then the two processes)."""
    for _ in range(50):
        base = random.randint(20000, 60000)
        try:
            for p in range(base, base + 3):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
    raise RuntimeError("no three consecutive free ports")


def get(url: str, cookie: str | None = None):
    req = urllib.request.Request(url, headers={"Cookie": f"tfm_route={cookie}"} if cookie else {})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status, r.headers


@pytest.fixture(scope="module")
def class_url():
    base = free_base()
    env = dict(os.environ, TFM_PORT=str(base), OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        ["bash", "deploy/run_class.sh", "2"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    said: list[str] = []  # what the script printed (read as it goes: a full pipe would block it)
    threading.Thread(target=lambda: said.extend(proc.stdout), daemon=True).start()
    try:
        for _ in range(240):
            try:
                if get(f"http://127.0.0.1:{base}/_stcore/health")[0] == 200:
                    break
            except OSError:
                if proc.poll() is not None:
                    time.sleep(0.5)
                    pytest.fail(f"run_class.sh exited: {''.join(said)[-2000:]}")
                time.sleep(0.5)
        else:
            pytest.fail("nginx did not answer within 2 minutes")
        yield base, said
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the script's trap stops its processes and nginx
        proc.wait(30)


def test_every_process_is_warmed_before_nginx_opens_the_class(class_url):
    base, said = class_url
    warmed = {int(line.split("port ")[1].split()[0]) for line in said if line.startswith("warmed the process")}
    assert warmed == {base + 1, base + 2}, "".join(said)


def test_a_cookie_keeps_a_browser_on_one_process_and_the_class_spreads(class_url):
    class_url, _ = class_url
    status, headers = get(f"http://127.0.0.1:{class_url}/")
    cookie = headers["Set-Cookie"].split(";")[0].split("=", 1)[1]
    assert status == 200 and len(cookie) == 32
    first = {get(f"http://127.0.0.1:{class_url}/", cookie)[1]["X-TFM-Process"] for _ in range(5)}
    assert len(first) == 1  # sticky: always the same process
    seen = {get(f"http://127.0.0.1:{class_url}/", f"{i:032x}")[1]["X-TFM-Process"] for i in range(40)}
    assert len(seen) == 2  # 40 browsers land on both processes


def test_sessions_work_through_nginx_and_see_only_their_own_prompt(class_url):
    class_url, _ = class_url
    bench = load_bench()
    students = [bench.Student(class_url, bench.prompt_for(i), 240) for i in range(2)]
    for s in students:
        run = s.run("attention")
        assert not run.errors, run.errors  # includes "another student's prompt"
        assert run.charts > 0
        shown = run.widgets["sidebar.prompt"][1].value
        assert shown == s.prompt
        s.ws.close()


def test_warm_reports_a_process_it_could_not_warm(class_url):
    base, _ = class_url
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    bad = subprocess.run(
        [sys.executable, "deploy/warm.py", str(closed), "--timeout", "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and f"could not warm port {closed}" in bad.stderr
    # a model the page cannot load shows a warning (and falls back): not counted as warmed
    wrong = subprocess.run(
        [sys.executable, "deploy/warm.py", str(base + 1), "--model", "bogus:x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert wrong.returncode == 1 and "could not be read" in wrong.stderr, wrong.stderr
    good = subprocess.run(
        [sys.executable, "deploy/warm.py", str(base + 1), "--model", "default"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert good.returncode == 0 and f"warmed the process on port {base + 1}" in good.stdout, good.stderr
