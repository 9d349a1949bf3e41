"""The rules every back end of the room store shares (`Rules`; the interface is protocol.py's `RoomStore`).

A back end (SQLite, Redis) only stores and counts: `Rules` checks every value (rules.py), the
teacher key, expiry, bounds and rate limits, and calls the back end's few primitives (the
`_`-methods below). So both back ends refuse exactly the same things, and the same tests run
against both (tests/test_rooms.py). Nothing lives in a process's memory: every call reads the
store, so any app process of a class can serve any student.
"""

from __future__ import annotations

import json
import time
from typing import Callable

from services.rooms import rules
from services.rooms.protocol import Created, Question, Results, Room
from services.rooms.rules import RateLimited, RoomError


def _per(seconds: int) -> str:
    minutes = seconds // 60
    return "a minute" if minutes == 1 else "an hour" if minutes == 60 else f"per {minutes} minutes"


class Rules:
    """The checks of every RoomStore method; back ends implement the `_` primitives."""

    PURGE_SECONDS = 60  # how often a store deletes every ended room (on a poll, a join or a create)

    def __init__(self, clock: Callable[[], float] = time.time, room_seconds: int = rules.ROOM_SECONDS) -> None:
        self.clock, self.room_seconds = clock, room_seconds
        self._purged = float("-inf")

    def _purge_due(self) -> None:
        """Ended rooms go within a minute of their end while any room is in use, not only when
        someone asks for them (Redis expires its keys itself; SQLite needs this)."""
        now = self.clock()
        if now - self._purged >= self.PURGE_SECONDS:
            self._purged = now
            self._purge(now)

    # ---- rate limits: a fixed window per (what, who) ----
    def _window(self, what: str, who: str) -> tuple[str, int, int]:
        count, seconds = rules.RATES[what]
        return f"{what}:{who[:100]}:{int(self.clock() // seconds)}", count, seconds

    def limit(self, what: str, who: str) -> None:
        """Count one try of `what` by `who`; past the window's allowance, RateLimited."""
        name, count, seconds = self._window(what, who)
        if not self._hit(name, count, seconds):
            raise RateLimited(f"too many tries in a short time ({count} {_per(seconds)}): wait a little")

    def _guarded(self, what: str, screen: str, attempt: Callable[[], str]) -> str:
        """`attempt()` unless this screen (a browser session) already spent its failures of
        `what` (then RateLimited, right or wrong: a hit must not show once the limit is reached);
        a failure is counted against that screen only, so nobody else's wrong tries ever refuse
        a correct code (rules.py: why guessing stays infeasible)."""
        name, count, seconds = self._window(what, screen)
        if self._count(name) >= count:
            raise RateLimited(f"this screen made too many wrong tries ({count} {_per(seconds)}): wait a little")
        try:
            return attempt()
        except (RoomError, PermissionError):
            self.limit(what, screen)
            raise

    def _live(self, code: str) -> dict | None:
        row = self._load(code)
        if row is None:
            return None
        if row["expires"] <= self.clock():
            self._delete(code)  # its data goes as soon as anyone asks after it ended
            return None
        return row

    def _needed(self, code: str) -> dict:
        row = self._live(code)
        if row is None:
            raise RoomError("this room has ended (or never existed): ask your teacher for the new code")
        return row

    def _teacher(self, code: str, key: str) -> dict:
        row = self._needed(code)
        if not rules.key_matches(key, row["teacher"]):
            raise PermissionError("only the room's teacher can do this (the teacher key does not match)")
        return row

    # ---- the interface ----
    def create(self, client: str) -> Created:
        self.limit("create", client)
        self._purge_due()
        key, now = rules.new_key(), self.clock()
        for _ in range(8):  # a clash of 8-symbol codes is ~never; retried anyway
            code = rules.new_code()
            if self._create(code, rules.key_hash(key), now, now + self.room_seconds):
                return Created(code, key, now + self.room_seconds)
        raise RoomError("could not find a free room code: try again")

    def room(self, code: str) -> Room | None:
        """The room as any of its students may see it (the engine's answer only once revealed)."""
        self._purge_due()
        row = self._live(code)
        if row is None:
            return None
        q = row["q"]
        question = None if q is None else Question.stored(q, q["state"] == "revealed")
        return Room(
            code,
            row["created"],
            row["expires"],
            row["version"],
            row["moment_id"],
            rules.Moment.from_json(row["moment"]) if row["moment"] else None,
            question,
            row["students"],
            rules.Moment.from_json(row["preview"]) if row.get("preview") else None,
        )

    def take_up(self, code: str, key: str, screen: str) -> str:
        """A teacher link opened on another screen (or the teacher's own screen reloaded): its
        code if the key is the room's. Wrong keys are limited per screen like wrong codes."""

        def attempt() -> str:
            room = rules.parse_code(code)
            self._teacher(room, key)
            return room

        return self._guarded("teacher_fail", screen, attempt)

    def join(self, code: str, screen: str, nick: str = "") -> tuple[str, str]:
        """(code, student id) for a student joining with a typed or linked code. Wrong codes are
        limited per screen (RATES["join_fail"]), so codes cannot be enumerated."""
        nick = rules.nickname(nick)

        def attempt() -> str:
            room = rules.parse_code(code)
            self._needed(room)
            return room

        room = self._guarded("join_fail", screen, attempt)
        self.limit("join", screen)
        sid = rules.new_student()
        if not self._add_student(room, sid, nick, self.clock(), rules.STUDENTS_MAX):
            raise RoomError(f"this room is full ({rules.STUDENTS_MAX} students)")
        return room, sid

    def is_student(self, code: str, sid: str) -> bool:
        return isinstance(sid, str) and len(sid) <= 40 and self._live(code) is not None and self._has_student(code, sid)

    def rejoin(self, code: str, sid: str) -> str:
        """A student's browser back (a reload, another process after theirs stopped): the room's
        code if `sid` is one of its students. Never limited: a student id is 96 random bits
        (guessing one is hopeless), and a class reloading together must all get back in."""
        room = rules.parse_code(code)
        if not self.is_student(room, sid):
            raise RoomError("this browser's student is not in that room (or the room has ended)")
        return room

    def showing(self, code: str, sid: str, moment_id: int) -> None:
        """A student's screen drew the room's moment `moment_id` (the teacher sees how many do)."""
        if isinstance(sid, str) and len(sid) <= 40 and self._has_student(code, sid):
            self._set_shown(code, sid, int(moment_id))

    def shown(self, code: str, moment_id: int) -> int:
        """How many students' screens drew moment `moment_id`."""
        return sum(1 for m in self._shown(code).values() if m == moment_id) if self._live(code) else 0

    def is_teacher(self, code: str, key: str) -> bool:
        row = self._live(code) if isinstance(code, str) and len(code) == rules.CODE_LEN else None
        return row is not None and rules.key_matches(key, row["teacher"])

    def push(self, code: str, key: str, moment: rules.Moment) -> int:
        self._teacher(code, key)
        return self._set_moment(code, moment.to_json())

    def preview(self, code: str, key: str, moment: rules.Moment) -> None:
        """What the teacher's screen shows now, before any push: every app process of the class
        opens it too (ui/rooms/warm.py), so the view is computed everywhere when it is pushed.
        Students never follow it (no version change)."""
        self._teacher(code, key)
        self._set_preview(code, moment.to_json())

    def ask(self, code: str, key: str, spec: dict, truth: dict, moment: rules.Moment | None = None) -> int:
        """A new question (the last one closes); `moment`: what it is about (its page, model,
        prompt), kept with it so both screens show, and it is graded on, that one prompt."""
        row = self._teacher(code, key)
        if row["question"] >= rules.QUESTIONS_MAX:
            raise RoomError(f"a room asks at most {rules.QUESTIONS_MAX} questions: open a new room")
        if "on" in spec:
            raise ValueError("a question's fields cannot be named 'on'")
        kept = {**spec, "on": moment.to_json()} if moment is not None else spec
        return self._add_question(
            code,
            rules.bounded_json(kept, "question", rules.SPEC_MAX),
            rules.bounded_json(truth, "model's answer", rules.TRUTH_MAX),
            self.clock(),
        )

    def reveal(self, code: str, key: str, qid: int) -> dict:
        row = self._teacher(code, key)
        if qid != row["question"] or row["q"] is None:
            raise RoomError("that question is no longer the room's current one")
        self._reveal(code, qid)
        return json.loads(row["q"]["truth"])

    def answer(self, code: str, sid: str, qid: int, text: str) -> None:
        """A student's answer to the open question; a later one replaces it."""
        text = rules.answer_text(text)
        if not (isinstance(sid, str) and len(sid) <= 40 and self._has_student(code, sid)):
            self._needed(code)  # an ended room says so
            raise PermissionError("only the room's students can answer: join with the code first")
        self.limit("answer", sid)  # before reading the room: a flood costs two small reads a try
        row = self._needed(code)
        if qid != row["question"] or row["q"] is None or row["q"]["state"] != "open":
            raise RoomError("this question is closed: the answer was not counted")
        self._put_answer(code, qid, sid, text, self.clock())

    def counts(self, code: str, qid: int) -> dict[str, int]:
        """How many students gave each answer: counts only, never who."""
        if self._live(code) is None:
            return {}
        out: dict[str, int] = {}
        for text, _ in self._answers(code, qid).values():
            out[text] = out.get(text, 0) + 1
        return out

    def my_answer(self, code: str, sid: str, qid: int) -> str | None:
        if self._live(code) is None:
            return None
        got = self._answers(code, qid).get(sid)
        return None if got is None else got[0]

    def nickname(self, code: str, sid: str) -> str:
        """The nickname student `sid` joined `code` with ("" without one, or when not its student),
        read from the store so that it stays on the student's screen past the join and a reload."""
        if self._live(code) is None:
            return ""
        return self._students(code).get(sid, "")

    def results(self, code: str, key: str) -> Results:
        self._teacher(code, key)
        names = self._students(code)
        questions = tuple(Question.stored(q, True) for q in self._questions(code))
        answers = tuple(
            (q.qid, sid, names.get(sid, ""), text, at)
            for q in questions
            for sid, (text, at) in sorted(self._answers(code, q.qid).items(), key=lambda kv: kv[1][1])
        )
        return Results(questions, answers)

    def close(self, code: str, key: str) -> None:
        self._teacher(code, key)
        self._delete(code)

    # ---- what a back end provides ----
    def _hit(self, name: str, count: int, seconds: int) -> bool:
        raise NotImplementedError

    def _count(self, name: str) -> int:
        raise NotImplementedError

    def _create(self, code: str, teacher: str, now: float, expires: float) -> bool:
        raise NotImplementedError

    def _load(self, code: str) -> dict | None:
        raise NotImplementedError

    def _set_moment(self, code: str, moment: str) -> int:
        raise NotImplementedError

    def _set_preview(self, code: str, moment: str) -> None:
        raise NotImplementedError

    def _add_question(self, code: str, spec: str, truth: str, now: float) -> int:
        raise NotImplementedError

    def _reveal(self, code: str, qid: int) -> None:
        raise NotImplementedError

    def _add_student(self, code: str, sid: str, nick: str, now: float, most: int) -> bool:
        raise NotImplementedError

    def _has_student(self, code: str, sid: str) -> bool:
        raise NotImplementedError

    def _students(self, code: str) -> dict[str, str]:
        raise NotImplementedError

    def _set_shown(self, code: str, sid: str, moment_id: int) -> None:
        raise NotImplementedError

    def _shown(self, code: str) -> dict[str, int]:
        raise NotImplementedError

    def _put_answer(self, code: str, qid: int, sid: str, text: str, now: float) -> None:
        raise NotImplementedError

    def _answers(self, code: str, qid: int) -> dict[str, tuple[str, float]]:
        raise NotImplementedError

    def _questions(self, code: str) -> list[dict]:
        raise NotImplementedError

    def _delete(self, code: str) -> None:
        raise NotImplementedError

    def _purge(self, now: float) -> None:
        raise NotImplementedError
