"""The ledger on Postgres: one asyncpg connection, one statement per batch.

A batch is one statement of data-modifying CTEs (its decisions, attempts and counter increments) whose
main query inserts its feedback events and returns their ids, so a batch costs one round trip and one
commit (the statement's own implicit transaction: all or nothing). Foreign keys are checked at the end
of the statement, so an attempt may refer to a decision inserted by a sibling CTE.

The connection is the writer's own, opened on the first write and opened again after it drops; a batch
whose connection turns out to be gone is sent once more on a fresh one. When the database cannot be
reached, the batch's items fail with ``DatabaseUnavailable`` (a 503), and connects are spread by a
``ReconnectBackoff`` (app/store/availability.py).

A decision counted exactly (``Ledger.counted``) is a transaction on a second connection, opened on the
first such decision (a gateway whose policies count otherwise never opens it), so the batches' writer
never waits for a policy's choice: the counter's row is locked (``counter_lock_pg``), the choice runs,
its write is one statement as a batch's is, and the commit releases the lock. One such transaction at a
time per process (the connection's); across processes the row lock orders a router's decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import asyncpg

from app.store.availability import (
    CONTENDED_TRIES,
    Contended,
    DatabaseUnavailable,
    ReconnectBackoff,
    contended,
    unreachable,
)
from app.store.driver_sql import (
    COUNTER_VALUES_PG,
    FEEDBACK_CONFLICT,
    INFO_VALUES_PG,
    PROBE_MARK_VALUES_PG,
    counter_lock_pg,
    counter_upsert,
    driver_insert,
    info_merge,
    pg_tuples,
    probes_answered,
    router_locks_pg,
    rows_sql,
)
from app.store.ledger import (
    Choice,
    FeedbackKey,
    Ledger,
    LedgerClosed,
    LedgerError,
    OwnerDeleted,
    PreparedWrite,
    Queued,
    Served,
    answered,
    drain,
    feedback_ids,
    hand_back,
    merged_counts,
    read_outcomes,
    read_statements,
    split,
)
from app.store.models import Attempt, DecisionRow, FeedbackEvent, Probe

log = logging.getLogger(__name__)


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection is gone rather than that the statement was refused: the
    server's connection-exception (08) and operator-intervention (57: a terminated backend) classes,
    a socket error, and the client's own state errors (a closed connection, a protocol left
    mid-operation by a kill). A value the driver cannot encode is a ``DataError``: refused, not lost."""
    if isinstance(exc, asyncpg.PostgresError):
        state = str(getattr(exc, "sqlstate", "") or "")
        return state.startswith(("08", "57"))
    return isinstance(exc, OSError | asyncpg.InterfaceError | asyncpg.InternalClientError)


def refused(exc: BaseException) -> Exception:
    """The error a request gets for the database's ``exc``: ``DatabaseUnavailable`` (a 503) when it
    cannot be reached, ``Contended`` (a 503) when it aborted the write for a conflict, ``OwnerDeleted``
    for a foreign key (the write's tenant, router or decision was deleted), else a ``LedgerError``."""
    if unreachable(exc):
        return DatabaseUnavailable(f"the ledger's database is unavailable: {exc!r}")
    if contended(exc):
        return Contended(f"Postgres aborted the write for a conflict: {exc}")
    if isinstance(exc, asyncpg.ForeignKeyViolationError):
        return OwnerDeleted(f"Postgres refused the write, its owner is gone: {exc}")
    return LedgerError(f"Postgres refused the write: {exc}")


Item = tuple[Queued, "asyncio.Future[Any]"]
MAX_PARAMETERS = 30_000  # a batch's statement takes at most 32,767


