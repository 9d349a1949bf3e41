"""Warm each process of a class before students arrive: one session per process opens the
Attention page, so the model is loaded, its first prompt traced and its products measured there,
not while the first student on that process waits (SmolLM2's shape on a 16-process GPU machine:
that first page p95 12.7 s cold, 2.5 s warm).

    .venv/bin/python deploy/warm.py PORT [PORT ...] [--model SPEC] [--timeout S]

deploy/run_class.sh runs it on its processes before nginx starts. It speaks Streamlit's websocket
protocol through bench/bench_load.py's client (websocket-client: `scripts/setup.sh dev`).
Exit status 1 when a process could not be warmed (each failure is printed)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_client():
    """bench/bench_load.py as a module (it is a script folder, not a package)."""
    spec = importlib.util.spec_from_file_location("bench_load", ROOT / "bench" / "bench_load.py")
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up there
    spec.loader.exec_module(mod)
    return mod


def warm(client, port: int, model: str | None, timeout: float, failures: list[str]) -> None:
    start = time.perf_counter()
    try:
        student = client.Student(port, "A warm-up visit before the class arrives.", timeout, model)
        run = student.run("attention")
        student.ws.close()
    except Exception as e:  # noqa: BLE001 (a dead process or a timeout: reported, the others go on)
        failures.append(f"port {port}: {type(e).__name__}: {e}")
        return
    if run.errors or run.warnings or not run.charts:  # a warning: e.g. the model asked for was not loaded
        failures.append(f"port {port}: the page showed {run.errors or run.warnings or 'no chart'}")
        return
    print(f"warmed the process on port {port} in {time.perf_counter() - start:.1f} s", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ports", type=int, nargs="+")
    ap.add_argument("--model", help="model spec to load (default: the server's own default model)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds one process may take")
    args = ap.parse_args()
    client, failures = load_client(), []
    threads = [threading.Thread(target=warm, args=(client, p, args.model, args.timeout, failures)) for p in args.ports]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in failures:
        print(f"could not warm {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
