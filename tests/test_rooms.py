"""The room store (issue #43): the same tests against both back ends, SQLite (a WAL file) and a
real redis-server (tests/rooms_fixtures.py). Hostile cases: a student doing teacher actions,
forged and guessed codes, 10,000 answers from one client, a 1 MB nickname, markup in answers,
and a process killed mid-question (every acknowledged answer is still there)."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.rooms_fixtures import redis_server
from services.rooms import Moment, RateLimited, RoomError, open_store, rules
from services.rooms.redis_store import RedisStore

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def where(request, tmp_path):
    """What `open_store` takes for each back end: a fresh file, or a freshly emptied Redis."""
    if request.param == "sqlite":
        return {"db": tmp_path / "rooms.sqlite3"}
    url = request.getfixturevalue("redis_url")
    RedisStore(url).r.flushdb()
    return {"redis_url": url}


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(where, clock):
    return open_store(**where, clock=clock)


def leftovers(store, code: str) -> int:
    """Rows or keys the back end still holds for a room (0 once it is deleted)."""
    if isinstance(store, RedisStore):
        return len(store.r.keys(store.prefix + code + "*"))
    db = store._db()
    return sum(
        db.execute(f"SELECT count(*) FROM {t} WHERE code = ?", (code,)).fetchone()[0]
        for t in ("rooms", "questions", "students", "answers")
    )


def stored_teacher(store, code: str) -> str:
    if isinstance(store, RedisStore):
        return store.r.hget(store.prefix + code, "teacher")
    return store._db().execute("SELECT teacher FROM rooms WHERE code = ?", (code,)).fetchone()[0]


def wrong_key(key: str) -> str:
    """A key that differs from `key` by construction (its last symbol changed to another)."""
    return key[:-1] + ("B" if key[-1] == "A" else "A")


def test_a_wrong_key_differs_from_the_real_one_whatever_it_ends_with():
    for key in ("abcA", "abcB", "abcz", "A"):
        assert wrong_key(key) != key and len(wrong_key(key)) == len(key)


def asked(store, n_students: int = 3):
    """A room with students and an open question: (created, [sid...], qid)."""
    made = store.create("teacher-ip")
    sids = [store.join(made.code, f"ip{i}", f"s{i}")[1] for i in range(n_students)]
    qid = store.ask(made.code, made.teacher_key, {"kind": "next_token"}, {"top": [[" Paris", 0.77]]})
    return made, sids, qid


def test_a_room_has_a_long_random_code_and_only_the_hash_of_its_teacher_key(store):
    made = [store.create(f"ip{i % 15}") for i in range(30)]
    assert len({m.code for m in made}) == 30
    for m in made:
        assert len(m.code) == rules.CODE_LEN and set(m.code) <= set(rules.CODE_ALPHABET)
        assert len(m.teacher_key) >= 32
        assert stored_teacher(store, m.code) == hashlib.sha256(m.teacher_key.encode()).hexdigest()
    room = store.room(made[0].code)
    assert room.students == 0 and room.moment is None and room.question is None and room.version == 0


def test_students_join_with_the_code_as_typed_and_the_teacher_pushes_moments(store):
    made = store.create("t")
    code, sid = store.join(rules.shown_code(made.code).lower(), "ip", "Ada")
    assert code == made.code and store.is_student(code, sid) and store.room(code).students == 1
    moment = Moment("tour", (("prompt", "The capital of France is"), ("step", "attention")))
    assert store.push(code, made.teacher_key, moment) == 1
    room = store.room(code)
    assert room.moment == moment and room.moment_id == 1 and room.version == 1
    store.push(code, made.teacher_key, Moment("next_token", (("t", "0.7"),)))
    assert store.room(code).moment_id == 2 and store.room(code).moment.page == "next_token"


def test_the_teachers_preview_is_kept_for_the_processes_and_moves_no_student(store):
    made = store.create("t")
    code, sid = store.join(made.code, "ip", "Ada")
    view = Moment("logit_lens", (("prompt", "The capital of France is"),))
    store.preview(code, made.teacher_key, view)
    room = store.room(code)
    assert room.preview == view and room.moment is None and room.version == 0 and room.moment_id == 0
    for key in (sid, "", None, wrong_key(made.teacher_key)):
        with pytest.raises(PermissionError):
            store.preview(code, key, Moment("tour"))
    assert store.room(code).preview == view
    store.push(code, made.teacher_key, Moment("tour"))
    assert store.room(code).preview == view and store.room(code).moment == Moment("tour")


def test_a_rooms_file_made_before_previews_is_opened_and_gets_them(tmp_path):
    import sqlite3
    from services.rooms import sqlite_store

    old = sqlite_store.SCHEMA.replace(", preview TEXT);", ");")
    assert old != sqlite_store.SCHEMA
    sqlite3.connect(tmp_path / "old.sqlite3").executescript(old)
    store = open_store(tmp_path / "old.sqlite3")
    made = store.create("t")
    store.preview(made.code, made.teacher_key, Moment("tour"))
    assert store.room(made.code).preview == Moment("tour")


def test_a_student_cannot_do_what_only_the_teacher_may(store):
    made, sids, qid = asked(store)
    for key in (sids[0], "", "x" * 10_000, wrong_key(made.teacher_key), None):
        with pytest.raises(PermissionError):
            store.push(made.code, key, Moment("tour"))
        with pytest.raises(PermissionError):
            store.reveal(made.code, key, qid)
        with pytest.raises(PermissionError):
            store.results(made.code, key)
        with pytest.raises(PermissionError):
            store.close(made.code, key)
        with pytest.raises(PermissionError):
            store.ask(made.code, key, {}, {})
    assert store.room(made.code).question.state == "open" and store.room(made.code).moment is None
    with pytest.raises(PermissionError):  # and a stranger (no student id) cannot answer
        store.answer(made.code, "not-a-student", qid, "Paris")


def test_one_answer_per_student_per_question_counts_only_and_the_truth_waits_for_reveal(store):
    made, sids, qid = asked(store)
    assert store.room(made.code).question.truth is None  # students never read it before the reveal
    store.answer(made.code, sids[0], qid, " Paris")
    store.answer(made.code, sids[0], qid, "London")  # replaces
    store.answer(made.code, sids[1], qid, "London")
    store.answer(made.code, sids[2], qid, "Paris")
    assert store.counts(made.code, qid) == {"London": 2, "Paris": 1}
    assert store.my_answer(made.code, sids[0], qid) == "London" and store.my_answer(made.code, "nobody", qid) is None
    truth = store.reveal(made.code, made.teacher_key, qid)
    assert truth == {"top": [[" Paris", 0.77]]} == store.room(made.code).question.truth
    assert store.room(made.code).question.state == "revealed"
    with pytest.raises(RoomError, match="closed"):
        store.answer(made.code, sids[1], qid, "Rome")
    assert store.counts(made.code, qid) == {"London": 2, "Paris": 1}
    results = store.results(made.code, made.teacher_key)
    assert [q.qid for q in results.questions] == [qid] and results.questions[0].truth == truth
    assert sorted((r[2], r[3]) for r in results.answers) == [("s0", "London"), ("s1", "London"), ("s2", "Paris")]


def test_a_new_question_closes_the_last(store):
    made, sids, q1 = asked(store)
    q2 = store.ask(made.code, made.teacher_key, {"kind": "estimate"}, {"p": 0.5})
    assert q2 == q1 + 1 and store.room(made.code).question.qid == q2
    with pytest.raises(RoomError):
        store.answer(made.code, sids[0], q1, "a")
    store.answer(made.code, sids[0], q2, "0.4")
    assert store.counts(made.code, q2) == {"0.4": 1} and store.counts(made.code, q1) == {}


def test_guessed_and_forged_codes_are_refused_and_limited_per_screen(store):
    made = store.create("t")
    _, sid = store.join(made.code, "screen:early", "Ada")
    for bad in ("", "AAAA", "<script>", "x" * 1_000_000, "ABCDE-FGHJ0", None):
        with pytest.raises(RoomError):
            store.join(bad, "screen:attacker")
    count = rules.RATES["join_fail"][0]
    for _ in range(count - 6):
        with pytest.raises(RoomError) as e:
            store.join(rules.new_code(), "screen:attacker")
        assert not isinstance(e.value, RateLimited)
    with pytest.raises(RateLimited):  # past the limit even the right code is refused on that screen: no hit shows
        store.join(made.code, "screen:attacker")
    for i in range(61):  # 61 more wrong tries, from screens sharing one school address
        with pytest.raises(RoomError):
            store.join(rules.new_code(), f"screen:class{i // count}")
    assert store.join(made.code, "screen:latecomer")[0] == made.code  # a correct code still gets in
    assert store.rejoin(rules.shown_code(made.code), sid) == made.code  # and a student's own rejoin
    with pytest.raises(RoomError):
        store.rejoin(made.code, "not-a-student")
    assert set(rules.new_code()) <= set(rules.CODE_ALPHABET) and len(rules.new_code()) == 10


def test_a_wrong_teacher_key_is_limited_per_screen_and_never_refuses_the_real_one_elsewhere(store):
    made = store.create("t")
    assert store.take_up(made.code, made.teacher_key, "screen:a") == made.code
    for _ in range(rules.RATES["teacher_fail"][0]):
        with pytest.raises(PermissionError):
            store.take_up(made.code, wrong_key(made.teacher_key), "screen:guesser")
    with pytest.raises(RateLimited):
        store.take_up(made.code, made.teacher_key, "screen:guesser")
    assert store.take_up(made.code, made.teacher_key, "screen:teacher-reloaded") == made.code


def test_the_teacher_sees_how_many_students_show_a_push_and_a_question_keeps_its_moment(store):
    made, sids, _ = asked(store)
    first = Moment("next_token", (("model", "default"), ("prompt", "The capital of France is"), ("seed", "0")))
    mid = store.push(made.code, made.teacher_key, first)
    assert store.shown(made.code, mid) == 0
    store.showing(made.code, sids[0], mid)
    store.showing(made.code, sids[1], mid)
    store.showing(made.code, "not-a-student", mid)
    assert store.shown(made.code, mid) == 2
    store.showing(made.code, sids[0], mid + 1)  # (a later moment's report)
    assert store.shown(made.code, mid) == 1
    qid = store.ask(made.code, made.teacher_key, {"kind": "estimate", "token": 1, "shown": "a"}, {"value": 0.5}, first)
    q = store.room(made.code).question
    assert q.qid == qid and q.moment == first and q.spec == {"kind": "estimate", "token": 1, "shown": "a"}
    assert store.results(made.code, made.teacher_key).questions[-1].moment == first
    with pytest.raises(ValueError, match="'on'"):
        store.ask(made.code, made.teacher_key, {"on": 1}, {}, first)


def test_ten_thousand_answers_from_one_client_count_once_and_are_rate_limited(store):
    made, sids, qid = asked(store, 1)
    accepted = refused = 0
    for i in range(10_000):
        try:
            store.answer(made.code, sids[0], qid, f"answer {i}")
            accepted += 1
        except RateLimited:
            refused += 1
    assert accepted == rules.RATES["answer"][0] and refused == 10_000 - accepted
    assert store.counts(made.code, qid) == {f"answer {accepted - 1}": 1}


def test_nicknames_and_answers_are_bounded_one_line_text(store):
    made, sids, qid = asked(store, 1)
    with pytest.raises(ValueError, match="1,048,576 characters"):
        store.join(made.code, "ip", "n" * 1_048_576)
    with pytest.raises(ValueError, match="at most 64"):
        store.answer(made.code, sids[0], qid, "a" * 65)
    with pytest.raises(ValueError, match="empty"):
        store.answer(made.code, sids[0], qid, " \n\u200b ")
    code, sid = store.join(made.code, "ip", "  Eve\u202e\n\x00 <b>x</b> ")
    assert store.results(made.code, made.teacher_key) and store._students(code)[sid] == "Eve <b>x</b>"
    hostile = "<img src=x onerror=alert(1)> **b** [l](http://x)"
    store.answer(code, sid, qid, hostile)  # kept as typed: pages show it through ui.text.plain
    assert store.counts(code, qid) == {hostile: 1}
    with pytest.raises(ValueError, match="over 24,000 bytes"):
        Moment("tour", (("prompt", "x" * 30_000),))
    with pytest.raises(ValueError):
        Moment("../secrets")


def test_a_students_nickname_is_theirs_alone_and_ends_with_the_room(store, clock):
    made, _, _ = asked(store)
    code, ada = store.join(made.code, "ip", "Ada")
    _, quiet = store.join(made.code, "ip2")
    assert (store.nickname(code, ada), store.nickname(code, quiet), store.nickname(code, "not-a-student")) == (
        "Ada",
        "",
        "",
    )
    clock.now += rules.ROOM_SECONDS + 1
    assert store.nickname(code, ada) == ""


def test_a_full_room_refuses_more_students(store, monkeypatch):
    monkeypatch.setattr(rules, "STUDENTS_MAX", 3)
    made, _, _ = asked(store, 3)
    with pytest.raises(RoomError, match="full"):
        store.join(made.code, "late")


def test_a_room_ends_after_its_hours_and_its_data_is_deleted(store, clock):
    made, sids, qid = asked(store)
    store.answer(made.code, sids[0], qid, "Paris")
    assert leftovers(store, made.code) > 0
    clock.now += rules.ROOM_SECONDS + 1
    assert store.room(made.code) is None and leftovers(store, made.code) == 0
    with pytest.raises(RoomError, match="ended"):
        store.join(made.code, "ip")
    other, _, _ = asked(store)
    store.close(other.code, other.teacher_key)
    assert store.room(other.code) is None and leftovers(store, other.code) == 0


def test_sqlite_deletes_every_ended_room_while_another_is_in_use(tmp_path, clock):
    store = open_store(tmp_path / "r.sqlite3", clock=clock)
    made, _, _ = asked(store)
    clock.now += rules.ROOM_SECONDS - 30
    other = store.create("someone")
    clock.now += 31  # the first room ended; nobody asks for it
    store.room(other.code)  # a student of another room polls
    assert leftovers(store, made.code) > 0  # (not yet: at most one purge a minute)
    clock.now += store.PURGE_SECONDS
    store.room(other.code)
    assert leftovers(store, made.code) == 0 and leftovers(store, other.code) > 0
    assert store._db().execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_redis_deletes_an_ended_room_by_itself(redis_url):
    store = open_store(redis_url=redis_url, room_seconds=1)
    made, sids, qid = asked(store)
    store.answer(made.code, sids[0], qid, "Paris")
    keys = store.r.keys(store.prefix + made.code + "*")
    assert len(keys) == 4 and all(store.r.ttl(k) > 0 for k in keys)  # room, students, question, answers
    time.sleep(2.2)
    assert store.r.keys(store.prefix + made.code + "*") == []


ANSWERER = """
import sys, time
from services.rooms import open_store
where, code, qid = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = open_store(redis_url=where) if where.startswith("unix:") else open_store(where)
for i in range(25):
    _, sid = store.join(code, "proc-" + sys.argv[4] + str(i), "n")
    store.answer(code, sid, qid, f"a{i}")
    print(sid, f"a{i}", flush=True)   # acknowledged: the store returned
    time.sleep(0.02)
"""


def test_killing_one_of_two_processes_mid_question_loses_no_acknowledged_answer(where):
    store = open_store(**where)
    made = store.create("t")
    qid = store.ask(made.code, made.teacher_key, {"kind": "next_token"}, {})
    target = where.get("redis_url") or str(where["db"])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ANSWERER, target, made.code, str(qid), name],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in "ab"
    ]
    acked = [procs[0].stdout.readline().split() for _ in range(5)]
    procs[0].send_signal(signal.SIGKILL)  # killed mid-question, between or inside writes
    procs[0].wait()
    acked += [line.split() for line in procs[0].stdout.read().splitlines() if line.strip()]
    out, _ = procs[1].communicate(timeout=120)
    acked += [line.split() for line in out.splitlines()]
    assert procs[1].returncode == 0 and len(acked) >= 30
    fresh = open_store(**where)  # a process that never saw these answers
    for sid, text in acked:
        assert fresh.my_answer(made.code, sid, qid) == text
    assert sum(fresh.counts(made.code, qid).values()) >= len(acked)
