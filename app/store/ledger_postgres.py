"""The ledger on Postgres: one asyncpg connection, one statement per batch.

A batch is one statement of data-modifying CTEs (its decisions, attempts and counter increments) whose
main query inserts its feedback events and returns their ids, so a batch costs one round trip and one
commit (the statement's own implicit transaction: all or nothing). Foreign keys are checked at the end
of the statement, so an attempt may refer to a decision inserted by a sibling CTE.

The connection is the writer's own, opened on the first write and opened again after it drops; a batch
whose connection turns out to be gone is sent once more on a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import asyncpg

from app.store.driver_sql import (
    FEEDBACK_CONFLICT,
    counter_upsert,
    counter_values_pg,
    driver_insert,
    info_merge,
    rows_sql,
)
from app.store.ledger import (
    FeedbackKey,
    Ledger,
    LedgerClosed,
    LedgerError,
    LedgerWrite,
    PreparedWrite,
    feedback_ids,
    max_batch_parameters,
    merged_counts,
    prepare,
)
from app.store.models import Attempt, DecisionRow, FeedbackEvent

log = logging.getLogger(__name__)


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection is gone rather than that the server refused the statement:
    the client's own errors (a closed socket, a protocol left mid-operation by a kill) and the server's
    connection-exception (08) and operator-intervention (57: a terminated backend) classes."""
    if isinstance(exc, asyncpg.PostgresError):
        state = str(getattr(exc, "sqlstate", "") or "")
        return state.startswith(("08", "57"))
    return isinstance(exc, Exception)


Queued = tuple[PreparedWrite, "asyncio.Future[list[int | None]]"]


def batch_statement(batch: Sequence[PreparedWrite]) -> tuple[str, list[Any]]:
    """The batch as one statement and its parameters; it returns (id, decision_id, model, kind) of
    each feedback event it inserted."""
    parts: list[str] = []
    args: list[Any] = []
    offset = 0
    for name, model, rows in (
        ("d", DecisionRow, [r for w in batch for r in w.decisions]),
        ("a", Attempt, [r for w in batch for r in w.attempts]),
    ):
        if rows:
            sql, offset = rows_sql(driver_insert(model, "postgresql"), len(rows), offset)
            parts.append(f"{name} AS ({sql})")
            args.extend(value for row in rows for value in row)
    merges = [w.info for w in batch if w.info is not None]
    if merges:
        parts.append(f"u AS ({info_merge('postgresql', len(merges), offset)})")
        offset += 2 * len(merges)
        args.extend(value for merge in merges for value in merge)
    counts = merged_counts(batch)
    if counts:
        parts.append(f"c AS ({counter_upsert('postgresql', counter_values_pg(len(counts), offset))})")
        offset += 3 * len(counts)
        args.extend(value for count in counts for value in count)
    feedback = [r for w in batch for r in w.feedback]
    if feedback:
        sql, offset = rows_sql(driver_insert(FeedbackEvent, "postgresql"), len(feedback), offset)
        main = f"{sql} {FEEDBACK_CONFLICT} RETURNING id, decision_id, model, kind"
        args.extend(value for row in feedback for value in row)
    else:
        main = "SELECT NULL::BIGINT AS id, NULL AS decision_id, NULL AS model, NULL AS kind WHERE false"
    statement = (f"WITH {', '.join(parts)} " if parts else "") + main
    return statement, args


class PostgresLedger(Ledger):
    dialect = "postgresql"

    def __init__(self, dsn: str, max_batch: int) -> None:
        self._dsn = dsn
        self._max_batch = max_batch
        self._queue: asyncio.Queue[Queued | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._conn: asyncpg.Connection | None = None
        self._closed = False
        self.commits = 0

    async def write(self, write: LedgerWrite) -> list[int | None]:
        if self._closed:
            raise LedgerClosed("the ledger is closed")
        future: asyncio.Future[list[int | None]] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((prepare(write, self.dialect), future))
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="banditgate-ledger")
        # A cancelled caller (a client that went away) does not cancel the write: it is committed.
        return await future

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._queue.put_nowait(None)
            await self._task
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close(timeout=5)

    async def _run(self) -> None:
        limit = max_batch_parameters(self.dialect)
        stop = False
        while not stop:
            first = await self._queue.get()
            if first is None:
                break
            batch = [first]
            parameters = first[0].parameters
            while len(batch) < self._max_batch and not self._queue.empty():
                queued = self._queue.get_nowait()
                if queued is None:
                    stop = True
                    break
                batch.append(queued)
                parameters += queued[0].parameters
                if parameters > limit:
                    break
            try:
                outcomes = await self._commit([write for write, _ in batch])
            except Exception as exc:  # never leave a caller waiting
                log.exception("ledger: a batch of %d writes failed", len(batch))
                outcomes = [LedgerError(f"the write failed: {exc}") for _ in batch]
            for (_, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    async def _commit(self, batch: Sequence[PreparedWrite]) -> list[list[int | None] | BaseException]:
        try:
            return list(await self._statement(batch))
        except asyncpg.PostgresError as exc:
            if len(batch) == 1:
                return [LedgerError(f"Postgres refused the write: {exc}")]
        outcomes: list[list[int | None] | BaseException] = []
        for write in batch:  # the batch failed: each write alone, so one bad write fails only itself
            try:
                outcomes.extend(await self._statement([write]))
            except asyncpg.PostgresError as exc:
                outcomes.append(LedgerError(f"Postgres refused the write: {exc}"))
        return outcomes

    async def _statement(self, batch: Sequence[PreparedWrite]) -> list[list[int | None]]:
        sql, args = batch_statement(batch)
        try:
            rows = await (await self._connection()).fetch(sql, *args)
        except Exception as exc:
            if not connection_lost(exc):
                raise
            # A dropped connection fails at the send: nothing of this statement was committed.
            log.warning("ledger: the connection dropped (%r); sending the batch again", exc)
            await self._drop()
            rows = await (await self._connection()).fetch(sql, *args)
        self.commits += 1
        inserted: list[tuple[FeedbackKey, int]] = [
            ((r["decision_id"], r["model"], r["kind"]), int(r["id"])) for r in rows
        ]
        return feedback_ids(batch, inserted)

    async def _connection(self) -> asyncpg.Connection:
        if self._conn is None or self._conn.is_closed():
            self._conn = await asyncpg.connect(self._dsn)
        return self._conn

    async def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.terminate()
        self._conn = None
