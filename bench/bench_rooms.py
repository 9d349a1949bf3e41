"""A class room under load (issue #43): N websocket students in one room behind
`deploy/run_class.sh P`, the teacher's moments and a question, on SmolLM2.

    .venv/bin/python bench/bench_rooms.py [--students 30] [--processes 2] [--moments 5]
        [--store sqlite|redis] [--model smollm2] [--look 0]

Starts `deploy/run_class.sh P` on free ports (its rooms in a fresh SQLite file, or with
`--store redis` in the redis-server the script starts, TFM_ROOMS_REDIS=start), opens a room in
the same store as its teacher would, and lets N students join by the join link through nginx.
Each student speaks Streamlit's websocket protocol (bench_load.py's way) and, as a browser
does, reruns the room banner's fragment when the server asks it to (`auto_rerun`, every
ui.rooms.live.POLL_SECONDS) and follows the page and query string the server sends.

Measured: for each moment (the teacher's own screen, a session that opened the teacher link,
goes to another page and types a new prompt; `--look` seconds later it presses the banner's push
button; meanwhile every other process opens that view itself: ui/rooms/warm.py), how long until each
student's screen shows the new prompt (the press to the end of the run that drew it: p50 / p95 /
max; target p95 <= 3 s); a next-token question with four options: from the moment all N students press Send to
the store counting all N answers (target <= 5 s, all counted); the server's CPU (the process
tree of run_class.sh: every app process, nginx, redis) per student per moment, and per student
per second of idle following (the polling). Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import psutil
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from bench_load import Peak, free_port, pct  # noqa: E402
from class_prompts import prompt_for  # noqa: E402
import write_docs  # noqa: E402
from room_client import Class, RoomStudent, WidgetState  # noqa: E402 (tests use bench_rooms.WidgetState too)

import tfm  # noqa: E402
from tfm.teach import questions as Q  # noqa: E402
from services.rooms import Moment, open_store  # noqa: E402

PAGES = ("next_token", "attention", "tour", "logit_lens", "tokens")


def start_class(processes: int, store: str, model: str, tmp: Path) -> tuple[subprocess.Popen, int, dict]:
    port = free_port()
    env = dict(
        os.environ,
        TFM_PORT=str(port),
        TFM_ROOMS_DB=str(tmp / "rooms.sqlite3"),
        TFM_WARM_MODEL=model,
        OMP_NUM_THREADS="1",
    )
    env.pop("TFM_ROOMS_REDIS", None)
    if store == "redis":
        env["TFM_ROOMS_REDIS"] = "start"
    log = open(tmp / "run_class.log", "w")
    proc = subprocess.Popen(
        ["bash", "deploy/run_class.sh", str(processes), "--", "--default-model", "smollm2"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    for _ in range(1200):
        text = (tmp / "run_class.log").read_text()
        if "behind nginx" in text:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
                break
            except OSError:
                pass
        if proc.poll() is not None:
            raise RuntimeError(f"run_class.sh exited: {text[-2000:]}")
        time.sleep(0.5)
    where = re.search(r"tfm class rooms: (unix://\S+)", text)
    return proc, port, {"redis_url": where.group(1)} if where else {"db": env["TFM_ROOMS_DB"]}


def take_up(port: int, code: str, key: str, model: str) -> RoomStudent:
    """The teacher's screen: a session that opened the private teacher link (on one process)."""
    teacher = RoomStudent(port, code, 300)
    teacher.query = urlencode(
        (("room", code), ("teacher", key), ("model", model), ("prompt", prompt_for(99)), ("seed", "0"))
    )
    teacher.rerun()
    return teacher


