"""The ledger: the request path's writes, group-committed through the database driver.

A request (or its background probe) hands its rows (a decision, its attempts, its feedback events, its
router counter's increment, probes) to ``Ledger.write`` and gets control back only after they are committed, so a decision is
durable before its answer and feedback is acknowledged only after commit, as before. What changes is
how: one writer per process takes every write waiting at that moment and commits them in one
transaction (group commit), through the driver with statements compiled once (app/store/driver_sql.py),
instead of each request running its own SQLAlchemy session transaction (a profile of the request path: on SQLite
about fifteen hand-offs to aiosqlite's thread per forwarded request, on Postgres a round trip per
statement). Concurrent requests share a commit: one WAL flush on Postgres, one write-lock turn on
SQLite.

The same writer answers the two reads the request path makes of committed rows, a router's counter
and the decisions a feedback event is about (``Ledger.counts``, ``Ledger.decisions``): every read
waiting with a batch is served by one statement per kind, before the batch's writes.

A decision whose policy counts exactly (BALROG's query budget, ``counter_use == "exact"``) is written
by ``Ledger.counted``: one transaction that locks the router's ``router_counters`` row, reads its
counts, runs the caller's choice (the policy's ``select``, on the event loop) and writes the decision
with its count, so concurrent decisions of one router, in any process, see each other's counts. The
lock is held for exactly that: the read, the choice and the write.

A batch is all or nothing; when its transaction fails (one write breaking a constraint, say), each
write of it is committed again alone, so a bad write fails only its own request.

``SqliteLedger`` (app/store/ledger_sqlite.py): one thread, one ``sqlite3`` connection with the engine's
pragmas (WAL, ``synchronous=NORMAL``, foreign keys). ``PostgresLedger`` (app/store/ledger_postgres.py):
one asyncpg connection, one statement per batch (data-modifying CTEs, one round trip).
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from app.store.driver_sql import counts_selects, decisions_selects, driver_rows, rows_params
from app.store.models import Attempt, DecisionRow, FeedbackEvent, Probe
from app.store.recent_decisions import RecentDecisions

FeedbackKey = tuple[str | None, str, str]  # (decision_id, model, kind): the feedback table's unique key


@dataclass
class LedgerWrite:
    """One request's rows (mapped attribute names, as the app keys them): a ``decision``, its
    ``attempts``, ``feedback`` events (each inserted unless one with its (decision, model, kind)
    exists), ``count``: (router id, decisions, query rounds) added to the router's counter, and
    ``info``: (decision id, keys) merged into that decision's ``info`` (who answered it), whether it is
    this write's own ``decision`` (merged before it is inserted) or one stored before, ``probes``:
    active-learning probes' rows, ``answered_probes``: (decision id, model) of pending probes marked
    answered."""

    decision: Mapping[str, Any] | None = None
    attempts: Sequence[Mapping[str, Any]] = ()
    feedback: Sequence[Mapping[str, Any]] = ()
    count: tuple[int, int, int] | None = None
    info: tuple[str, Mapping[str, Any]] | None = None
    probes: Sequence[Mapping[str, Any]] = ()
    answered_probes: Sequence[tuple[str, str]] = ()


@dataclass
class PreparedWrite:
    """A ``LedgerWrite`` as the driver's positional parameters (converted on the caller's side, so a
    row that cannot be converted fails its own request, not a batch)."""

    decisions: list[list[Any]] = field(default_factory=list)
    attempts: list[list[Any]] = field(default_factory=list)
    feedback: list[list[Any]] = field(default_factory=list)
    feedback_keys: list[FeedbackKey] = field(default_factory=list)
    count: tuple[int, int, int] | None = None
    info: tuple[str, str] | None = None  # (decision id, the keys to merge as a JSON object)
    probes: list[list[Any]] = field(default_factory=list)
    answered_probes: list[tuple[str, str]] = field(default_factory=list)
    routers: tuple[int, ...] = ()  # the routers its rows name (Postgres locks them first: ledger_postgres)

    @property
    def parameters(self) -> int:
        rows = self.decisions + self.attempts + self.feedback + self.probes
        marks = 2 * len(self.answered_probes)
        counted = (3 if self.count else 0) + (2 if self.info else 0) + marks
        return sum(len(r) for r in rows) + counted + (1 if self.routers else 0)


@dataclass(frozen=True)
class CountsRead:
    """A router's counter, read on the ledger's connection: (decisions, query rounds) as committed."""

    router_id: int


@dataclass(frozen=True)
class DecisionsRead:
    """The decisions of ``ids`` that are the tenant's, read on the ledger's connection as committed."""

    tenant_id: int
    ids: tuple[str, ...]


Read = CountsRead | DecisionsRead
Queued = PreparedWrite | Read
Counts = tuple[int, int]
# a write's feedback ids, a read's counts or decisions, or its error
Served = list[int | None] | Counts | list[DecisionRow] | BaseException


def split(batch: Sequence[Queued]) -> tuple[list[tuple[int, Read]], list[tuple[int, PreparedWrite]]]:
    """A batch's reads and its writes, each with its position."""
    reads = [(i, item) for i, item in enumerate(batch) if not isinstance(item, PreparedWrite)]
    writes = [(i, item) for i, item in enumerate(batch) if isinstance(item, PreparedWrite)]
    return reads, writes


