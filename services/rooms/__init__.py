"""Class rooms' store (issue #43): what a room holds and the rules every back end keeps, with no
Streamlit, so it can be tested, benchmarked and reused without the app.

`protocol.py` is the one interface (`RoomStore`), `store.py` the rules every back end keeps
(`rules.py` its bounds); `sqlite_store.py` (one WAL file shared by the app processes of one machine,
the default) and `redis_store.py` (a class spread over machines) store it; `export.py` writes a
room's results as CSV. The Class page and the live banner are `ui.rooms`.
"""

from __future__ import annotations

import os
from pathlib import Path

from services.rooms.rules import Moment, RateLimited, RoomError
from services.rooms.sqlite_store import SqliteStore
from services.rooms.protocol import Created, Question, Results, Room, RoomStore

DB_ENV, REDIS_ENV = "TFM_ROOMS_DB", "TFM_ROOMS_REDIS"

__all__ = [
    "Created",
    "Moment",
    "Question",
    "RateLimited",
    "Results",
    "Room",
    "RoomError",
    "RoomStore",
    "default_db",
    "open_store",
    "DB_ENV",
    "REDIS_ENV",
]


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
        from services.rooms.redis_store import RedisStore

        return RedisStore(redis_url, **kw)
    return SqliteStore(db or default_db(), **kw)