def moments(teacher: RoomStudent, klass: Class, count: int, watch: Peak, look: float) -> dict[str, list[float]]:
    """Each moment as a teacher makes one on their own screen: open the page, type a new prompt
    into the sidebar (their process computes the view; the others open it themselves, ui/rooms/
    warm.py), `look` seconds later press the push button. The students' screens are timed from
    the press. Returns each page's p95s."""
    n, p95s = len(klass.students), {}
    for m in range(count):
        prompt, page = prompt_for(100 + m), PAGES[m % len(PAGES)]
        teacher.page, teacher.page_hash = page, ""  # (by name, as a click in the page list)
        teacher.rerun()
        t0 = time.perf_counter()
        teacher.rerun([WidgetState(id=teacher.widgets["sidebar.prompt"], string_value=prompt)])
        assert prompt in teacher.shown, "the teacher's screen did not take the typed prompt"
        print(
            f"moment {m + 1}: the teacher's screen drew {page} on the new prompt in {time.perf_counter() - t0:.2f} s",
            flush=True,
        )
        time.sleep(look)
        for s in klass.students:
            s.waited = []
        cpu0, t0 = watch.cpu(), time.perf_counter()
        teacher.rerun([WidgetState(id=teacher.widgets["room.push"], trigger_value=True)])
        deadline = t0 + 60
        while time.perf_counter() < deadline and sum(prompt in s.shown for s in klass.students) < n:
            time.sleep(0.05)
        took = [s.shown[prompt] - t0 for s in klass.students if prompt in s.shown]
        time.sleep(1.0)  # the last runs' CPU settles
        cpu = watch.cpu() - cpu0
        p95s.setdefault(page, []).append(pct(took, 0.95))
        print(
            f"moment {m + 1} ({page}): {len(took)}/{n} screens show the new prompt; "
            f"p50 {statistics.median(took) if took else float('nan'):.2f} s, p95 {pct(took, 0.95):.2f} s, "
            f"max {max(took, default=float('nan')):.2f} s; server CPU {cpu / n:.3f} CPU-s per student; "
            f"{sum(bool(s.waited) for s in klass.students)} screens waited for work not cached yet "
            f"{sorted({w for s in klass.students for w in s.waited})}",
            flush=True,
        )
    return p95s


def question(room_store, code: str, key: str, klass: Class, model: str, watch: Peak) -> None:
    n, prompt = len(klass.students), prompt_for(7)
    lm = tfm.load(model)
    with torch.inference_mode():
        logits = lm.model(torch.tensor([lm.tokenizer.prompt_ids(prompt)])).logits[0, -1]
    q, truth = Q.ask_next_token(lm, logits, typed=False)
    moment = Moment("classroom", (("model", model), ("prompt", prompt), ("seed", "0")))
    room_store.push(code, key, moment)
    qid = room_store.ask(code, key, Q.to_json(q), Q.truth_to_json(truth), moment)
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline and not all(f"room.send.{qid}" in s.widgets for s in klass.students):
        time.sleep(0.05)
    ready = sum(f"room.send.{qid}" in s.widgets for s in klass.students)
    klass.qid, cpu0, t0 = qid, watch.cpu(), time.perf_counter()
    klass.go.set()  # every student presses Send now
    counted = 0
    while time.perf_counter() < t0 + 30:
        counted = sum(room_store.counts(code, qid).values())
        if counted >= n:
            break
        time.sleep(0.02)
    took = time.perf_counter() - t0
    klass.go.clear()
    print(
        f"question: {ready}/{n} screens showed it; {counted}/{n} answers counted {took:.2f} s after they pressed "
        f"Send (target <= 5 s); server CPU {(watch.cpu() - cpu0) / n:.3f} CPU-s per student",
        flush=True,
    )
    return counted, took


def kill_one(room_store, code: str, klass: Class, proc: subprocess.Popen, port: int) -> str:
    """SIGKILL one app process mid-question; each student whose process died opens their own
    link again (room=; who they are: their browser's cookie) and nginx sends them to the other:
    their answer must be there."""
    qid = klass.qid
    before = room_store.counts(code, qid)
    apps = [p for p in psutil.Process(proc.pid).children(recursive=True) if "streamlit" in " ".join(p.cmdline())]
    victim = apps[0]
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    klass.close()
    back = kept = 0
    for i, s in enumerate(klass.students):
        again = RoomStudent(port, code, 300, s.cookies)
        again.page, again.query = "classroom", s.query  # the student's own address (room=) and cookie
        again.rerun()
        back += 1
        kept += any(f"Your answer: **{s.options[i % len(s.options)]}**" in n.replace("\\", "") for n in again.notes)
        again.ws.close()
    after = room_store.counts(code, qid)
    print(
        f"killed one of {len(apps)} app processes mid-question: counts before {sum(before.values())}, after "
        f"{sum(after.values())} (the same: {before == after}); {back} students reopened their link, "
        f"{kept} saw their own answer",
        flush=True,
    )
    return f"{sum(after.values())}/{sum(before.values())} kept, {kept}/{back} saw their own"


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--moments", type=int, default=5)
    ap.add_argument("--store", choices=("sqlite", "redis"), default="sqlite")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument(
        "--look",
        type=float,
        default=0.0,
        help="seconds the teacher's screen shows a view before the push (0: pushed at once)",
    )
    write_docs.add_flag(ap, "bench_rooms")  # (the block bench_rooms.STORE: one row per store)
    args = ap.parse_args()
    if args.write_docs == "bench_rooms":
        args.write_docs += f".{args.store}"
    write_docs.check(args)
    return args


