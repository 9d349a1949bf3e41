"""A class's generation alone, through the app: N students open the Generation page, then all
press Generate at the same moment (nothing else runs). Prints figures; asserts nothing.

    .venv/bin/python bench/bench_class_generate.py [--students 30] [--tokens 32] [--rounds 2]
        [--model default] [--write-docs[=NAME]]

bench_load.py's visit mixes generation with every other page; this isolates what one server
process spends on a class's generations: the shared batch (bench_batcher.py times it without the
app) plus each session's own work (streaming the text, timeline records, then the rerun that
draws the timeline). Per round: the wall time until the last student's page finished, the p50 /
p95 of each student's run and of its generation alone (the page's "N tokens in X s"), and the
CPU-seconds of the server and of this script (its 30 clients share the machine: if theirs were
large, the figures would be the client's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_load import Peak, Student, free_port, pct, start_server  # noqa: E402
import write_docs  # noqa: E402
from class_prompts import prompt_for  # noqa: E402
from streamlit.proto.WidgetStates_pb2 import WidgetState  # noqa: E402


def press_generate(students: list[Student], tokens: int) -> tuple[list[float], list[float]]:
    """Every student presses Generate at once; each one's run time (click to page finished) and
    generation time (the page's own "N tokens in X s": first request to last token)."""
    start, took, made = threading.Barrier(len(students)), [0.0] * len(students), [0.0] * len(students)

    def student(i: int) -> None:
        s = students[i]
        # a chat model's page opens in chat mode (its own question): continue the student's prompt instead
        plain = [WidgetState(id=s.widget("gen.mode"), string_value="Plain text")] if "gen.mode" in s.widgets else []
        states = plain + [
            WidgetState(id=s.widget("gen.max_new"), int_value=tokens),
            WidgetState(id=s.widget("gen.run"), trigger_value=True),
        ]
        start.wait()
        run = s.run("generate", states)
        if run.errors:
            raise RuntimeError(f"student {i}: {run.errors}")
        took[i] = run.seconds
        summary = [t for t in run.texts if " tokens in " in t and "tokens/s" in t]
        if not summary:
            raise RuntimeError(f"student {i}: no generation summary on the page")
        made[i] = float(summary[0].split(" tokens in ")[1].split(" s")[0])

    threads = [threading.Thread(target=student, args=(i,)) for i in range(len(students))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return took, made


def one_round(r: int, students: list, args, watch: Peak, me: psutil.Process) -> list:
    """Every student presses Generate at once: the round's table row (times, server and own CPU)."""
    server_cpu, own_cpu, t0 = watch.cpu(), sum(me.cpu_times()[:2]), time.perf_counter()
    took, made = press_generate(students, args.tokens)
    row = [
        r + 1,
        f"{time.perf_counter() - t0:.2f} s",
        f"{statistics.median(took):.2f} / {pct(took, 0.95):.2f} s",
        f"{statistics.median(made):.2f} / {pct(made, 0.95):.2f} s",
        f"{watch.cpu() - server_cpu:.2f} s",
        f"{sum(me.cpu_times()[:2]) - own_cpu:.2f} s",
    ]
    print(
        f"round {r + 1}: {args.students} students, {args.tokens} tokens each: all done in {row[1]}; each page "
        f"p50 / p95 {row[2]}, of which generating {row[3]}; server CPU {row[4]}, this script's {row[5]}"
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", default="default", help="model spec every student's link opens")
    write_docs.add_flag(ap, "bench_class_generate")
    args = ap.parse_args()
    write_docs.check(args)
    server = start_server(port := free_port(), [])
    try:
        watch, me = Peak(psutil.Process(server.pid)), psutil.Process()
        print(
            f"{os.cpu_count()} cores; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; model {args.model}"
        )
        Student(port, "A warm-up visit before the class arrives.", 300, args.model).visit(args.tokens)
        students = [Student(port, prompt_for(i), 300, args.model) for i in range(args.students)]
        for s in students:
            s.run("generate")
        rows = [one_round(r, students, args, watch, me) for r in range(args.rounds)]
        header = ["round", "all done", "each page p50 / p95", "generating p50 / p95", "server CPU", "this script's CPU"]
        write_docs.publish(
            args,
            [write_docs.markdown(header, rows)],
            f"model {args.model}, {args.students} students, {args.tokens} tokens each",
        )
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