def batch_statement(batch: Sequence[PreparedWrite]) -> tuple[str, list[Any]]:
    """The batch as one statement and its parameters; it returns (id, decision_id, model, kind) of
    each feedback event it inserted."""
    parts: list[str] = []
    args: list[Any] = []
    offset = 0
    for name, model, rows in (
        ("d", DecisionRow, [r for w in batch for r in w.decisions]),
        ("a", Attempt, [r for w in batch for r in w.attempts]),
        ("p", Probe, [r for w in batch for r in w.probes]),
    ):
        if rows:
            sql, offset = rows_sql(driver_insert(model, "postgresql"), len(rows), offset)
            parts.append(f"{name} AS ({sql})")
            args.extend(value for row in rows for value in row)
    merges = [w.info for w in batch if w.info is not None]
    if merges:
        values, offset = pg_tuples(INFO_VALUES_PG, len(merges), offset)
        parts.append(f"u AS ({info_merge('postgresql', values)})")
        args.extend(value for merge in merges for value in merge)
    marks = [mark for w in batch for mark in w.answered_probes]
    if marks:
        values, offset = pg_tuples(PROBE_MARK_VALUES_PG, len(marks), offset)
        parts.append(f"m AS ({probes_answered(values)})")
        args.extend(value for mark in marks for value in mark)
    counts = merged_counts(batch)
    if counts:
        values, offset = pg_tuples(COUNTER_VALUES_PG, len(counts), offset)
        parts.append(f"c AS ({counter_upsert(values)})")
        args.extend(value for count in counts for value in count)
    feedback = [r for w in batch for r in w.feedback]
    if feedback:
        sql, offset = rows_sql(driver_insert(FeedbackEvent, "postgresql"), len(feedback), offset)
        parts.append(f"f AS ({sql} {FEEDBACK_CONFLICT} RETURNING id, decision_id, model, kind)")
        args.extend(value for row in feedback for value in row)
    routers = sorted({r for w in batch for r in w.routers})
    locked = "true"
    if routers:
        # the routers' locks before any row: the main query's one-time filter runs first, the
        # data-modifying sub-statements after it (those the main query does not read, at its end)
        parts.insert(0, f"lk AS ({router_locks_pg(f'${offset + 1}::BIGINT[]')})")
        args.append(routers)
        locked = "(SELECT count(*) FROM lk) >= 0"
    if feedback:
        main = f"SELECT id, decision_id, model, kind FROM f WHERE {locked}"
    else:
        main = (
            "SELECT NULL::BIGINT AS id, NULL AS decision_id, NULL AS model, NULL AS kind "
            f"FROM (SELECT {locked} AS locked) AS g WHERE NOT g.locked"
        )
    statement = (f"WITH {', '.join(parts)} " if parts else "") + main
    return statement, args


