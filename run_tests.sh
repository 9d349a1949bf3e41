#!/usr/bin/env bash
# Set up (first time) and run the whole test suite, browser tests included.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh dev ${TFM_GEMMA:+--gemma}   # TFM_GEMMA=1: Gemma 3 270M too (CI: its real-file tests)
# nginx-light: tests/test_deploy.py runs the class setup (deploy/run_class.sh) through it.
# redis-server: tests/test_rooms.py runs every room test against a real Redis too (CI fails without it).
if ! command -v chromium >/dev/null 2>&1 || ! command -v nginx >/dev/null 2>&1 || ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-liberation nginx-light redis-server >/dev/null
  else
    echo "chromium, nginx or redis-server not found: browser, deploy and Redis room tests will be skipped (REQUIRE_E2E=1 makes the browser's an error)" >&2
  fi
fi
# One torch thread per test process: faster when the machine is shared, same results.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# One test process per core (pytest-xdist): TFM_TEST_WORKERS=0 runs them in this process (a debugger).
# loadgroup: tests marked @pytest.mark.xdist_group(name) share one worker (Gemma 3's real-file module
# loads its model and transformers' oracle once); every other test is handed out as by plain load.
exec .venv/bin/python -m pytest -n "${TFM_TEST_WORKERS:-auto}" --dist loadgroup "$@"
