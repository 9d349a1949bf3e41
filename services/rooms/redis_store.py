"""Rooms in Redis, for a class whose app processes run on several machines (`TFM_ROOMS_REDIS`).

Keys (prefix `tfm:room:{code}`): the room's hash; `:q:{qid}` each question's hash; `:students`
(sid -> nickname), `:shown` (sid -> the moment its screen drew) and `:a:{qid}` (sid -> answer
JSON) hashes. Every key of a room expires with
the room (EXPIREAT), so Redis deletes its data when it ends without anyone asking. Counters
(versions, question ids, rate windows) are Redis's atomic HINCRBY / INCR.
"""

from __future__ import annotations

import json
import math

import redis

from services.rooms.store import Rules

PREFIX = "tfm:room:"


class RedisStore(Rules):
    def __init__(self, url: str, prefix: str = PREFIX, **kw) -> None:
        super().__init__(**kw)
        self.r = redis.Redis.from_url(url, decode_responses=True, socket_timeout=10, health_check_interval=30)
        self.prefix = prefix
        self.r.ping()  # a wrong URL fails when the store is opened, not on a student's first answer

    def _k(self, code: str, *parts) -> str:
        return ":".join((self.prefix + code, *map(str, parts)))

    def _expire(self, pipe, code: str, *keys: str) -> None:
        """Give `keys` the room's end as their own (the room hash holds it)."""
        end = self.r.hget(self._k(code), "expires")
        if end is not None:
            for key in keys:
                pipe.expire(key, self._left(float(end)))

    def _left(self, end: float) -> int:
        """Seconds until `end` on the store's clock (relative: a test's clock need not be Redis's)."""
        return max(1, math.ceil(end - self.clock()) + 1)

    def _hit(self, name, count, seconds) -> bool:
        key = self.prefix + "rate:" + name
        pipe = self.r.pipeline()
        pipe.incr(key)
        pipe.expire(key, seconds, nx=True)
        return pipe.execute()[0] <= count

    def _count(self, name: str) -> int:
        return int(self.r.get(self.prefix + "rate:" + name) or 0)

    def _create(self, code, teacher, now, expires) -> bool:
        key = self._k(code)
        if not self.r.hsetnx(key, "teacher", teacher):
            return False
        pipe = self.r.pipeline()
        pipe.hset(key, mapping={"created": now, "expires": expires, "version": 0, "moment_id": 0, "question": 0})
        pipe.expire(key, self._left(expires))
        pipe.execute()
        return True

    def _load(self, code):
        pipe = self.r.pipeline()
        pipe.hgetall(self._k(code))
        pipe.hlen(self._k(code, "students"))
        row, students = pipe.execute()
        if "expires" not in row:  # none, or a half-made one
            return None
        out = {
            "teacher": row["teacher"],
            "created": float(row["created"]),
            "expires": float(row["expires"]),
            "version": int(row["version"]),
            "moment_id": int(row["moment_id"]),
            "moment": row.get("moment"),
            "preview": row.get("preview"),
            "question": int(row["question"]),
            "students": students,
        }
        out["q"] = self._question(code, out["question"]) if out["question"] else None
        return out

    def _question(self, code: str, qid: int) -> dict | None:
        q = self.r.hgetall(self._k(code, "q", qid))
        return (
            {"qid": qid, "spec": q["spec"], "state": q["state"], "truth": q["truth"], "asked": float(q["asked"])}
            if q
            else None
        )

    def _set_moment(self, code, moment) -> int:
        pipe = self.r.pipeline()
        pipe.hset(self._k(code), "moment", moment)
        pipe.hincrby(self._k(code), "version", 1)
        pipe.hincrby(self._k(code), "moment_id", 1)
        return pipe.execute()[2]

    def _set_preview(self, code, moment) -> None:
        self.r.hset(self._k(code), "preview", moment)

    def _add_question(self, code, spec, truth, now) -> int:
        qid = self.r.hincrby(self._k(code), "question", 1)
        pipe = self.r.pipeline()
        key = self._k(code, "q", qid)
        pipe.hset(key, mapping={"spec": spec, "state": "open", "truth": truth, "asked": now})
        self._expire(pipe, code, key)
        pipe.hincrby(self._k(code), "version", 1)
        pipe.execute()
        return qid

    def _reveal(self, code, qid) -> None:
        pipe = self.r.pipeline()
        pipe.hset(self._k(code, "q", qid), "state", "revealed")
        pipe.hincrby(self._k(code), "version", 1)
        pipe.execute()

    def _add_student(self, code, sid, nick, now, most) -> bool:
        key = self._k(code, "students")
        if self.r.hlen(key) >= most:
            return False
        pipe = self.r.pipeline()
        pipe.hset(key, sid, nick)
        self._expire(pipe, code, key)
        pipe.execute()
        return True

    def _has_student(self, code, sid) -> bool:
        return bool(self.r.hexists(self._k(code, "students"), sid))

    def _students(self, code):
        return self.r.hgetall(self._k(code, "students"))

    def _set_shown(self, code, sid, moment_id) -> None:
        key = self._k(code, "shown")
        pipe = self.r.pipeline()
        pipe.hset(key, sid, moment_id)
        self._expire(pipe, code, key)
        pipe.execute()

    def _shown(self, code):
        return {sid: int(m) for sid, m in self.r.hgetall(self._k(code, "shown")).items()}

    def _put_answer(self, code, qid, sid, text, now) -> None:
        key = self._k(code, "a", qid)
        pipe = self.r.pipeline()
        pipe.hset(key, sid, json.dumps([text, now]))
        self._expire(pipe, code, key)
        pipe.execute()

    def _answers(self, code, qid):
        return {sid: tuple(json.loads(v)) for sid, v in self.r.hgetall(self._k(code, "a", qid)).items()}

    def _questions(self, code):
        n = int(self.r.hget(self._k(code), "question") or 0)
        return [q for q in (self._question(code, qid) for qid in range(1, n + 1)) if q is not None]

    def _delete(self, code) -> None:
        n = int(self.r.hget(self._k(code), "question") or 0)
        keys = [
            self._k(code),
            self._k(code, "students"),
            self._k(code, "shown"),
            *(self._k(code, part, qid) for qid in range(1, n + 1) for part in ("q", "a")),
        ]
        self.r.delete(*keys)

    def _purge(self, now) -> None:
        """Nothing to do: every key of a room expires with it."""
