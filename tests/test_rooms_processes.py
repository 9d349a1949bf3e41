"""A class room served by two real app processes (deploy/run_class.sh 2, one SQLite rooms file,
the bundled model), driven by Streamlit's websocket protocol as phones drive it
(bench/bench_rooms.py's client):

- the process that did not draw the teacher's screen opens the teacher's view itself before the
  push (ui/rooms/warm.py), so its students' screens compute nothing when they follow;
- SIGKILLing one process mid-question loses no answer, and each of its students, opening their own
  address again (their browser keeps who they are: a cookie), is taken up by the other process,
  sees their answer and can still change it.

Whether a screen computed something is what the page itself shows: a status line ("Running the
model on N tokens…", "Decoding positions…") is drawn only for work that is not cached yet
(ui.progress.with_status). Skipped where nginx is not installed (.ci installs it)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlencode

import psutil
import pytest
import torch

from tests.test_deploy import free_base, get
from tfm.teach import questions as Q
from ui import models
from services.rooms import Moment, open_store

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed")]
MODEL = "default"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_rooms", ROOT / "bench" / "bench_rooms.py")
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    """(nginx port, the two processes' ports, the rooms store, the logs folder, the script)."""
    base, db = free_base(), tmp_path_factory.mktemp("rooms") / "rooms.sqlite3"
    env = dict(os.environ, TFM_PORT=str(base), OMP_NUM_THREADS="1", TFM_ROOMS_DB=str(db), TFM_WARM_MODEL=MODEL)
    env.pop("TFM_ROOMS_REDIS", None)
    proc = subprocess.Popen(
        ["bash", "deploy/run_class.sh", "2", "--", "--default-model", MODEL],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    said: list[str] = []
    threading.Thread(target=lambda: said.extend(proc.stdout), daemon=True).start()
    try:
        for _ in range(480):
            try:
                if get(f"http://127.0.0.1:{base}/_stcore/health")[0] == 200:
                    break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"run_class.sh exited: {''.join(said)[-2000:]}")
                time.sleep(0.5)
        else:
            pytest.fail("nginx did not answer within 4 minutes")
        logs = Path(re.search(r"logs in (\S+)\)", "".join(said)).group(1))
        yield base, (base + 1, base + 2), open_store(db), logs, proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def until(what, seconds: float = 120, every: float = 0.2):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"not within {seconds} s: {what.__doc__ or what}")


def joined(bench, port: int, code: str, nick: str):
    s = bench.RoomStudent(port, code, 240)
    s.join(code, nick)
    assert not s.errors, s.errors
    return s


def follow(s, done, seconds: float = 120) -> None:
    """Poll as the phone's banner does (its fragment, every second) until `done()`."""

    def polled():
        if not done():
            s.rerun(fragment=s.fragment)
        return done()

    until(polled, seconds, every=0)


def test_the_other_process_opens_the_teachers_view_before_the_push(klass):
    bench = load_bench()
    _, (a, b), store, logs, _ = klass
    made = store.create("teacher")
    ada = joined(bench, b, made.code, "Ada")  # on the process the teacher's screen is not on
    control = bench.RoomStudent(b, made.code, 240)  # the oracle: a never-seen prompt computes on b
    control.page, control.query = "logit_lens", urlencode({"model": MODEL, "prompt": "Nobody showed this prompt."})
    control.rerun()
    assert any(w.startswith("Running the model on") for w in control.waited), control.waited
    opened = len(re.findall(r"opened logit_lens for the class", (logs / f"app-{b}.log").read_text()))
    params = {"model": MODEL, "prompt": "The teacher looks at the lens of this prompt first.", "seed": "0"}
    teacher = bench.RoomStudent(a, made.code, 240)
    teacher.query = urlencode({"room": made.code, "teacher": made.teacher_key, **params})
    teacher.rerun()  # the teacher link: this session is the room's teacher
    teacher.page, teacher.page_hash, teacher.query = "logit_lens", "", urlencode(params)
    teacher.rerun()
    assert any(w.startswith("Running the model on") for w in teacher.waited)  # a's first sight of it
    until(lambda: len(re.findall(r"opened logit_lens for the class", (logs / f"app-{b}.log").read_text())) > opened)
    ada.waited = []
    teacher.rerun([bench.WidgetState(id=teacher.widgets["room.push"], trigger_value=True)])
    # the moment holds what the teacher's screen shows, the page's own default view included (#50)
    assert store.room(made.code).moment == Moment("logit_lens", tuple(sorted({**params, "lens": "logit"}.items())))
    follow(ada, lambda: params["prompt"] in ada.shown)
    assert ada.page == "logit_lens" and not ada.errors, ada.errors
    assert ada.waited == [], f"b computed the pushed view for its student: {ada.waited}"
    before = store.room(made.code)  # a student's screen sending the teacher's push button does nothing
    ada.query = urlencode({**parse_qs_one(ada.query), "prompt": "A student's own prompt."})
    ada.rerun([bench.WidgetState(id=teacher.widgets["room.push"], trigger_value=True)])
    after = store.room(made.code)
    assert (after.moment, after.moment_id, after.version, after.preview) == (
        before.moment,
        before.moment_id,
        before.version,
        before.preview,
    )


