"""The room store's one interface, `RoomStore`, and what it returns. `store.Rules` implements
it over a back end's few primitives (sqlite_store.py, redis_store.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from services.rooms import rules


@dataclass(frozen=True)
class Created:
    code: str
    teacher_key: str  # shown once to its teacher; the store keeps only its hash
    expires: float


@dataclass(frozen=True)
class Question:
    qid: int
    spec: dict  # what was asked (tfm.teach.questions' JSON form)
    state: str  # "open" or "revealed"
    truth: dict | None  # the engine's answer: None in `room()` until revealed
    asked: float
    moment: rules.Moment | None = None  # what it is about: both screens show it, it is graded on it

    @classmethod
    def stored(cls, q: dict, truth: bool) -> "Question":
        """A stored question: its spec (the moment it is about taken out), the engine's answer
        if `truth` (students read it only once revealed)."""
        spec = json.loads(q["spec"])
        on = spec.pop("on", None)
        return cls(
            q["qid"],
            spec,
            q["state"],
            json.loads(q["truth"]) if truth else None,
            q["asked"],
            rules.Moment.from_json(on) if on else None,
        )


@dataclass(frozen=True)
class Room:
    code: str
    created: float
    expires: float
    version: int  # grows on every push, question and reveal (students poll it)
    moment_id: int  # grows on every push only (students follow it)
    moment: rules.Moment | None
    question: Question | None
    students: int
    preview: rules.Moment | None = None  # what the teacher's screen shows now, pushed or not (for warming)


@dataclass(frozen=True)
class Results:
    """Everything a room collected, for its teacher's export: each question with the engine's
    answer, and each answer as (qid, student id, nickname, answer, time)."""

    questions: tuple[Question, ...]
    answers: tuple[tuple[int, str, str, str, float], ...]


class RoomStore(Protocol):
    def create(self, client: str) -> Created: ...
    def room(self, code: str) -> Room | None: ...
    def take_up(self, code: str, key: str, screen: str) -> str: ...
    def join(self, code: str, screen: str, nick: str = "") -> tuple[str, str]: ...
    def is_student(self, code: str, sid: str) -> bool: ...
    def rejoin(self, code: str, sid: str) -> str: ...
    def showing(self, code: str, sid: str, moment_id: int) -> None: ...
    def shown(self, code: str, moment_id: int) -> int: ...
    def is_teacher(self, code: str, key: str) -> bool: ...
    def push(self, code: str, key: str, moment: rules.Moment) -> int: ...
    def preview(self, code: str, key: str, moment: rules.Moment) -> None: ...
    def ask(self, code: str, key: str, spec: dict, truth: dict, moment: rules.Moment | None = None) -> int: ...
    def reveal(self, code: str, key: str, qid: int) -> dict: ...
    def answer(self, code: str, sid: str, qid: int, text: str) -> None: ...
    def counts(self, code: str, qid: int) -> dict[str, int]: ...
    def my_answer(self, code: str, sid: str, qid: int) -> str | None: ...
    def results(self, code: str, key: str) -> Results: ...
    def close(self, code: str, key: str) -> None: ...
