"""Rooms in one SQLite file in WAL mode: every app process on one machine opens the same file
(`deploy/run_class.sh N`), readers never wait for the writer, and a committed answer is in the
file before the call returns, so killing a process loses nothing it acknowledged.

One connection per thread (Streamlit runs each session's script in a thread of its own); each
write is one `BEGIN IMMEDIATE` transaction, and a busy file is waited for (busy_timeout).
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path

from services.rooms.store import Rules

SCHEMA = """
CREATE TABLE IF NOT EXISTS rooms (code TEXT PRIMARY KEY, teacher TEXT NOT NULL, created REAL NOT NULL,
    expires REAL NOT NULL, version INTEGER NOT NULL DEFAULT 0, moment_id INTEGER NOT NULL DEFAULT 0,
    moment TEXT, question INTEGER NOT NULL DEFAULT 0, preview TEXT);
CREATE TABLE IF NOT EXISTS questions (code TEXT NOT NULL, qid INTEGER NOT NULL, spec TEXT NOT NULL,
    state TEXT NOT NULL, truth TEXT NOT NULL, asked REAL NOT NULL, PRIMARY KEY (code, qid));
CREATE TABLE IF NOT EXISTS students (code TEXT NOT NULL, sid TEXT NOT NULL, nick TEXT NOT NULL,
    joined REAL NOT NULL, PRIMARY KEY (code, sid));
CREATE TABLE IF NOT EXISTS answers (code TEXT NOT NULL, qid INTEGER NOT NULL, sid TEXT NOT NULL,
    text TEXT NOT NULL, at REAL NOT NULL, PRIMARY KEY (code, qid, sid));
CREATE TABLE IF NOT EXISTS shown (code TEXT NOT NULL, sid TEXT NOT NULL, moment_id INTEGER NOT NULL,
    PRIMARY KEY (code, sid));
CREATE TABLE IF NOT EXISTS rate (name TEXT PRIMARY KEY, n INTEGER NOT NULL, until REAL NOT NULL);
CREATE INDEX IF NOT EXISTS rooms_expires ON rooms (expires);
CREATE INDEX IF NOT EXISTS rate_until ON rate (until);
"""
TABLES = ("answers", "shown", "students", "questions", "rooms")


class SqliteStore(Rules):
    def __init__(self, path: str | Path, **kw) -> None:
        super().__init__(**kw)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        db = self._db()
        db.executescript(SCHEMA)  # (its own transaction: executescript commits first)
        if "preview" not in {r["name"] for r in db.execute("PRAGMA table_info(rooms)")}:
            db.execute("ALTER TABLE rooms ADD COLUMN preview TEXT")  # a file made before previews

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable against a killed process
            db.execute("PRAGMA busy_timeout=10000")
            db.row_factory = sqlite3.Row
            self._local.db = db
        return db

    @contextmanager
    def _write(self):
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _hit(self, name: str, count: int, seconds: int) -> bool:
        with self._write() as db:
            db.execute(
                "INSERT INTO rate (name, n, until) VALUES (?, 1, ?) ON CONFLICT(name) DO UPDATE SET n = n + 1",
                (name, self.clock() + seconds),
            )
            return db.execute("SELECT n FROM rate WHERE name = ?", (name,)).fetchone()[0] <= count

    def _count(self, name: str) -> int:
        row = self._db().execute("SELECT n FROM rate WHERE name = ?", (name,)).fetchone()
        return 0 if row is None else row[0]

    def _create(self, code, teacher, now, expires) -> bool:
        with self._write() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO rooms (code, teacher, created, expires) VALUES (?, ?, ?, ?)",
                (code, teacher, now, expires),
            )
            return cur.rowcount == 1

    def _load(self, code):
        db = self._db()
        row = db.execute(
            "SELECT *, (SELECT count(*) FROM students s WHERE s.code = r.code) AS students FROM rooms r WHERE code = ?",
            (code,),
        ).fetchone()
        if row is None:
            return None
        out = dict(row)
        q = db.execute("SELECT * FROM questions WHERE code = ? AND qid = ?", (code, out["question"])).fetchone()
        out["q"] = None if q is None else dict(q)
        return out

    def _bump(self, db, code: str, extra: str = "", args: tuple = ()) -> int:
        db.execute(f"UPDATE rooms SET version = version + 1{extra} WHERE code = ?", (*args, code))
        return db.execute("SELECT version, moment_id, question FROM rooms WHERE code = ?", (code,)).fetchone()

    def _set_moment(self, code, moment) -> int:
        with self._write() as db:
            return self._bump(db, code, ", moment_id = moment_id + 1, moment = ?", (moment,))["moment_id"]

    def _set_preview(self, code, moment) -> None:
        with self._write() as db:
            db.execute("UPDATE rooms SET preview = ? WHERE code = ?", (moment, code))

    def _add_question(self, code, spec, truth, now) -> int:
        with self._write() as db:
            qid = self._bump(db, code, ", question = question + 1")["question"]
            db.execute("INSERT INTO questions VALUES (?, ?, ?, 'open', ?, ?)", (code, qid, spec, truth, now))
            return qid

    def _reveal(self, code, qid) -> None:
        with self._write() as db:
            db.execute("UPDATE questions SET state = 'revealed' WHERE code = ? AND qid = ?", (code, qid))
            self._bump(db, code)

    def _add_student(self, code, sid, nick, now, most) -> bool:
        with self._write() as db:
            if db.execute("SELECT count(*) FROM students WHERE code = ?", (code,)).fetchone()[0] >= most:
                return False
            db.execute("INSERT INTO students VALUES (?, ?, ?, ?)", (code, sid, nick, now))
            return True

    def _has_student(self, code, sid) -> bool:
        return (
            self._db().execute("SELECT 1 FROM students WHERE code = ? AND sid = ?", (code, sid)).fetchone() is not None
        )

    def _students(self, code):
        return dict(self._db().execute("SELECT sid, nick FROM students WHERE code = ?", (code,)).fetchall())

    def _set_shown(self, code, sid, moment_id) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO shown VALUES (?, ?, ?) ON CONFLICT(code, sid) DO UPDATE SET moment_id = "
                "excluded.moment_id",
                (code, sid, moment_id),
            )

    def _shown(self, code):
        return dict(self._db().execute("SELECT sid, moment_id FROM shown WHERE code = ?", (code,)).fetchall())

    def _put_answer(self, code, qid, sid, text, now) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO answers VALUES (?, ?, ?, ?, ?) ON CONFLICT(code, qid, sid) "
                "DO UPDATE SET text = excluded.text, at = excluded.at",
                (code, qid, sid, text, now),
            )

    def _answers(self, code, qid):
        rows = self._db().execute("SELECT sid, text, at FROM answers WHERE code = ? AND qid = ?", (code, qid))
        return {sid: (text, at) for sid, text, at in rows}

    def _questions(self, code):
        return [dict(q) for q in self._db().execute("SELECT * FROM questions WHERE code = ? ORDER BY qid", (code,))]

    def _delete(self, code) -> None:
        with self._write() as db:
            for table in TABLES:
                db.execute(f"DELETE FROM {table} WHERE code = ?", (code,))

    def _purge(self, now) -> None:
        """Every ended room's data, and spent rate windows, deleted."""
        with self._write() as db:
            for table in TABLES[:-1]:
                db.execute(f"DELETE FROM {table} WHERE code IN (SELECT code FROM rooms WHERE expires <= ?)", (now,))
            db.execute("DELETE FROM rooms WHERE expires <= ?", (now,))
            db.execute("DELETE FROM rate WHERE until <= ?", (now,))