Statement = tuple[type[Read], str, list[Any]]  # the kind of read it serves, its SQL, its parameters


def read_statements(reads: Sequence[tuple[int, Read]], dialect_name: str) -> list[Statement]:
    """The statements that answer a batch's reads, each counter and each decision asked for once
    (``driver_sql.selects_by_key``: one statement per kind on Postgres)."""
    routers = sorted({read.router_id for _, read in reads if isinstance(read, CountsRead)})
    ids = sorted({i for _, read in reads if isinstance(read, DecisionsRead) for i in read.ids})
    counts = [(CountsRead, sql, params) for sql, params in counts_selects(dialect_name, routers)]
    decisions = [(DecisionsRead, sql, params) for sql, params in decisions_selects(dialect_name, ids)]
    return [*counts, *decisions]


def read_outcomes(
    reads: Sequence[tuple[int, Read]],
    results: Sequence[tuple[type[Read], Sequence[Sequence[Any]]]],
    dialect_name: str,
) -> dict[int, Served]:
    """Each read's outcome by its position, from the rows its ``read_statements`` returned: a
    counter's (decisions, query rounds), (0, 0) for a router never counted; a ``DecisionsRead``'s
    decisions in the order asked, each once, the tenant's only (detached rows: the ORM's values)."""
    counts: dict[int, Counts] = {}
    decisions: dict[str, DecisionRow] = {}
    rows = driver_rows(DecisionRow, dialect_name)
    for kind, records in results:
        for record in records:
            if kind is CountsRead:
                counts[int(record[0])] = (int(record[1]), int(record[2]))
            else:
                decision = DecisionRow(**rows.attributes(record))
                decisions[decision.id] = decision
    outcomes: dict[int, Served] = {}
    for i, read in reads:
        if isinstance(read, CountsRead):
            outcomes[i] = counts.get(read.router_id, (0, 0))
            continue
        found = (decisions.get(decision_id) for decision_id in dict.fromkeys(read.ids))
        outcomes[i] = [d for d in found if d is not None and d.tenant_id == read.tenant_id]
    return outcomes


def prepare(write: LedgerWrite, dialect_name: str) -> PreparedWrite:
    """``write``'s rows as ``dialect_name``'s driver parameters; an ``info`` merge into the write's own
    decision is applied to its row (no UPDATE: on Postgres a sibling CTE's UPDATE would not see the
    row the statement inserts)."""
    prepared = PreparedWrite(count=write.count)
    decision = write.decision
    if write.info is not None:
        decision_id, keys = write.info
        if decision is not None and decision["id"] == decision_id:
            decision = {**decision, "info": {**(decision.get("info") or {}), **keys}}
        else:
            prepared.info = (decision_id, json.dumps(dict(keys)))
    tables = [
        (DecisionRow, [decision] if decision is not None else []),
        (Attempt, write.attempts),
        (Probe, write.probes),
        (FeedbackEvent, write.feedback),
    ]
    prepared.decisions, prepared.attempts, prepared.probes, prepared.feedback = rows_params(
        tables, dialect_name
    )
    prepared.answered_probes = list(write.answered_probes)
    named = [
        row.get("router_id") for row in [*([decision] if decision else []), *write.feedback, *write.probes]
    ]
    if write.count is not None:
        named.append(write.count[0])
    prepared.routers = tuple(sorted({int(r) for r in named if r is not None}))
    prepared.feedback_keys = [
        (row.get("decision_id"), str(row["model"]), str(row["kind"])) for row in write.feedback
    ]
    return prepared