class PostgresLedger(Ledger):
    dialect = "postgresql"

    def __init__(
        self,
        dsn: str,
        max_batch: int,
        connect_timeout_s: float = 60.0,
        backoff: ReconnectBackoff | None = None,
    ) -> None:
        self._dsn = dsn
        self._connect_timeout_s = connect_timeout_s
        self._backoff = backoff or ReconnectBackoff(0.0, 0.0)
        self._max_batch = max_batch
        self._queue: asyncio.Queue[Item | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._conn: asyncpg.Connection | None = None
        self._closed = False
        self._hold_conn: asyncpg.Connection | None = None  # counted decisions' connection
        self._hold_lock = asyncio.Lock()  # one counted decision at a time on it

    async def _submit(self, item: Queued) -> Any:
        if self._closed:
            raise LedgerClosed("the ledger is closed")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((item, future))
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="banditgate-ledger")
        # A cancelled caller (a client that went away) does not cancel the write: it is committed.
        return await future

    async def _counted(self, router_id: int, choice: Choice) -> list[int | None]:
        async with self._hold_lock:
            if self._closed:
                raise LedgerClosed("the ledger is closed")
            for tries_left in range(CONTENDED_TRIES - 1, -1, -1):
                conn, transaction, locked = await self._lock_counter(router_id)
                try:
                    prepared = choice((int(locked[0]), int(locked[1])))
                except BaseException:
                    await self._roll_back(transaction)
                    raise
                try:
                    sql, args = batch_statement([prepared])
                    rows = await conn.fetch(sql, *args)
                    await transaction.commit()
                except Exception as exc:
                    await self._roll_back(transaction)
                    if tries_left == 0 or not contended(exc):
                        raise refused(exc) from exc
                    # aborted for a conflict, nothing written: lock, read and choose again
                    log.info("ledger: a counted decision was aborted for a conflict (%s); again", exc)
                    continue
                self.commits += 1
                inserted = [((r["decision_id"], r["model"], r["kind"]), int(r["id"])) for r in rows]
                (ids,) = feedback_ids([prepared], inserted)
                return ids
            raise AssertionError("unreachable")

    async def _lock_counter(self, router_id: int) -> tuple[asyncpg.Connection, Any, Any]:
        """Begin a counted decision's transaction and lock its counter's row: (connection,
        transaction, the row's counts). Nothing is chosen yet, so a dropped connection or a conflict
        is sent once more, on a fresh connection."""
        for retry in (False, True):
            try:
                conn = await self._hold_connection()
                transaction = conn.transaction()
                await transaction.start()
                locked = await conn.fetchrow(counter_lock_pg(), router_id)
            except Exception as exc:
                await self._drop_hold()
                if retry or not (connection_lost(exc) or contended(exc)):
                    raise refused(exc) from exc
                log.warning("ledger: the counter's lock failed (%r); locking it again", exc)
                continue
            return conn, transaction, locked
        raise AssertionError("unreachable")

    async def _hold_connection(self) -> asyncpg.Connection:
        if self._hold_conn is None or self._hold_conn.is_closed():
            self._hold_conn = await self._open()
        return self._hold_conn

    async def _roll_back(self, transaction: Any) -> None:
        """Roll back a counted decision's transaction; a connection that cannot is dropped."""
        try:
            await transaction.rollback()
        except Exception:
            await self._drop_hold()

    async def _drop_hold(self) -> None:
        if self._hold_conn is not None:
            with contextlib.suppress(Exception):
                self._hold_conn.terminate()
        self._hold_conn = None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._queue.put_nowait(None)
            await self._task
        async with self._hold_lock:  # a counted decision under way ends first
            for conn in (self._conn, self._hold_conn):
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close(timeout=5)

    async def _run(self) -> None:
        stop = False
        while not stop:
            first = await self._queue.get()
            if first is None:
                break
            batch, stop = drain(
                first, self._queue.get_nowait, asyncio.QueueEmpty, self._max_batch, MAX_PARAMETERS
            )
            outcomes = await self._serve([item for item, _ in batch])
            hand_back((future, outcome) for (_, future), outcome in zip(batch, outcomes, strict=True))

    async def _serve(self, batch: Sequence[Queued]) -> list[Served]:
        """The batch's reads (``read_statements``, before its writes), then its writes (one statement)."""
        reads, writes = split(batch)
        try:
            results = [
                (kind, await self._fetch(sql, params))
                for kind, sql, params in read_statements(reads, self.dialect)
            ]
            found = read_outcomes(reads, results, self.dialect)
            committed = await self._commit([write for _, write in writes]) if writes else []
        except Exception as exc:  # never leave a caller waiting: every item of the batch fails
            if unreachable(exc):
                log.warning("ledger: the database is unavailable (%r); %d items failed", exc, len(batch))
                return [DatabaseUnavailable(f"the ledger's database is unavailable: {exc!r}") for _ in batch]
            log.exception("ledger: a batch of %d items failed", len(batch))
            return [LedgerError(f"the ledger failed: {exc}") for _ in batch]
        return answered(len(batch), found, writes, committed)

    async def _commit(self, batch: Sequence[PreparedWrite]) -> list[Served]:
        try:
            return list(await self._retried(batch))
        except asyncpg.PostgresError as exc:
            if unreachable(exc):
                raise
            if len(batch) == 1:
                return [refused(exc)]
        outcomes: list[Served] = []
        for write in batch:  # the batch failed: each write alone, so one bad write fails only itself
            try:
                outcomes.extend(await self._retried([write]))
            except asyncpg.PostgresError as exc:
                if unreachable(exc):
                    raise
                outcomes.append(refused(exc))
        return outcomes

    async def _retried(self, batch: Sequence[PreparedWrite]) -> list[list[int | None]]:
        """``_statement``, sent again when Postgres aborts it for a conflict (a deadlock with a
        router's deletion cascading through the rows it writes, say): the statement is its own
        transaction, so nothing of it was written. At most ``CONTENDED_TRIES`` times in all."""
        for tries_left in range(CONTENDED_TRIES - 1, -1, -1):
            try:
                return await self._statement(batch)
            except asyncpg.PostgresError as exc:
                if tries_left == 0 or not contended(exc):
                    raise
                log.info("ledger: a write was aborted for a conflict (%s); sending it again", exc)
        raise AssertionError("unreachable")

    async def _statement(self, batch: Sequence[PreparedWrite]) -> list[list[int | None]]:
        sql, args = batch_statement(batch)
        rows = await self._fetch(sql, args)
        self.commits += 1
        inserted: list[tuple[FeedbackKey, int]] = [
            ((r["decision_id"], r["model"], r["kind"]), int(r["id"])) for r in rows
        ]
        return feedback_ids(batch, inserted)

    async def _fetch(self, sql: str, args: Sequence[Any]) -> list[asyncpg.Record]:
        """One statement on the writer's connection; sent once more on a fresh one when the connection
        turns out to be gone (it fails at the send: nothing of the statement was committed)."""
        try:
            return await (await self._connection()).fetch(sql, *args)  # type: ignore[no-any-return]
        except Exception as exc:
            if not connection_lost(exc):
                raise
            log.warning("ledger: the connection dropped (%r); sending the statement again", exc)
            await self._drop()
            return await (await self._connection()).fetch(sql, *args)  # type: ignore[no-any-return]

    async def _connection(self) -> asyncpg.Connection:
        if self._conn is None or self._conn.is_closed():
            self._conn = await self._open()
        return self._conn

    async def _open(self) -> asyncpg.Connection:
        """A new connection, through the reconnect backoff."""
        self._backoff.check()
        try:
            conn = await asyncpg.connect(self._dsn, timeout=self._connect_timeout_s)
        except Exception:
            self._backoff.failed()
            raise
        self._backoff.succeeded()
        return conn

    async def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.terminate()
        self._conn = None
