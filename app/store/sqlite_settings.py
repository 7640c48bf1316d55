"""What every SQLite connection of the app gets, the engine's (app/store/db.py) and the ledger's
(app/store/ledger_sqlite.py) alike: WAL, foreign keys on, ``synchronous=NORMAL``, and how long a writer
waits for the one write lock."""

from __future__ import annotations

from typing import Any

from sqlalchemy import make_url

BUSY_TIMEOUT_S = 30.0
PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA foreign_keys=ON", "PRAGMA synchronous=NORMAL")


def apply_pragmas(dbapi_conn: Any) -> None:
    """Set ``PRAGMAS`` on a DB-API connection (sqlite3's, or aiosqlite's adapted one)."""
    cursor = dbapi_conn.cursor()
    for pragma in PRAGMAS:
        cursor.execute(pragma)
    cursor.close()


def sqlite_path(url: str) -> str:
    """The database file of a SQLite URL (``sqlite+aiosqlite:///./banditgate.db``)."""
    path = make_url(url).database
    if not path or path.startswith(":memory:"):
        raise ValueError(f"the ledger needs a SQLite file, not {url!r}")
    return path
