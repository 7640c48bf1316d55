"""The ledger on SQLite: one writer thread owning one ``sqlite3`` connection.

A write is one put on a queue and one wake-up of the event loop when its batch is committed; the
thread takes every write queued at that moment into one ``BEGIN IMMEDIATE`` ... ``COMMIT``. The
connection has the engine's pragmas and busy timeout (app/store/sqlite_settings.py), so it takes
SQLite's one write lock in turn with the app's sessions.

Inline (``inline=True``, setting ``ledger_inline``): an item that finds the writer idle (nothing
queued, no batch being served) while ``busy()`` is false (the app: this process serves no request but
the one writing, app/api/in_flight.py) is served on the event loop instead, on a second connection,
which saves the hand-off to the thread and back (two thread wake-ups: 0.1-0.6 ms of a ``/route`` or
``/feedback`` on a 2-core machine, measured with ``bench gateway``). Under concurrent load the
thread keeps the work: there SQLite runs off the loop and concurrent writes share a commit. What keeps
the loop from stalling on an inline item:

- that connection's busy timeout is 0: when another connection (the app's sessions, another worker
  process) holds SQLite's write lock, ``BEGIN IMMEDIATE`` fails at once and the item goes to the
  thread's queue as before, never waiting on the loop. Nothing of it was committed then;
- it never checkpoints (``wal_autocheckpoint=0``), so the loop never waits for an fsync
  (``synchronous=NORMAL`` in WAL mode syncs at checkpoints only, not at commits); every
  ``inline_checkpoint_commits`` inline commits a ``PRAGMA wal_checkpoint(PASSIVE)`` runs on a third
  connection in a worker thread, which bounds the WAL as SQLite's own autocheckpoint would.

A decision counted exactly (``Ledger.counted``) is one ``BEGIN IMMEDIATE`` ... ``COMMIT``: SQLite's
write lock, which every connection to the file takes in turn, is the counter's lock. Inline, the read,
the caller's choice and the write run on the loop back to back. On the thread, the thread begins the
transaction and reads the counts, hands them to the loop and waits (at most ``HOLD_TIMEOUT_S``, then
rolls back) for the write the choice returns, so the choice runs on the loop, where the policies live;
the writes queued meanwhile wait for the next batch.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from app.store.driver_sql import (
    counter_upsert,
    counts_selects,
    driver_insert,
    feedback_insert_sqlite,
    info_merge,
    probes_answered,
)
from app.store.ledger import (
    Choice,
    Counts,
    FeedbackKey,
    Ledger,
    LedgerClosed,
    LedgerError,
    OwnerDeleted,
    PreparedWrite,
    Queued,
    Read,
    Served,
    answered,
    drain,
    feedback_ids,
    hand_back,
    merged_counts,
    read_outcomes,
    read_statements,
    retrieved,
    split,
)
from app.store.models import Attempt, DecisionRow, Probe
from app.store.sqlite_settings import BUSY_TIMEOUT_S, apply_pragmas

log = logging.getLogger(__name__)

HOLD_TIMEOUT_S = 30.0  # the most the thread waits, in a counted decision's transaction, for its choice


@dataclass(eq=False)
class CounterHold:
    """A counted decision on the thread: the counts the thread read under the lock go to ``counts``
    (on the loop); the write to commit comes back in ``write`` (None: roll back)."""

    router_id: int
    counts: asyncio.Future[Counts]
    write: concurrent.futures.Future[PreparedWrite | None]


Item = tuple[Queued | CounterHold, asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


LOCK_HELD = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def connect(path: str, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection with the engine's pragmas, in autocommit mode (the ledger issues BEGIN itself)."""
    conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    apply_pragmas(conn)
    return conn


def connect_inline(path: str) -> sqlite3.Connection:
    """The inline connection: the engine's pragmas, no busy wait, no checkpoints of its own."""
    conn = connect(path, 0.0)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    return conn


def _never_busy() -> bool:
    return False


