"""A room's rules, the same for every back end: what a code, a key, a nickname, an answer and a
moment may be, how long a room lives, and how often a client may try things.

Everything here comes from a browser (or a link) and is untrusted: each value is bounded and
checked before a store touches it, and every refusal is one `ValueError` saying what to change.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import unicodedata
from dataclasses import dataclass

# Join codes: 10 symbols of 31 (no 0/O, 1/I/L), 31^10 ≈ 8.2e14 codes, drawn with `secrets`.
# Wrong tries are limited per screen (a browser session), never per address: a class behind one
# school address (or nginx) shares an address, and one student's wrong tries must not lock out
# the others. A guesser therefore needs a new screen (a websocket and a page run) every
# RATES["join_fail"] tries; even at 1,000 tries a second (far above what one server answers:
# every try is a page run) against 1,000 live rooms, hitting any room takes 8.2e14 / 1,000 / 1,000
# s ≈ 26 years on average. A student's own id (96 random bits) and the teacher key (192) are
# not guessable at all, so a rejoin or the real key is never limited by anyone's tries.
CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
CODE_LEN = 10
KEY_BYTES = 24  # the teacher key: 192 random bits, stored only as its SHA-256
STUDENT_BYTES = 12  # a student's id (in the student's browser session cookie, never the address)
NICK_MAX = 24  # characters of a nickname
ANSWER_MAX = 64  # characters of an answer
MOMENT_MAX = 24_000  # bytes of a moment's JSON (a prompt of up to 20,000 characters and a view)
SPEC_MAX = 40_000  # bytes of a question's JSON (with the moment it is about)
TRUTH_MAX = 64_000  # bytes of the engine's answer (top tokens, every head's score)
STUDENTS_MAX = 200  # students in one room
QUESTIONS_MAX = 500  # questions in one room's life
ROOM_SECONDS = 4 * 3600  # a room's life; its data is deleted then
# (count, seconds): at most `count` in any fixed window of `seconds`, per address ("create"),
# per screen (a browser session: "join", "join_fail", "teacher_fail") or per student ("answer").
RATES = {
    "create": (20, 3600),  # rooms one address opens
    "join": (20, 3600),  # joins from one screen (filling a room with fake students takes a screen each)
    "join_fail": (10, 600),  # wrong or malformed codes from one screen
    "teacher_fail": (10, 600),  # wrong teacher keys from one screen
    "answer": (30, 60),  # answers from one student (a later answer replaces the earlier)
}


class RoomError(ValueError):
    """A room action that cannot be done (no such room, the question is closed); says why."""


class RateLimited(RoomError):
    """Too many tries from one client in a short time."""


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LEN))


def new_key() -> str:
    return secrets.token_urlsafe(KEY_BYTES)


def new_student() -> str:
    return secrets.token_urlsafe(STUDENT_BYTES)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()


def key_matches(key: str | None, stored_hash: str | None) -> bool:
    if not isinstance(key, str) or not stored_hash or len(key) > 200:
        return False
    return hmac.compare_digest(key_hash(key), stored_hash)


def shown_code(code: str) -> str:
    """ABCDE-FGHJK: easier to read off a projector."""
    half = len(code) // 2
    return f"{code[:half]}-{code[half:]}"


def parse_code(text) -> str:
    """A typed or linked join code (any case, spaces and dashes ignored), or ValueError."""
    if not isinstance(text, str) or len(text) > 40:
        raise RoomError(f"a join code is {CODE_LEN} letters and digits, like ABCDE-FGHJK")
    code = re.sub(r"[\s-]", "", text).upper()
    if len(code) != CODE_LEN or any(c not in CODE_ALPHABET for c in code):
        raise RoomError(f"a join code is {CODE_LEN} letters and digits, like ABCDE-FGHJK (no 0, O, 1, I or L)")
    return code


def _clean(text, what: str, limit: int) -> str:
    """One line of text: control and format characters dropped, runs of spaces made one, at
    most `limit` characters (a longer value is refused, not cut: the sender must know)."""
    if not isinstance(text, str):
        raise ValueError(f"the {what} must be text")
    if len(text) > 4 * limit:  # refused before any work on a huge value
        raise ValueError(f"the {what} has {len(text):,} characters; at most {limit} are allowed")
    kept = "".join(c for c in text if unicodedata.category(c)[0] != "C")
    kept = " ".join(kept.split())
    if len(kept) > limit:
        raise ValueError(f"the {what} has {len(kept):,} characters; at most {limit} are allowed")
    return kept


def nickname(text) -> str:
    """A nickname: optional (empty is fine), one line, at most NICK_MAX characters."""
    return _clean(text, "nickname", NICK_MAX)


def answer_text(text) -> str:
    """An answer: one line, 1 to ANSWER_MAX characters."""
    kept = _clean(text, "answer", ANSWER_MAX)
    if not kept:
        raise ValueError("the answer is empty: type or pick one")
    return kept


_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


@dataclass(frozen=True)
class Moment:
    """What the teacher's screen shows, for every student to follow: a page (its file stem) and
    its link parameters (the prompt, the model, the view: a Tour step, a head, a temperature)."""

    page: str
    params: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.page, str) or not _NAME.fullmatch(self.page):
            raise ValueError("a moment's page is a page's file name, like tour or next_token")
        if len(self.params) > 24:
            raise ValueError(f"a moment has at most 24 link settings, got {len(self.params)}")
        for name, value in self.params:
            if not isinstance(name, str) or not _NAME.fullmatch(name) or not isinstance(value, str):
                raise ValueError("a moment's settings are names (like prompt or step) with text values")
        if len(self.to_json().encode()) > MOMENT_MAX:
            raise ValueError(f"the moment is over {MOMENT_MAX:,} bytes: shorten the prompt")

    def to_json(self) -> str:
        return json.dumps({"page": self.page, "params": dict(self.params)}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Moment":
        data = json.loads(text)
        return cls(data["page"], tuple(sorted(data["params"].items())))


def bounded_json(value: dict, what: str, limit: int) -> str:
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    if len(text.encode()) > limit:
        raise ValueError(f"the {what} is over {limit:,} bytes")
    return text
