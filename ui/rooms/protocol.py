"""The room store's one interface, `RoomStore`, and what it returns. `store.Rules` implements
it over a back end's few primitives (sqlite_store.py, redis_store.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ui.rooms import rules


@dataclass(frozen=True)
class Created:
    code: str
    teacher_key: str     # shown once to its teacher; the store keeps only its hash
    expires: float


@dataclass(frozen=True)
class Question:
    qid: int
    spec: dict           # what was asked (tfm.teach.questions' JSON form)
    state: str           # "open" or "revealed"
    truth: dict | None   # the engine's answer: None in `room()` until revealed
    asked: float


@dataclass(frozen=True)
class Room:
    code: str
    created: float
    expires: float
    version: int         # grows on every push, question and reveal (students poll it)
    moment_id: int       # grows on every push only (students follow it)
    moment: rules.Moment | None
    question: Question | None
    students: int
    preview: rules.Moment | None = None   # what the teacher's screen shows now, pushed or not (for warming)


@dataclass(frozen=True)
class Results:
    """Everything a room collected, for its teacher's export: each question with the engine's
    answer, and each answer as (qid, student id, nickname, answer, time)."""
    questions: tuple[Question, ...]
    answers: tuple[tuple[int, str, str, str, float], ...]


class RoomStore(Protocol):
    def create(self, client: str) -> Created: ...
    def room(self, code: str) -> Room | None: ...
    def take_up(self, code: str, key: str, client: str) -> str: ...
    def join(self, code: str, client: str, nick: str = "") -> tuple[str, str]: ...
    def is_student(self, code: str, sid: str) -> bool: ...
    def rejoin(self, code: str, sid: str, client: str) -> str: ...
    def is_teacher(self, code: str, key: str) -> bool: ...
    def push(self, code: str, key: str, moment: rules.Moment) -> int: ...
    def preview(self, code: str, key: str, moment: rules.Moment) -> None: ...
    def ask(self, code: str, key: str, spec: dict, truth: dict) -> int: ...
    def reveal(self, code: str, key: str, qid: int) -> dict: ...
    def answer(self, code: str, sid: str, qid: int, text: str) -> None: ...
    def counts(self, code: str, qid: int) -> dict[str, int]: ...
    def my_answer(self, code: str, sid: str, qid: int) -> str | None: ...
    def results(self, code: str, key: str) -> Results: ...
    def close(self, code: str, key: str) -> None: ...
