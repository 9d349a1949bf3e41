"""A real redis-server for the room tests: started in a tmp folder on a unix socket (no TCP port
to collide on), stopped after. Without redis-server the Redis cases skip locally; in CI
(CI=true) or with REQUIRE_E2E=1 that is an error instead (run_tests.sh installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest


def redis_required() -> bool:
    return os.environ.get("REQUIRE_E2E") == "1" or os.environ.get("CI", "").lower() in ("1", "true")


def _wait_for_socket(proc: subprocess.Popen, sock: Path) -> None:
    """Up to 5 s for redis-server to open its socket; a failure if it exits or never does."""
    for _ in range(100):
        if sock.exists():
            return
        if proc.poll() is not None:
            pytest.fail(f"redis-server exited with {proc.returncode}")
        time.sleep(0.05)
    pytest.fail("redis-server did not open its socket within 5 s")


@contextmanager
def redis_server(folder: Path):
    """Yield a redis:// URL (unix socket) of a fresh redis-server that keeps nothing on disk."""
    exe = shutil.which("redis-server")
    if exe is None:
        if redis_required():
            pytest.fail(
                "redis-server is required (CI or REQUIRE_E2E=1) but not installed: apt-get install redis-server"
            )
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    sock = folder / "redis.sock"
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--unixsocketperm",
            "700",
            "--dir",
            str(folder),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_for_socket(proc, sock)
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
