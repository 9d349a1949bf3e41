#!/usr/bin/env bash
# Would the tree still keep the house sizes once `ruff format .` runs? Copies the working tree to a
# temporary folder (never touching this one), formats the copy, and runs the two size tests there:
# files <= 400 lines and functions <= 40 (tests/test_house.py), ui modules <= 250
# (tests/test_page_rules.py), and `ruff check` on the formatted copy. Prints each offender as
# path:name:lines. Exit status: pytest's.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The files git sees (tracked, or new and not ignored), as the size test lists them.
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done \
  | tar -cf - --null -T - | tar -xf - -C "$tmp"
ln -s "$(readlink -f .venv)" "$tmp/.venv"
git -C "$tmp" init -q && git -C "$tmp" add -A >/dev/null   # test_house lists files through git
cd "$tmp"
.venv/bin/ruff format -q .
.venv/bin/ruff check -q . || echo "ruff check fails once formatted (a noqa on a line the format moved?)"
# Every offender in full (pytest's message is cut), and those within MARGIN lines of a limit.
MARGIN=${MARGIN:-2} .venv/bin/python - <<'PY'
import os, sys
sys.path.insert(0, "tests")
import test_house as h
margin = int(os.environ["MARGIN"])
for path in h.python_files():
    src = open(path, encoding="utf-8").read()
    h.MAX_FILE_LINES, h.MAX_FUNCTION_LINES = 400 - 4 * margin, 40 - margin
    near = h.offenders(path, src)
    h.MAX_FILE_LINES, h.MAX_FUNCTION_LINES = 400, 40
    over = set(h.offenders(path, src))
    if path.startswith("ui/") and (n := len(src.splitlines())) > 250 - 4 * margin:
        near.append(f"{path}:<ui module>:{n}")
        if n > 250:
            over.add(near[-1])
    for o in near:
        print(("OVER " if o in over else "near ") + o)
PY
OMP_NUM_THREADS=1 .venv/bin/python -m pytest -n 0 -q -p no:cacheprovider --tb=short \
  "tests/test_house.py::test_every_file_and_function_is_small" \
  "tests/test_page_rules.py::test_every_ui_module_is_small" "$@" | sed "s#$tmp#.#g"