def parse_qs_one(query: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(query).items()}


def last_logits(prompt: str) -> torch.Tensor:
    lm = models.load_lm(MODEL, "cpu")
    with torch.inference_mode():
        return lm.model(torch.tensor([lm.tokenizer.prompt_ids(prompt)])).logits[0, -1]


def _answer_each(phones, qid) -> dict[int, str]:
    """Phone i picks option i (mod the options) and sees its answer; the picks by phone."""
    picks = {}
    for i, s in enumerate(phones):
        follow(s, lambda: f"room.send.{qid}" in s.widgets and s.options)
        picks[i] = s.options[i % len(s.options)]
        s.answer(qid, i % len(s.options))
        assert any(f"Your answer: **{picks[i]}**" in n.replace("\\", "") for n in s.notes), s.notes
    return picks


def _kill_server(proc, port: int) -> None:
    """SIGKILL the app process (a child of `proc`) serving `port`."""
    victim = next(
        p for p in psutil.Process(proc.pid).children(recursive=True) if f"--server.port {port}" in " ".join(p.cmdline())
    )
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)


def test_killing_one_process_mid_question_loses_no_answer_and_its_students_come_back(klass):
    bench = load_bench()
    port, (a, b), store, _, proc = klass
    made = store.create("teacher")
    prompt = "The capital of France is"
    q, truth = Q.ask_next_token(models.load_lm(MODEL, "cpu"), last_logits(prompt), typed=False)
    moment = Moment("classroom", (("model", MODEL), ("prompt", prompt)))
    store.push(made.code, made.teacher_key, moment)
    qid = store.ask(made.code, made.teacher_key, Q.to_json(q), Q.truth_to_json(truth), moment)
    phones = [joined(bench, p, made.code, f"s{i}") for i, p in enumerate((a, a, b, b))]
    picks = _answer_each(phones, qid)
    before = store.counts(made.code, qid)
    assert sum(before.values()) == 4
    _kill_server(proc, a)  # mid-question: the question is still open
    for i, s in enumerate(phones[:2]):
        back = bench.RoomStudent(port, made.code, 240, s.cookies)  # through nginx: only b is left
        back.page, back.query = "classroom", s.query  # the phone's own address (room=) and its cookie
        back.rerun()
        assert not back.errors and any(f"Your answer: **{picks[i]}**" in n.replace("\\", "") for n in back.notes), (
            back.notes
        )
        again = next(o for o in back.options if o != picks[i])
        back.answer(qid, back.options.index(again))  # still in the room: the answer can change
        picks[i] = again
    after = store.counts(made.code, qid)
    want: dict[str, int] = {}
    for pick in picks.values():
        want[pick] = want.get(pick, 0) + 1
    assert after == want and sum(after.values()) == 4
    assert all("me=" not in s.query for s in phones)  # who a phone is never shows in its address
    assert [store.my_answer(made.code, s.cookies["tfm_student"].split(".")[1], qid) for s in phones] == [
        picks[i] for i in range(4)
    ]