def merged_counts(batch: Sequence[PreparedWrite]) -> list[tuple[int, int, int]]:
    """The batch's counter increments summed per router, in router id order (two writers that lock
    the same counters lock them in the same order)."""
    totals: dict[int, list[int]] = {}
    for write in batch:
        if write.count is not None:
            router_id, decisions, query_rounds = write.count
            total = totals.setdefault(router_id, [0, 0])
            total[0] += decisions
            total[1] += query_rounds
    return [(router_id, d, q) for router_id, (d, q) in sorted(totals.items())]


def feedback_ids(
    batch: Sequence[PreparedWrite], inserted: Sequence[tuple[FeedbackKey, int]]
) -> list[list[int | None]]:
    """Each write's feedback ids in its order, from the (key, id) pairs the batch inserted: None for
    an event whose key existed already (a duplicate, also one repeated within the batch)."""
    fresh: dict[FeedbackKey, int] = dict(inserted)
    out: list[list[int | None]] = []
    for write in batch:
        out.append([fresh.pop(key, None) for key in write.feedback_keys])
    return out


class LedgerError(Exception):
    """A write (or read) the database refused or could not take; the request that made it fails (a
    500)."""


class OwnerDeleted(LedgerError):
    """A write the database refused by a foreign key: a row names a tenant, router or decision that no
    longer exists (deleted while the request that made the write was in flight). The request path
    answers it as the deletion would have: nothing of the deleted owner is kept."""


class LedgerClosed(LedgerError):
    """A write after the ledger was closed (the process is shutting down)."""


Chosen = TypeVar("Chosen")
Choice = Callable[[Counts], PreparedWrite]  # the counts as locked -> the write to commit under the lock


class Ledger(ABC):
    """Group-committed writes, and the reads the request path makes of what it wrote (a router's
    counter, which kNN-UCB reads for its round t; the decisions feedback is about); ``commits`` counts
    the transactions committed."""

    dialect: str
    commits: int = 0
    recent: RecentDecisions | None = None  # the decisions it committed lately (``make_ledger`` sets it)

    async def write(self, write: LedgerWrite) -> list[int | None]:
        """Commit ``write`` (with whatever other writes are waiting); the ids of its feedback events in
        order, None for a duplicate. Its decision and ``info`` merge go to ``recent`` once committed."""
        prepared = prepare(write, self.dialect)
        recent = self.recent
        generation = recent.generation if recent is not None else 0
        try:
            ids: list[int | None] = await self._submit(prepared)
        except BaseException:  # cancelled, the merge is committed all the same: memory cannot tell
            if recent is not None and prepared.info is not None:
                recent.forget([prepared.info[0]])
            raise
        if recent is not None:
            for params in prepared.decisions:
                recent.remember(params, generation)
            if prepared.info is not None:
                recent.merge(*prepared.info, generation)
        return ids

    async def counted(self, router_id: int, choose: Callable[[Counts], tuple[Chosen, LedgerWrite]]) -> Chosen:
        """One decision counted exactly: in one transaction on a connection of the ledger's, lock the
        router's ``router_counters`` row (created at (0, 0) when missing), read its (decisions, query
        rounds), call ``choose`` with them on the event loop (the policy's ``select``; it must not
        await) and commit the write it returns (the decision and its count) before the lock is
        released. So the counts a choice sees include every decision of the router committed before
        it, in any process, and none can come between the read and the write: a query budget is never
        overspent. When ``choose`` raises, nothing is written and its error is raised. When the
        database aborts the transaction for a conflict (Postgres: a deadlock with a router's
        deletion, say), nothing was written: the counts are locked and read again and ``choose`` is
        called again. The lock's scope is exactly the read, the choice and the write; decisions of a
        router counted otherwise never take it. A cancelled caller does not cancel the decision: it is committed. Returns what
        ``choose`` returned with the write."""
        chosen: list[Chosen] = []
        prepared: list[PreparedWrite] = []

        def choice(counts: Counts) -> PreparedWrite:  # again if the write was aborted for a conflict
            result, write = choose(counts)
            chosen[:] = [result]
            prepared[:] = [prepare(write, self.dialect)]
            return prepared[0]

        async def committed() -> None:
            recent = self.recent
            generation = recent.generation if recent is not None else 0
            await self._counted(router_id, choice)
            if recent is not None:
                for params in prepared[0].decisions:
                    recent.remember(params, generation)

        task = asyncio.ensure_future(committed())
        task.add_done_callback(retrieved)
        await asyncio.shield(task)
        return chosen[0]

    async def counts(self, router_id: int) -> Counts:
        """The router's (decisions, query rounds) as committed, without a lock (decisions still in
        flight are not in it), read on the writer's connection with the other reads waiting then: one
        statement for all of them."""
        found: Counts = await self._submit(CountsRead(router_id))
        return found

    async def decisions(
        self, tenant_id: int, ids: Sequence[str], remembered: bool = True
    ) -> list[DecisionRow]:
        """The tenant's decisions among ``ids`` as committed, in the order asked, each once (an id
        unknown or another tenant's is left out): from ``recent`` those it holds (unless not
        ``remembered``), the others read on the writer's connection with the other reads waiting then.
        The rows are detached ``DecisionRow``s holding what the ORM would load."""
        recent = self.recent if remembered else None
        if recent is None:
            read: list[DecisionRow] = await self._submit(DecisionsRead(tenant_id, tuple(ids)))
            return read
        found, missing = recent.find(tenant_id, ids)
        if missing:
            found.update(
                (row.id, row) for row in await self._submit(DecisionsRead(tenant_id, tuple(missing)))
            )
        return [found[i] for i in dict.fromkeys(ids) if i in found]

    @abstractmethod
    async def _counted(self, router_id: int, choice: Choice) -> list[int | None]:
        """``counted``'s transaction: lock and read the router's counter, ``choice`` (raising: roll
        back and raise its error), commit its write; the write's feedback ids."""

    @abstractmethod
    async def _submit(self, item: Queued) -> Any:
        """Queue ``item`` for the writer and wait for its outcome (raised when it is an error). A
        cancelled caller (a client that went away) does not cancel a write: it is committed."""

    @abstractmethod
    async def close(self) -> None:
        """Commit what is queued, then stop."""