def refused_write(exc: BaseException) -> LedgerError:
    """The error of a write SQLite refused: ``OwnerDeleted`` for a foreign key (its tenant, router or
    decision was deleted meanwhile), else a ``LedgerError``."""
    if isinstance(exc, sqlite3.IntegrityError) and "FOREIGN KEY" in str(exc):
        return OwnerDeleted(f"SQLite refused the write, its owner is gone: {exc}")
    return LedgerError(f"SQLite refused the write: {exc}")


class _Deferred:
    """An item not served on the loop: the thread serves it."""


DEFERRED = _Deferred()
Outcome = TypeVar("Outcome")


class _LockHeld(Exception):
    """Another connection holds SQLite's write lock: serve the item on the thread instead."""


class SqliteLedger(Ledger):
    dialect = "sqlite"

    def __init__(
        self,
        path: str,
        max_batch: int,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        inline: bool = False,
        inline_checkpoint_commits: int = 100,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        self._path = path
        self._conn = connect(path, busy_timeout_s)
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        self._closed = False
        # held while a connection of this ledger serves items: by the thread for a batch, by the loop
        # for an inline item (never waited for on the loop)
        self._serving = threading.Lock()
        self._inline = connect_inline(path) if inline else None
        self._busy = busy if busy is not None else _never_busy
        self._checkpoint_every = inline_checkpoint_commits
        self._uncheckpointed = 0  # inline commits since the last checkpoint was asked for
        self._checkpoint: concurrent.futures.Future[None] | None = None
        self._checkpoint_conn: sqlite3.Connection | None = None  # the checkpoint thread's, made on first use
        self._checkpointer = (
            concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="banditgate-checkpoint")
            if inline
            else None
        )
        self.inline_served = 0  # items served on the loop
        self.inline_deferred = 0  # items that found the write lock held elsewhere and went to the thread
        self.checkpoints = 0
        self._thread = threading.Thread(target=self._run, name="banditgate-ledger", daemon=True)
        self._thread.start()

    async def _submit(self, item: Queued) -> Any:
        if self._closed:
            raise LedgerClosed("the ledger is closed")
        outcome = self._on_loop(lambda conn: self._serve_inline(conn, item))
        if not isinstance(outcome, _Deferred):
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.put((item, loop, future))
        return await future

    async def _counted(self, router_id: int, choice: Choice) -> list[int | None]:
        if self._closed:
            raise LedgerClosed("the ledger is closed")
        ids = self._on_loop(lambda conn: self._counted_inline(conn, router_id, choice))
        if not isinstance(ids, _Deferred):
            return ids
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        done.add_done_callback(retrieved)  # not awaited when the counts could not be read
        hold = CounterHold(router_id, loop.create_future(), concurrent.futures.Future())
        self._queue.put((hold, loop, done))
        try:
            counts = await hold.counts
            prepared = choice(counts)
        except BaseException:
            hold.write.set_result(None)
            raise
        hold.write.set_result(prepared)
        written: list[int | None] = await done
        return written

    def _counted_inline(self, conn: sqlite3.Connection, router_id: int, choice: Choice) -> list[int | None]:
        """``Ledger.counted`` on the loop, on ``conn``; ``_LockHeld`` (nothing done) when SQLite's write
        lock is held elsewhere."""
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode in LOCK_HELD:
                raise _LockHeld from exc
            raise LedgerError(f"SQLite refused the decision's transaction: {exc}") from exc
        try:
            prepared = choice(self._locked_counts(conn, router_id))
            ids = self._apply(conn, prepared)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise refused_write(exc) from exc
        except BaseException:
            self._rollback(conn)
            raise
        self.commits += 1
        self._after_inline_commit()
        return ids

    def _locked_counts(self, conn: sqlite3.Connection, router_id: int) -> Counts:
        """The router's counts on ``conn``, inside its ``BEGIN IMMEDIATE``: no other connection can
        write until it ends."""
        ((sql, params),) = counts_selects(self.dialect, [router_id])
        row = conn.execute(sql, params).fetchone()
        return (int(row[1]), int(row[2])) if row is not None else (0, 0)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)
        if self._checkpointer is not None:
            await asyncio.to_thread(self._checkpointer.shutdown)  # waits for a checkpoint under way
        if self._checkpoint_conn is not None:
            self._checkpoint_conn.close()
        if self._inline is not None:
            self._inline.close()

    def _on_loop(self, serve: Callable[[sqlite3.Connection], Outcome]) -> Outcome | _Deferred:
        """``serve`` on the inline connection when an item may be served on the loop now (inline is
        on, the writer idle, ``busy()`` false); ``DEFERRED`` when it may not, or when ``serve`` found
        SQLite's write lock held elsewhere (``_LockHeld``: nothing of it done)."""
        if not (
            self._inline is not None
            and self._queue.empty()
            and not self._busy()
            and self._serving.acquire(blocking=False)
        ):
            return DEFERRED
        try:
            outcome = serve(self._inline)
        except _LockHeld:
            self.inline_deferred += 1
            return DEFERRED
        finally:
            self._serving.release()
        self.inline_served += 1
        return outcome

    def _serve_inline(self, conn: sqlite3.Connection, item: Queued) -> Served:
        """One item on ``conn``: a read, or a write in its own transaction; raises ``_LockHeld`` (with
        nothing committed) when SQLite's write lock is held elsewhere."""
        try:
            if isinstance(item, PreparedWrite):
                (outcome,) = self._transaction(conn, [item])
                self._after_inline_commit()
                return outcome
            reads, _ = split([item])
            return self._read(conn, reads)[0]
        except Exception as exc:  # as on the thread: the item fails alone, with a LedgerError
            with contextlib.suppress(sqlite3.Error):
                self._rollback(conn)
            if isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode in LOCK_HELD:
                raise _LockHeld from exc
            if not isinstance(exc, sqlite3.Error):
                log.exception("ledger: an inline item failed")
            if isinstance(item, PreparedWrite):
                return refused_write(exc)
            return LedgerError(f"SQLite refused the read: {exc}")

    def _after_inline_commit(self) -> None:
        """Ask for a checkpoint in a worker thread every ``inline_checkpoint_commits`` inline commits
        (the inline connection makes none itself)."""
        self._uncheckpointed += 1
        if self._uncheckpointed < self._checkpoint_every:
            return
        if self._checkpoint is not None and not self._checkpoint.done():
            return  # the last one still runs: ask again after the next commit
        self._uncheckpointed = 0
        assert self._checkpointer is not None  # made with the inline connection
        self._checkpoint = self._checkpointer.submit(self._checkpoint_wal)

    def _checkpoint_wal(self) -> None:
        """``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its own: copies what no reader still
        needs from the WAL into the database, waiting for no lock."""
        try:
            if self._checkpoint_conn is None:
                self._checkpoint_conn = connect(self._path, 0.0)
            self._checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.checkpoints += 1
        except sqlite3.Error:
            log.exception("ledger: a WAL checkpoint failed (the next one retries)")

    def _run(self) -> None:
        try:
            stop = False
            while not stop:
                first = self._queue.get()
                if first is None:
                    break
                batch, stop = drain(first, self._queue.get_nowait, queue.Empty, self._max_batch)
                items = [entry for entry in batch if not isinstance(entry[0], CounterHold)]
                if items:
                    with self._serving:
                        outcomes = self._serve([i for i, _, _ in items if not isinstance(i, CounterHold)])
                    _deliver(items, outcomes)
                for entry in batch:
                    hold, loop, _ = entry
                    if isinstance(hold, CounterHold):
                        with self._serving:
                            outcome = self._serve_hold(hold, loop)
                        _deliver([entry], [outcome])
        finally:
            self._conn.close()

    def _serve_hold(self, hold: CounterHold, loop: asyncio.AbstractEventLoop) -> Served:
        """A counted decision on the thread's connection: begin, read the counts, hand them to the loop,
        wait for the write (``HOLD_TIMEOUT_S`` at most), commit it; roll back when none comes."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            counts: Counts | LedgerError = self._locked_counts(conn, hold.router_id)
        except sqlite3.Error as exc:
            self._rollback(conn)
            counts = LedgerError(f"SQLite refused the decision's transaction: {exc}")
        try:
            loop.call_soon_threadsafe(hand_back, [(hold.counts, counts)])
        except RuntimeError:  # that loop is closed: nobody waits for the counts
            self._rollback(conn)
            return []
        if isinstance(counts, LedgerError):
            return []
        try:
            prepared = hold.write.result(timeout=HOLD_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            log.error("ledger: no choice came within %.0f s; the decision is rolled back", HOLD_TIMEOUT_S)
            self._rollback(conn)
            return LedgerError("the decision's choice took too long; nothing was written")
        if prepared is None:  # the choice failed: its caller raises its error
            self._rollback(conn)
            return []
        try:
            ids = self._apply(conn, prepared)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            return refused_write(exc)
        self.commits += 1
        return ids

    def _serve(self, batch: Sequence[Queued]) -> list[Served]:
        """The batch's reads (``read_statements``, before its writes), then its writes (one transaction)."""
        reads, writes = split(batch)
        try:
            found = self._read(self._conn, reads)
            committed = self._commit([write for _, write in writes]) if writes else []
        except Exception as exc:  # never leave a caller waiting: every item of the batch fails
            log.exception("ledger: a batch of %d items failed", len(batch))
            with contextlib.suppress(sqlite3.Error):
                self._rollback(self._conn)
            return [LedgerError(f"the ledger failed: {exc}") for _ in batch]
        return answered(len(batch), found, writes, committed)

    def _commit(self, batch: Sequence[PreparedWrite]) -> list[Served]:
        try:
            return list(self._transaction(self._conn, batch))
        except sqlite3.Error as exc:
            self._rollback(self._conn)
            if len(batch) == 1:
                return [refused_write(exc)]
        outcomes: list[Served] = []
        for write in batch:  # the batch failed: each write alone, so one bad write fails only itself
            try:
                outcomes.extend(self._transaction(self._conn, [write]))
            except sqlite3.Error as exc:
                self._rollback(self._conn)
                outcomes.append(refused_write(exc))
        return outcomes

    def _read(self, conn: sqlite3.Connection, reads: Sequence[tuple[int, Read]]) -> dict[int, Served]:
        """Each read's outcome by its position, one statement per kind (``read_statements``) on ``conn``."""
        results = [
            (kind, conn.execute(sql, params).fetchall())
            for kind, sql, params in read_statements(reads, self.dialect)
        ]
        return read_outcomes(reads, results, self.dialect)

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        """Roll back ``conn``'s open transaction, if any."""
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def _transaction(
        self, conn: sqlite3.Connection, batch: Sequence[PreparedWrite]
    ) -> list[list[int | None]]:
        conn.execute("BEGIN IMMEDIATE")
        ids = self._apply_all(conn, batch)
        conn.execute("COMMIT")
        self.commits += 1
        return ids

    def _apply(self, conn: sqlite3.Connection, write: PreparedWrite) -> list[int | None]:
        """One write's statements in ``conn``'s open transaction; its feedback ids."""
        (ids,) = self._apply_all(conn, [write])
        return ids

    def _apply_all(self, conn: sqlite3.Connection, batch: Sequence[PreparedWrite]) -> list[list[int | None]]:
        """The batch's statements in ``conn``'s open transaction; each write's feedback ids."""
        decisions = [row for write in batch for row in write.decisions]
        if decisions:
            conn.executemany(driver_insert(DecisionRow, self.dialect).sql, decisions)
        attempts = [row for write in batch for row in write.attempts]
        if attempts:
            conn.executemany(driver_insert(Attempt, self.dialect).sql, attempts)
        probes = [row for write in batch for row in write.probes]
        if probes:
            conn.executemany(driver_insert(Probe, self.dialect).sql, probes)
        marks = [mark for write in batch for mark in write.answered_probes]
        if marks:
            conn.executemany(probes_answered(), marks)
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
        return feedback_ids(batch, inserted)


def _deliver(batch: Sequence[Item], outcomes: Sequence[Served]) -> None:
    """Hand each outcome to its caller's loop: one wake-up per loop per batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Served]]] = {}
    for (_, loop, future), outcome in zip(batch, outcomes, strict=True):
        by_loop.setdefault(loop, []).append((future, outcome))
    for loop, pairs in by_loop.items():
        try:
            loop.call_soon_threadsafe(hand_back, pairs)
        except RuntimeError:  # that loop is closed: nobody waits for these any more
            log.debug("ledger: %d outcomes for a closed loop", len(pairs))
