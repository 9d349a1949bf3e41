"""Class rooms (issue #43): a teacher's screen leads, students follow on their phones, answer
questions, and see the model's real answer revealed.

Server state, not engine: `protocol.py` is the one interface (`RoomStore`), `store.py` the rules
every back end keeps (`rules.py` its bounds); `sqlite_store.py` (one WAL file shared by the app
processes of one machine, the default) and `redis_store.py` (a class spread over machines)
store it. No module here imports streamlit but the Class page's own: `session.py` (this process's
store, the session's role), `identity.py` (who a browser is: its session cookies; whom limits
count), `live.py` (the banner every page draws: the teacher's push and its steps), `follow.py`
(a student's screen following the teacher), `warm.py` (each process opens the teacher's view
before its students ask), `teacher.py` and `student.py` (the page's two sides), `export.py` (CSV).
"""
from __future__ import annotations

import os
from pathlib import Path

from ui.rooms.rules import Moment, RateLimited, RoomError
from ui.rooms.sqlite_store import SqliteStore
from ui.rooms.protocol import Created, Question, Results, Room, RoomStore

DB_ENV, REDIS_ENV = "TFM_ROOMS_DB", "TFM_ROOMS_REDIS"

__all__ = ["Created", "Moment", "Question", "RateLimited", "Results", "Room", "RoomError", "RoomStore",
           "default_db", "open_store", "DB_ENV", "REDIS_ENV"]


def default_db(env: dict[str, str] | None = None) -> Path:
    """The SQLite file: $TFM_ROOMS_DB, else rooms.sqlite3 in the user's data folder (never the
    repository): $XDG_DATA_HOME/tfm, or ~/.local/share/tfm."""
    env = os.environ if env is None else env
    if env.get(DB_ENV, "").strip():
        return Path(env[DB_ENV].strip()).expanduser()
    data = env.get("XDG_DATA_HOME", "").strip() or str(Path.home() / ".local" / "share")
    return Path(data) / "tfm" / "rooms.sqlite3"


def open_store(db: str | Path | None = None, redis_url: str | None = None, **kw) -> RoomStore:
    """Redis when a URL is given, else the SQLite file `db` (default: `default_db()`)."""
    if redis_url:
        # Imported here: the redis package takes ~0.5 s to import, which every app process would
        # pay at start whether or not its class uses Redis.
        from ui.rooms.redis_store import RedisStore
        return RedisStore(redis_url, **kw)
    return SqliteStore(db or default_db(), **kw)
