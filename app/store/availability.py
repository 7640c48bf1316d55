"""When the database cannot be reached: the domain error a request gets, and the reconnect backoff.

A request that needs the database while it is down (refusing connections, closed to new ones, its
sessions terminated, the host unreachable) fails with ``DatabaseUnavailable``, which app/api/errors.py
answers with a 503 and ``Retry-After``: a client may retry, where a 500 says the gateway is broken. The
store maps the drivers' errors to it where they arise (app/store/db.py: every failed connect and every
dropped connection of the engine; the Postgres ledger: its own connection), so nothing above the store
knows a driver's exception.

``ReconnectBackoff`` spreads reconnects: after a failed connect, connects fail at once (without reaching
the server) until a jittered, exponentially growing wait has passed, and only one attempt is let through
per wait. Replicas that lost the database together then knock again one connection at a time, at
different moments, instead of every pooled connection of every replica at once; the wait is capped so
that the first request after the database returns is served within that cap.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

# SQLSTATE classes that mean the server dropped or refused the connection, not the statement: connection
# exception (08), operator intervention (57: a terminated backend, a shutdown), too many connections
# (53300), and 55000 as Postgres sends it for a database closed to new connections.
LOST_CLASSES = ("08", "57")
LOST_STATES = ("53300", "55000")


CONFLICT_STATES = ("40P01", "40001")  # deadlock detected, serialization failure
CONTENDED_TRIES = 3  # a transaction aborted for a conflict is sent again, this many times in all


class Contended(Exception):
    """A transaction the database aborted to break a deadlock (or a serialization conflict) with a
    concurrent one, such as a router's deletion cascading through rows that requests are writing:
    nothing of it was written, and the same work may be sent again (``transaction``; a 503 with
    ``Retry-After`` when it still fails)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def contended(exc: BaseException) -> bool:
    """Whether ``exc`` is the database aborting a transaction for a conflict (``CONFLICT_STATES``)."""
    return isinstance(exc, Contended) or sqlstate(exc) in CONFLICT_STATES


class DatabaseUnavailable(Exception):
    """The database cannot be reached now (503 with ``Retry-After``). ``dropped``: a connection that was
    open broke under a statement (it has been discarded; the first statement of a transaction may be
    sent again on a fresh one), rather than a connect that failed."""

    def __init__(self, message: str, *, dropped: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.dropped = dropped


def sqlstate(exc: BaseException) -> str:
    """The SQLSTATE of a driver's error (asyncpg's, or SQLAlchemy's wrapping of it), '' if none."""
    for candidate in (
        exc,
        getattr(exc, "orig", None),
        getattr(getattr(exc, "orig", None), "__cause__", None),
    ):
        state = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        if state:
            return str(state)
    return ""


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached (as opposed to refusing a statement): a
    connection SQLAlchemy found dropped, a socket error, a Postgres SQLSTATE of ``LOST_CLASSES`` or
    ``LOST_STATES``, SQLite unable to open its file, a pool with no connection free in time."""
    if isinstance(exc, DatabaseUnavailable | PoolTimeout | OSError):
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    state = sqlstate(exc)
    if state.startswith(LOST_CLASSES) or state in LOST_STATES:
        return True
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    if isinstance(orig, sqlite3.OperationalError) and "unable to open" in str(orig):
        return True
    return isinstance(orig, OSError)


class ReconnectBackoff:
    """The connect gate of one engine (or one ledger connection): ``check`` before a connect raises
    ``DatabaseUnavailable`` while a failed connect's wait has not passed (and claims the next attempt when
    it has), ``failed`` after a failed connect doubles the wait (from ``base_s`` to at most ``max_s``,
    each drawn between half and all of it), ``succeeded`` clears it. Thread-safe: SQLite's engine
    connects in a worker thread."""

    def __init__(self, base_s: float, max_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.base_s = base_s
        self.max_s = max_s
        self.clock = clock
        self.failures = 0
        self.next_attempt = 0.0
        self._lock = threading.Lock()

    def wait_s(self) -> float:
        """The wait after ``failures`` failed connects in a row: base * 2^(failures-1), capped, jittered."""
        if self.failures == 0 or self.base_s <= 0:
            return 0.0
        full = min(self.max_s, self.base_s * 2 ** min(self.failures - 1, 30))
        return full * random.uniform(0.5, 1.0)

    def check(self) -> None:
        with self._lock:
            now = self.clock()
            if self.failures and now < self.next_attempt:
                raise DatabaseUnavailable(
                    f"the database could not be reached; next connect attempt in "
                    f"{self.next_attempt - now:.2f} s"
                )
            if self.failures:  # this caller probes; the others fail fast until its wait has passed
                self.next_attempt = now + self.wait_s()

    def failed(self) -> None:
        with self._lock:
            self.failures += 1
            self.next_attempt = self.clock() + self.wait_s()

    def succeeded(self) -> None:
        with self._lock:
            self.failures = 0
            self.next_attempt = 0.0
