"""A failed browser test's report says where its Streamlit server was (tests/e2e/conftest.py): each
thread's stack from py-spy and the end of the server's log, so an input the server never answered
(issue #52) is explained by the run that saw it."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from tests.e2e import conftest as e2e

WAITER = """import threading, time
threading.Thread(target=lambda: threading.Event().wait(), name="tfm-waiting-here", daemon=True).start()
print("ready", flush=True)
time.sleep(120)"""


@pytest.fixture
def server(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    proc = subprocess.Popen([sys.executable, "-c", WAITER], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    yield proc.pid, log
    proc.kill()
    proc.wait()


def test_the_report_holds_each_threads_stack_and_the_logs_end(server):
    pid, log = server
    text = e2e.server_report(pid, log, lines=5)
    assert f"Process {pid}" in text and "tfm-waiting-here" in text and "wait (threading.py" in text, text[:2000]
    assert text.endswith("line 95\nline 96\nline 97\nline 98\nline 99") and "line 94" not in text


class _Outcome:
    def __init__(self, report):
        self.report = report

    def get_result(self):
        return self.report


@pytest.mark.parametrize("when, outcome, added", [("call", "failed", 1), ("call", "passed", 0), ("setup", "failed", 0)])
def test_only_a_failed_test_call_gets_the_servers_sections(server, monkeypatch, when, outcome, added):
    monkeypatch.setattr(e2e, "SERVERS", [server])
    report = SimpleNamespace(when=when, failed=outcome == "failed", sections=[])
    hook = e2e.pytest_runtest_makereport(item=None, call=None)
    next(hook)
    with pytest.raises(StopIteration):
        hook.send(_Outcome(report))
    assert len(report.sections) == added
    if added:
        name, text = report.sections[0]
        assert name == f"server {server[0]} at the failure" and "tfm-waiting-here" in text
