"""Tables written by the bench scripts, not by hand. A script run with `--write-docs` puts its
table into docs/benchmarks.md, replacing what lies between `<!-- bench:NAME -->` and
`<!-- /bench:NAME -->` (NAME: the script's name, or `--write-docs=NAME` for another block, e.g.
one per machine). The block must exist: a misspelt name is refused, never appended somewhere.
Every table is stamped with the date, the command and the machine that measured it."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shlex
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
SECTION = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def cpu() -> str:
    """The CPU's model name, core count and load average: what a figure from this machine depends on."""
    name = platform.processor() or "?"
    try:
        name = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{name}, {os.cpu_count()} cores, load average {load:.1f}"


def markdown(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def stamp(section: str, note: str = "") -> str:
    """One line: when, which command (this run's, less --write-docs), on what (and `note`)."""
    argv, shown = sys.argv[1:], []
    for i, a in enumerate(argv):
        if a.startswith("--write-docs") or (i and argv[i - 1] == "--write-docs" and a == section):
            continue
        shown.append(shlex.quote(a))
    command = " ".join([f"bench/{Path(sys.argv[0]).name}", *shown])
    return f"Measured {datetime.date.today().isoformat()}: `{command}`; {cpu()}{'; ' + note if note else ''}."


def _split(section: str, path: Path) -> tuple[str, str]:
    """The text before the block named `section` (its start marker included) and after it (its end
    marker included); ValueError when `path` has no such block, or more than one."""
    if not SECTION.fullmatch(section):
        raise ValueError(f"{section!r} is not a block name: use lower-case letters, digits, '_', '-' or '.'")
    start, end = f"<!-- bench:{section} -->", f"<!-- /bench:{section} -->"
    text = path.read_text(encoding="utf-8")
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(
            f"{path.name} needs exactly one block '{start}' ... '{end}': write those two lines where the table belongs"
        )
    head, rest = text.split(start)
    return head + start, end + rest.split(end)[1]


def write_table(section: str, markdown: str, path: Path = DOCS) -> None:
    """Replace the block named `section` in `path` with `markdown`."""
    head, tail = _split(section, path)
    path.write_text(f"{head}\n{markdown.strip()}\n{tail}", encoding="utf-8")


def add_flag(ap: argparse.ArgumentParser, section: str) -> None:
    ap.add_argument(
        "--write-docs",
        nargs="?",
        const=section,
        metavar="NAME",
        help=f"also write the table into docs/benchmarks.md's block NAME (default {section})",
    )


def check(args: argparse.Namespace) -> None:
    """Before the run: a --write-docs block that does not exist fails now, not after the measuring."""
    if args.write_docs:
        try:
            _split(args.write_docs, DOCS)
        except ValueError as e:
            raise SystemExit(f"--write-docs: {e}") from None


def publish(args: argparse.Namespace, tables: list[str], note: str = "") -> None:
    """With --write-docs: the tables, stamped, into their block (nothing otherwise)."""
    if args.write_docs:
        write_table(args.write_docs, "\n\n".join([*tables, stamp(args.write_docs, note)]))
        print(f"wrote block {args.write_docs!r} of {DOCS}")