def idle_following(watch: Peak, klass: Class, n: int) -> None:
    """The server's CPU over 10 s while the class only follows the room (the banner's polling)."""
    cpu0 = watch.cpu()
    time.sleep(10)
    print(
        f"idle following (polling every {klass.students[0].interval:g} s): "
        f"{(watch.cpu() - cpu0) / 10 / n * 1000:.1f} ms of server CPU per student per second",
        flush=True,
    )


def class_session(args, room_store, proc, port) -> list:
    """Students join, follow idle, the teacher pushes moments, asks a question; one process is killed."""
    watch = Peak(psutil.Process(proc.pid))
    made = room_store.create("bench teacher")
    room_store.push(
        made.code,
        made.teacher_key,
        Moment("classroom", (("model", args.model), ("prompt", prompt_for(99)), ("seed", "0"))),
    )
    t0 = time.perf_counter()
    klass = Class(port, made.code, args.students, args.timeout)
    print(
        f"{args.students} students joined in {time.perf_counter() - t0:.1f} s; "
        f"{room_store.room(made.code).students} in the room",
        flush=True,
    )
    idle_following(watch, klass, args.students)
    teacher = take_up(port, made.code, made.teacher_key, args.model)
    p95s = moments(teacher, klass, args.moments, watch, args.look)
    teacher.ws.close()
    print("p95 by page: " + ", ".join(f"{page} {max(v):.2f} s" for page, v in p95s.items()), flush=True)
    counted, took = question(room_store, made.code, made.teacher_key, klass, args.model, watch)
    errors = klass.failures + [e for s in klass.students for e in s.errors]  # (before one process is killed)
    killed = kill_one(room_store, made.code, klass, proc, port)
    print(f"errors: {len(errors)}; load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for e in errors[:10]:
        print("  error:", e)
    return [
        args.store,
        *(f"{max(p95s[page]):.2f} s" if page in p95s else "" for page in PAGES),
        f"{max(max(v) for v in p95s.values()):.2f} s",
        f"{counted}/{args.students} in {took:.2f} s",
        killed,
        len(errors),
    ]


def report_logs(tmp: Path) -> None:
    logs = re.search(r"logs in (\S+)\)", (tmp / "run_class.log").read_text())
    for log in Path(logs.group(1)).glob("app-*.log") if logs else ():
        shutil.copy(log, tmp)  # the script's runtime folder goes with it
        opened = re.findall(r"opened (\w+) for the class in ([\d.]+) s", log.read_text())
        print(
            f"{log.name}: opened the teacher's views itself: " + ", ".join(f"{page} {s} s" for page, s in opened),
            flush=True,
        )
    print(f"logs: {tmp}")


def main() -> None:
    args = arguments()
    tmp = Path(tempfile.mkdtemp(prefix="bench-rooms-"))
    proc, port, where = start_class(args.processes, args.store, args.model, tmp)
    try:
        print(
            f"deploy/run_class.sh {args.processes} on port {port}, rooms in {args.store}; {os.cpu_count()} cores; "
            f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
            flush=True,
        )
        row = class_session(args, open_store(**where), proc, port)
        header = [
            "store",
            *(f"{page} p95" for page in PAGES),
            "push-to-shown p95 (target <= 3 s)",
            "answers counted (target <= 5 s)",
            "one process killed",
            "errors",
        ]
        write_docs.publish(
            args,
            [write_docs.markdown(header, [row])],
            f"{args.students} students, deploy/run_class.sh {args.processes}, {args.model}",
        )
    finally:
        report_logs(tmp)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