def retrieved(task: asyncio.Future[Any]) -> None:
    """Mark a future's error retrieved (a shielded task whose caller was cancelled, an outcome its
    caller may have stopped waiting for)."""
    if not task.cancelled():
        task.exception()


def parameters_of(item: Queued) -> int:
    """An item's parameters in a batch's statements."""
    return item.parameters if isinstance(item, PreparedWrite) else 1  # a read is its own statement


Entry = TypeVar("Entry", bound=tuple[Any, ...])  # a writer's queue entry: (item, ..., its future)


def drain(
    first: Entry,
    get_nowait: Callable[[], Entry | None],
    empty: type[Exception],
    max_items: int,
    max_parameters: int | None = None,
) -> tuple[list[Entry], bool]:
    """``first`` and whatever is queued behind it now (``get_nowait`` raising ``empty`` when nothing
    is), up to ``max_items`` entries and ``max_parameters`` parameters; and whether the close marker
    (None) was taken, after which the writer stops once this batch is served."""
    batch = [first]
    parameters = parameters_of(first[0])
    while len(batch) < max_items and (max_parameters is None or parameters <= max_parameters):
        try:
            queued = get_nowait()
        except empty:
            break
        if queued is None:
            return batch, True
        batch.append(queued)
        parameters += parameters_of(queued[0])
    return batch, False


def answered(
    size: int,
    reads: Mapping[int, Served],
    writes: Sequence[tuple[int, PreparedWrite]],
    committed: Sequence[Served],
) -> list[Served]:
    """Each item's outcome in the batch's order: a read's (``read_outcomes``), a write's feedback ids
    or error."""
    outcomes: list[Served] = [LedgerError("not served") for _ in range(size)]
    for i, outcome in reads.items():
        outcomes[i] = outcome
    for (i, _), outcome in zip(writes, committed, strict=True):
        outcomes[i] = outcome
    return outcomes


def hand_back(pairs: Iterable[tuple[asyncio.Future[Any], Served]]) -> None:
    """Hand each outcome to its waiting caller (a caller that went away has a done future: skipped)."""
    for future, outcome in pairs:
        if future.done():
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
