"""The ledger on SQLite: one writer thread owning one ``sqlite3`` connection.

A write is one put on a queue and one wake-up of the event loop when its batch is committed; the
thread takes every write queued at that moment into one ``BEGIN IMMEDIATE`` ... ``COMMIT``. The
connection has the engine's pragmas and busy timeout (app/store/sqlite_settings.py), so it takes
SQLite's one write lock in turn with the app's sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from app.store.driver_sql import (
    counter_upsert,
    driver_insert,
    feedback_insert_sqlite,
    info_merge,
)
from app.store.ledger import (
    FeedbackKey,
    Ledger,
    LedgerClosed,
    LedgerError,
    Outcome,
    PreparedWrite,
    Queued,
    answered,
    drain,
    feedback_ids,
    merged_counts,
    read_outcomes,
    read_statements,
    settle,
    split,
)
from app.store.models import Attempt, DecisionRow
from app.store.sqlite_settings import BUSY_TIMEOUT_S, apply_pragmas

log = logging.getLogger(__name__)

Item = tuple[Queued, asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


def connect(path: str, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection with the engine's pragmas, in autocommit mode (the ledger issues BEGIN itself)."""
    conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    apply_pragmas(conn)
    return conn


class SqliteLedger(Ledger):
    dialect = "sqlite"

    def __init__(self, path: str, max_batch: int, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self._conn = connect(path, busy_timeout_s)
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="banditgate-ledger", daemon=True)
        self._thread.start()

    async def _submit(self, item: Queued) -> Any:
        if self._closed:
            raise LedgerClosed("the ledger is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.put((item, loop, future))
        return await future

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)

    def _run(self) -> None:
        try:
            stop = False
            while not stop:
                first = self._queue.get()
                if first is None:
                    break
                batch, stop = drain(first, self._queue.get_nowait, queue.Empty, self._max_batch)
                _deliver(batch, self._serve([item for item, _, _ in batch]))
        finally:
            self._conn.close()

    def _serve(self, batch: Sequence[Queued]) -> list[Outcome]:
        """The batch's reads (``read_statements``, before its writes), then its writes (one transaction)."""
        reads, writes = split(batch)
        try:
            results = [
                (kind, self._conn.execute(sql, params).fetchall())
                for kind, sql, params in read_statements(reads, self.dialect)
            ]
            found = read_outcomes(reads, results, self.dialect)
            committed = self._commit([write for _, write in writes]) if writes else []
        except Exception as exc:  # never leave a caller waiting: every item of the batch fails
            log.exception("ledger: a batch of %d items failed", len(batch))
            with contextlib.suppress(sqlite3.Error):
                self._rollback()
            return [LedgerError(f"the ledger failed: {exc}") for _ in batch]
        return answered(len(batch), found, writes, committed)

    def _commit(self, batch: Sequence[PreparedWrite]) -> list[Outcome]:
        try:
            return list(self._transaction(batch))
        except sqlite3.Error as exc:
            self._rollback()
            if len(batch) == 1:
                return [LedgerError(f"SQLite refused the write: {exc}")]
        outcomes: list[Outcome] = []
        for write in batch:  # the batch failed: each write alone, so one bad write fails only itself
            try:
                outcomes.extend(self._transaction([write]))
            except sqlite3.Error as exc:
                self._rollback()
                outcomes.append(LedgerError(f"SQLite refused the write: {exc}"))
        return outcomes

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def _transaction(self, batch: Sequence[PreparedWrite]) -> list[list[int | None]]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        decisions = [row for write in batch for row in write.decisions]
        if decisions:
            conn.executemany(driver_insert(DecisionRow, self.dialect).sql, decisions)
        attempts = [row for write in batch for row in write.attempts]
        if attempts:
            conn.executemany(driver_insert(Attempt, self.dialect).sql, attempts)
        for write in batch:
            if write.info is not None:
                decision_id, keys = write.info
                conn.execute(info_merge(self.dialect), (keys, decision_id))
        inserted: list[tuple[FeedbackKey, int]] = []
        for write in batch:
            for key, row in zip(write.feedback_keys, write.feedback, strict=True):
                found = conn.execute(feedback_insert_sqlite(), row).fetchone()
                if found is not None:
                    inserted.append((key, int(found[0])))
        counts = merged_counts(batch)
        if counts:
            conn.executemany(counter_upsert("(?, ?, ?)"), counts)
        conn.execute("COMMIT")
        self.commits += 1
        return feedback_ids(batch, inserted)


def _deliver(batch: Sequence[Item], outcomes: Sequence[Outcome]) -> None:
    """Hand each outcome to its caller's loop: one wake-up per loop per batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Outcome]]] = {}
    for (_, loop, future), outcome in zip(batch, outcomes, strict=True):
        by_loop.setdefault(loop, []).append((future, outcome))
    for loop, pairs in by_loop.items():
        try:
            loop.call_soon_threadsafe(settle, pairs)
        except RuntimeError:  # that loop is closed: nobody waits for these any more
            log.debug("ledger: %d outcomes for a closed loop", len(pairs))
