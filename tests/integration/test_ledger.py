"""The ledger (app/store/ledger*.py) against real SQLite and Postgres: what it writes reads back through
the ORM unchanged, concurrent writes share commits, a bad write fails alone, duplicates are told apart,
closing commits what is queued, and a dropped Postgres connection is replaced."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import asyncpg
import numpy as np
import pytest
from sqlalchemy import delete, select, text

from app.store.db import make_engine, make_ledger, make_sessionmaker
from app.store.driver_sql import lock_router_pg, model_params
from app.store.ledger import Ledger, LedgerClosed, LedgerError, LedgerWrite, OwnerDeleted
from app.store.ledger_sqlite import SqliteLedger
from app.store.models import Attempt, DecisionRow, FeedbackEvent, Router, RouterCounter, Tenant
from app.store.sqlite_settings import sqlite_path
from tests.conftest import PG_SERVER, REDIS_URL, Stack

pytestmark = pytest.mark.asyncio


class Place:
    """A tenant and a router to write decisions for, made through the ORM."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.engine = make_engine(stack.database_url)
        self.sessions = make_sessionmaker(self.engine)
        self.tenant_id = 0
        self.router_id = 0

    async def setup(self) -> None:
        async with self.sessions() as session:
            tenant = Tenant(name=f"ledger-{uuid.uuid4().hex[:8]}")
            session.add(tenant)
            await session.flush()
            router = Router(tenant_id=tenant.id, name="main", policy="always", arms=["a", "b"])
            session.add(router)
            await session.commit()
            self.tenant_id, self.router_id = tenant.id, router.id

    def decision(self, **info: object) -> dict[str, object]:
        return {
            "id": uuid.uuid4().hex,
            "tenant_id": self.tenant_id,
            "router_id": self.router_id,
            "router_version": 1,
            "policy": "always",
            "models": ["a"],
            "query": [],
            "scores": {"a": {"index": 0.5}},
            "info": dict(info),
            "embedding": np.arange(4, dtype=np.float32).tobytes(),
            "prompt_hash": "h" * 64,
            "prompt_chars": 12,
            "request_metadata": {"team": "x"},
        }

    def feedback(self, decision_id: str, model: str = "a", kind: str = "cost") -> dict[str, object]:
        return {
            "decision_id": decision_id,
            "tenant_id": self.tenant_id,
            "router_id": self.router_id,
            "model": model,
            "kind": kind,
            "reward": None,
            "cost": 0.25,
            "payload": {"metadata": {"k": 1}},
        }

    async def counter(self) -> int:
        async with self.sessions() as session:
            found = await session.scalar(
                select(RouterCounter.decisions).where(RouterCounter.router_id == self.router_id)
            )
            return int(found or 0)


@pytest.fixture(params=["sqlite", "sqlite inline", "postgres"])
def stack(request: pytest.FixtureRequest) -> Stack:
    """conftest's stacks, and SQLite once more with the ledger's inline path on (``ledger_inline``)."""
    if request.param == "postgres":
        return Stack("postgres", request.getfixturevalue("pg_url"), REDIS_URL)
    return Stack("sqlite", request.getfixturevalue("sqlite_url"), None)


def inline(request: pytest.FixtureRequest) -> bool:
    return bool(request.node.callspec.params.get("stack") == "sqlite inline")


@asynccontextmanager
async def placed(stack: Stack) -> AsyncIterator[Place]:
    """A ``Place`` set up in ``stack``; its engine disposed of afterwards."""
    place = Place(stack)
    await place.setup()
    try:
        yield place
    finally:
        await place.engine.dispose()


@pytest.fixture
async def place(stack: Stack) -> AsyncIterator[Place]:
    async with placed(stack) as place:
        yield place


@pytest.fixture
async def ledger(place: Place, request: pytest.FixtureRequest) -> AsyncIterator[Ledger]:
    ledger = make_ledger(place.stack.database_url, max_batch=128, sqlite_inline=inline(request))
    yield ledger
    await ledger.close()


async def test_a_write_reads_back_through_the_orm_as_written(place: Place, ledger: Ledger) -> None:
    decision = place.decision(t=3)
    attempt = {
        "decision_id": decision["id"],
        "model": "a",
        "number": 1,
        "outcome": "ok",
        "http_status": 200,
        "latency_ms": 1.5,
        "error": None,
    }
    before = datetime.now(UTC)
    ids = await ledger.write(
        LedgerWrite(
            decision=decision,
            attempts=[attempt],
            feedback=[place.feedback(str(decision["id"]))],
            count=(place.router_id, 1, 0),
        )
    )
    assert len(ids) == 1 and isinstance(ids[0], int)
    async with place.sessions() as session:
        row = await session.get(DecisionRow, decision["id"])
        assert row is not None
        assert row.models == ["a"] and row.query == [] and row.scores == {"a": {"index": 0.5}}
        assert row.info == {"t": 3} and row.request_metadata == {"team": "x"}
        assert np.frombuffer(row.embedding, np.float32).tolist() == [0.0, 1.0, 2.0, 3.0]
        created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
        assert abs((created - before).total_seconds()) < 60  # the column's default, filled in
        attempts = (await session.scalars(select(Attempt).where(Attempt.decision_id == decision["id"]))).all()
        assert [(a.model, a.number, a.outcome, a.http_status, a.latency_ms) for a in attempts] == [
            ("a", 1, "ok", 200, 1.5)
        ]
        event = await session.get(FeedbackEvent, ids[0])
        assert event is not None
        assert (event.decision_id, event.model, event.kind, event.cost) == (decision["id"], "a", "cost", 0.25)
        assert event.payload == {"metadata": {"k": 1}} and event.row_id is None
    assert await place.counter() == 1
    assert ledger.commits == 1


async def test_info_keys_merge_into_a_stored_decision(place: Place, ledger: Ledger) -> None:
    decision = place.decision(t=1, adaptive=True)
    await ledger.write(LedgerWrite(decision=decision))
    await ledger.write(LedgerWrite(info=(str(decision["id"]), {"answered_by": "b", "ensemble": ["b", "a"]})))
    async with place.sessions() as session:
        row = await session.get(DecisionRow, decision["id"])
        assert row is not None
        assert row.info == {"t": 1, "adaptive": True, "answered_by": "b", "ensemble": ["b", "a"]}


async def test_a_duplicate_event_gets_no_id_also_within_one_batch(place: Place, ledger: Ledger) -> None:
    decision = place.decision()
    await ledger.write(LedgerWrite(decision=decision))
    did = str(decision["id"])
    first, second = await asyncio.gather(
        ledger.write(LedgerWrite(feedback=[place.feedback(did, kind="bandit")])),
        ledger.write(LedgerWrite(feedback=[place.feedback(did, kind="bandit")])),
    )
    assert sorted([first[0] is None, second[0] is None]) == [False, True]
    again = await ledger.write(
        LedgerWrite(feedback=[place.feedback(did, kind="bandit"), place.feedback(did, "b")])
    )
    assert again[0] is None and isinstance(again[1], int)


async def test_concurrent_writes_share_commits_and_every_count_is_kept(place: Place, ledger: Ledger) -> None:
    """50 writes queued while the database's write lock is taken commit in at most two transactions
    (the one the writer may have started on the first write, then all the rest), and the router's
    counter counts all 50."""
    blocker: sqlite3.Connection | asyncpg.Connection
    if place.stack.name == "sqlite":
        blocker = sqlite3.connect(sqlite_path(place.stack.database_url), isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
    else:
        blocker = await asyncpg.connect(place.stack.database_url.replace("postgresql+asyncpg", "postgresql"))
        await blocker.execute("BEGIN")
        await blocker.execute(f"SELECT * FROM router_counters WHERE router_id = {place.router_id} FOR UPDATE")
        await blocker.execute(
            f"INSERT INTO router_counters VALUES ({place.router_id}, 0, 0) ON CONFLICT DO NOTHING"
        )
    writes = [
        asyncio.ensure_future(
            ledger.write(LedgerWrite(decision=place.decision(), count=(place.router_id, 1, 0)))
        )
        for _ in range(50)
    ]
    await asyncio.sleep(0.3)
    assert not any(w.done() for w in writes)  # nothing is acknowledged before its commit
    if isinstance(blocker, sqlite3.Connection):
        blocker.execute("COMMIT")
        blocker.close()
    else:
        await blocker.execute("COMMIT")
        await blocker.close()
    await asyncio.gather(*writes)
    assert 1 <= ledger.commits <= 2
    assert await place.counter() == 50


async def test_a_bad_write_fails_alone(place: Place, ledger: Ledger) -> None:
    good = [place.decision() for _ in range(5)]
    orphan = place.feedback("no-such-decision")  # breaks the foreign key to decisions
    outcomes = await asyncio.gather(
        *(ledger.write(LedgerWrite(decision=d)) for d in good[:2]),
        ledger.write(LedgerWrite(feedback=[orphan])),
        *(ledger.write(LedgerWrite(decision=d)) for d in good[2:]),
        return_exceptions=True,
    )
    assert isinstance(outcomes[2], OwnerDeleted)
    assert [o for i, o in enumerate(outcomes) if i != 2] == [[]] * 5
    async with place.sessions() as session:
        stored = await session.scalars(
            select(DecisionRow.id).where(DecisionRow.id.in_([d["id"] for d in good]))
        )
        assert len(stored.all()) == 5


async def test_a_write_for_a_deleted_router_is_owner_deleted_and_other_refusals_are_not(
    place: Place, ledger: Ledger
) -> None:
    kept = place.decision()
    await ledger.write(LedgerWrite(decision=kept))
    with pytest.raises(LedgerError) as duplicate:  # a primary key, not a foreign one
        await ledger.write(LedgerWrite(decision=kept))
    assert not isinstance(duplicate.value, OwnerDeleted)
    async with place.sessions() as session:
        await session.delete(await session.get(Router, place.router_id))
        await session.commit()
    with pytest.raises(OwnerDeleted, match="owner is gone"):
        await ledger.write(LedgerWrite(decision=place.decision()))
    with pytest.raises(OwnerDeleted):
        await ledger.write(LedgerWrite(feedback=[place.feedback(kept["id"])]))


async def test_close_commits_what_is_queued_and_refuses_later_writes(
    place: Place, request: pytest.FixtureRequest
) -> None:
    ledger = make_ledger(place.stack.database_url, max_batch=4, sqlite_inline=inline(request))
    decisions = [place.decision() for _ in range(10)]
    writes = [asyncio.ensure_future(ledger.write(LedgerWrite(decision=d))) for d in decisions]
    await asyncio.sleep(0)
    await ledger.close()
    await asyncio.gather(*writes)
    with pytest.raises(LedgerClosed):
        await ledger.write(LedgerWrite(decision=place.decision()))
    async with place.sessions() as session:
        ids = [d["id"] for d in decisions]
        assert len((await session.scalars(select(DecisionRow.id).where(DecisionRow.id.in_(ids)))).all()) == 10
    assert ledger.commits >= 3  # at most 4 writes a batch


async def deadlocked_once(place: Place, waiting: str, decision: dict[str, object]) -> None:
    """Deadlock the transaction writing ``decision`` once: another one holds the router's row (``FOR
    UPDATE``) while the write waits for it (its foreign key), then inserts the same decision id, so each
    waits for the other. Only the write's side runs Postgres's deadlock check in time (the other's
    ``deadlock_timeout`` is 60 s), so the write is the one aborted; the other then rolls back."""
    async with place.sessions() as other:
        await other.execute(text("SET deadlock_timeout = '60s'"))
        await other.execute(select(Router).where(Router.id == place.router_id).with_for_update())
        await until_waiting(place, waiting)
        other.add(DecisionRow(**decision))
        await other.flush()  # waits on the write's insert until Postgres aborts the write
        await other.rollback()


async def until_waiting(place: Place, query: str) -> None:
    """Until a session of this database other than this one waits on a lock running ``query``."""
    async with place.sessions() as probe:
        for _ in range(500):
            waiting = await probe.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query ILIKE :q"
                ),
                {"q": f"%{query}%"},
            )
            if waiting:
                return
            await probe.commit()  # pg_stat_activity is read once per transaction
            await asyncio.sleep(0.02)
    raise AssertionError(f"no session waited on a lock running {query!r}")


async def test_postgres_a_write_aborted_for_a_deadlock_is_sent_again(
    pg_stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    async with placed(pg_stack) as place:
        ledger = make_ledger(pg_stack.database_url, max_batch=16)
        try:
            decision = place.decision()
            with caplog.at_level(logging.INFO, logger="app.store.ledger_postgres"):
                write = asyncio.ensure_future(ledger.write(LedgerWrite(decision=decision)))
                await deadlocked_once(place, "INSERT INTO decisions", decision)
                assert await write == []
            assert "aborted for a conflict" in caplog.text and "deadlock detected" in caplog.text
            async with place.sessions() as session:
                assert await session.get(DecisionRow, decision["id"]) is not None
        finally:
            await ledger.close()


async def test_postgres_a_counted_decision_aborted_for_a_deadlock_is_chosen_again(
    pg_stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    """Another transaction inserts the decision's id first (uncommitted), the counted decision's write
    waits on it while holding the counter's lock, and the other then waits on that lock: the counted
    transaction is aborted, locks the counter again, reads the counts again and chooses again."""
    async with placed(pg_stack) as place:
        ledger = make_ledger(pg_stack.database_url, max_batch=16)
        decision = place.decision()
        seen: list[tuple[int, int]] = []

        def choose(counts: tuple[int, int]) -> tuple[str, LedgerWrite]:
            seen.append(counts)
            return f"choice {len(seen)}", LedgerWrite(decision=decision, count=(place.router_id, 1, 0))

        try:
            # the counter's row exists: the decision's lock is a row lock the other can wait on
            await ledger.write(LedgerWrite(decision=place.decision(), count=(place.router_id, 1, 0)))
            async with place.sessions() as other:
                await other.execute(text("SET deadlock_timeout = '60s'"))
                other.add(DecisionRow(**decision))
                await other.flush()
                with caplog.at_level(logging.INFO, logger="app.store.ledger_postgres"):
                    counted = asyncio.ensure_future(ledger.counted(place.router_id, choose))
                    await until_waiting(place, "INSERT INTO decisions")
                    counter = RouterCounter.__table__
                    await other.execute(  # waits on the counter's lock until Postgres aborts the decision
                        counter.update().where(counter.c.router_id == place.router_id).values(decisions=7)
                    )
                    await other.rollback()
                    assert await counted == "choice 2"
            assert seen == [(1, 0), (1, 0)]
            assert "counted decision was aborted for a conflict" in caplog.text
            assert await place.counter() == 2
        finally:
            await ledger.close()


async def test_postgres_a_write_waits_for_its_routers_deletion_instead_of_deadlocking(
    pg_stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    """A deletion takes its router's advisory lock first (``lock_router_pg``), every write of the
    request path takes its routers' locks before any row: a write that meets a deletion under way
    waits for it, then finds its owner gone, with no deadlock for Postgres to break (no write sent
    again), and a counted decision likewise."""
    async with placed(pg_stack) as place:
        ledger = make_ledger(pg_stack.database_url, max_batch=16)
        try:
            kept = place.decision()
            await ledger.write(LedgerWrite(decision=kept))
            with caplog.at_level(logging.INFO, logger="app.store.ledger_postgres"):
                async with place.sessions() as deleting:
                    await deleting.execute(text(lock_router_pg()), {"router_id": place.router_id})
                    await deleting.execute(delete(Router).where(Router.id == place.router_id))
                    write = asyncio.ensure_future(
                        ledger.write(
                            LedgerWrite(decision=place.decision(), feedback=[place.feedback(kept["id"])])
                        )
                    )
                    counted = asyncio.ensure_future(ledger.counted(place.router_id, budgeted(place, [])))
                    await until_waiting(place, "pg_advisory_xact_lock_shared")
                    assert not write.done() and not counted.done()
                    await deleting.commit()
                with pytest.raises(OwnerDeleted):
                    await write
                with pytest.raises(OwnerDeleted):
                    await counted
            assert "aborted for a conflict" not in caplog.text
        finally:
            await ledger.close()


async def test_postgres_a_dropped_connection_is_replaced(pg_stack: Stack) -> None:
    place = Place(pg_stack)
    await place.setup()
    ledger = make_ledger(pg_stack.database_url, max_batch=16)
    try:
        await ledger.write(LedgerWrite(decision=place.decision()))
        admin = await asyncpg.connect(PG_SERVER + "/test")
        try:
            database = pg_stack.database_url.rsplit("/", 1)[1]
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name = ''",
                database,
            )
        finally:
            await admin.close()
        assert killed >= 1
        decision = place.decision()
        await ledger.write(LedgerWrite(decision=decision, count=(place.router_id, 1, 0)))
        async with place.sessions() as session:
            assert await session.get(DecisionRow, decision["id"]) is not None
    finally:
        await ledger.close()
        await place.engine.dispose()


async def test_counts_read_what_was_committed_and_zero_for_a_router_never_counted(
    place: Place, ledger: Ledger
) -> None:
    assert await ledger.counts(place.router_id) == (0, 0)
    await ledger.write(LedgerWrite(decision=place.decision(), count=(place.router_id, 1, 1)))
    await ledger.write(LedgerWrite(decision=place.decision(), count=(place.router_id, 1, 0)))
    assert await ledger.counts(place.router_id) == (2, 1)
    # reads queued with writes are answered in the same batch, each read seeing what was committed
    # before its batch
    mixed = await asyncio.gather(
        ledger.counts(place.router_id),
        ledger.write(LedgerWrite(decision=place.decision(), count=(place.router_id, 1, 0))),
        ledger.counts(place.router_id + 10_000),
    )
    assert mixed[0] in {(2, 1), (3, 1)} and mixed[1] == [] and mixed[2] == (0, 0)
    assert await ledger.counts(place.router_id) == (3, 1)


COLUMNS = [column.key for column in DecisionRow.__mapper__.column_attrs]


async def test_decisions_read_back_as_the_orm_loads_them(place: Place, ledger: Ledger) -> None:
    """A decision read on the ledger's connection holds what the ORM loads, value for value (JSON
    decoded, bytes, the timestamp as the dialect returns it), whether the ledger or a session wrote it."""
    by_ledger = place.decision(answered_by="a", nested={"x": [1, 2.5, None]})
    await ledger.write(LedgerWrite(decision=by_ledger))
    by_session = place.decision()
    async with place.sessions() as session:
        session.add(DecisionRow(**{**by_session, "query": ["b"], "request_metadata": {}}))
        await session.commit()
    found = await ledger.decisions(place.tenant_id, [str(by_ledger["id"]), str(by_session["id"])])
    assert [d.id for d in found] == [by_ledger["id"], by_session["id"]]
    async with place.sessions() as session:
        for read in found:
            loaded = await session.get(DecisionRow, read.id)
            assert loaded is not None
            assert {c: getattr(read, c) for c in COLUMNS} == {c: getattr(loaded, c) for c in COLUMNS}
    assert found[0].info == {"answered_by": "a", "nested": {"x": [1, 2.5, None]}}
    assert found[1].query == ["b"] and found[1].request_metadata == {}
    assert np.array_equal(np.frombuffer(found[0].embedding, dtype=np.float32), np.arange(4))


async def test_decisions_read_only_the_tenants_in_the_order_asked_each_once(
    place: Place, ledger: Ledger
) -> None:
    other = Place(place.stack)
    await other.setup()
    try:
        mine = [place.decision() for _ in range(3)]
        theirs = other.decision()
        for decision in [*mine, theirs]:
            await ledger.write(LedgerWrite(decision=decision))
        ids = [str(d["id"]) for d in mine]
        asked = [ids[2], "no-such-decision", str(theirs["id"]), ids[0], ids[2]]
        assert [d.id for d in await ledger.decisions(place.tenant_id, asked)] == [ids[2], ids[0]]
        assert [d.id for d in await ledger.decisions(other.tenant_id, asked)] == [theirs["id"]]
        # reads queued together are answered by one statement, each with its own tenant and ids
        reads = await asyncio.gather(
            ledger.decisions(place.tenant_id, [ids[1]]),
            ledger.decisions(other.tenant_id, [ids[1], str(theirs["id"])]),
            ledger.counts(place.router_id),
        )
        assert [d.id for d in reads[0]] == [ids[1]] and [d.id for d in reads[1]] == [theirs["id"]]
        # more ids than SQLite takes in one statement's chunk (500)
        many = [uuid.uuid4().hex for _ in range(1_100)]
        many[777] = ids[1]
        assert [d.id for d in await ledger.decisions(place.tenant_id, many)] == [ids[1]]
    finally:
        await other.engine.dispose()


async def test_postgres_a_value_the_driver_cannot_encode_fails_only_its_write(pg_stack: Stack) -> None:
    place = Place(pg_stack)
    await place.setup()
    ledger = make_ledger(pg_stack.database_url, max_batch=16)
    try:
        bad = {**place.decision(), "prompt_chars": 2**40}  # an INTEGER column
        good = [place.decision() for _ in range(3)]
        outcomes = await asyncio.gather(
            ledger.write(LedgerWrite(decision=good[0])),
            ledger.write(LedgerWrite(decision=bad)),
            *(ledger.write(LedgerWrite(decision=d)) for d in good[1:]),
            return_exceptions=True,
        )
        assert isinstance(outcomes[1], LedgerError)
        assert [outcomes[0], *outcomes[2:]] == [[], [], []]
        async with place.sessions() as session:
            ids = [d["id"] for d in good]
            assert (
                len((await session.scalars(select(DecisionRow.id).where(DecisionRow.id.in_(ids)))).all()) == 3
            )
    finally:
        await ledger.close()
        await place.engine.dispose()


@pytest.fixture
async def remembering(place: Place, request: pytest.FixtureRequest) -> AsyncIterator[Ledger]:
    """A ledger that keeps the last 3 decisions it committed in memory."""
    ledger = make_ledger(place.stack.database_url, 128, sqlite_inline=inline(request), recent_decisions=3)
    yield ledger
    await ledger.close()


async def delete_rows(place: Place, ids: list[str]) -> None:
    """Delete decisions behind the ledger's back (as another replica deleting their router would)."""
    async with place.sessions() as session:
        for decision_id in ids:
            row = await session.get(DecisionRow, decision_id)
            assert row is not None
            await session.delete(row)
        await session.commit()


async def test_remembered_decisions_hold_what_the_orm_loads_merges_included(
    place: Place, remembering: Ledger
) -> None:
    """A decision the ledger committed comes back from memory, value for value what the ORM loads of
    it, ``info`` merges included, in the order asked, the tenant's only; a row deleted behind its back
    is still answered from memory (so it did not read), and read afresh when not ``remembered``."""
    other = Place(place.stack)
    await other.setup()
    try:
        first = place.decision(t=1, nested={"x": [1, 2.5, None]})
        second, theirs = place.decision(), other.decision()
        for decision in (first, second, theirs):
            await remembering.write(LedgerWrite(decision=decision))
        ids = [str(first["id"]), str(second["id"])]
        await remembering.write(LedgerWrite(info=(ids[0], {"answered_by": "b", "ensemble": ["b", "a"]})))
        recent = remembering.recent
        assert recent is not None and len(recent) == 3
        asked = [ids[1], str(theirs["id"]), ids[0], ids[1]]
        found = await remembering.decisions(place.tenant_id, asked)
        assert [d.id for d in found] == [ids[1], ids[0]]
        assert (recent.hits, recent.misses) == (2, 0)  # another tenant's, held, is answered by no one
        async with place.sessions() as session:
            for held in found:
                loaded = await session.get(DecisionRow, held.id)
                assert loaded is not None
                assert {c: getattr(held, c) for c in COLUMNS} == {c: getattr(loaded, c) for c in COLUMNS}
        assert found[1].info == {
            "t": 1,
            "nested": {"x": [1, 2.5, None]},
            "answered_by": "b",
            "ensemble": ["b", "a"],
        }
        found[1].info["nested"]["x"].append("changed by a caller")  # rows are the caller's own
        await delete_rows(place, ids)
        again = await remembering.decisions(place.tenant_id, ids)
        assert [d.id for d in again] == ids and again[0].info == found[1].info | {
            "nested": {"x": [1, 2.5, None]}
        }
        assert await remembering.decisions(place.tenant_id, ids, remembered=False) == []
        recent.forget(ids)
        assert await remembering.decisions(place.tenant_id, ids) == [] and recent.misses == 2
    finally:
        await other.engine.dispose()


async def test_memory_keeps_the_newest_and_never_a_failed_or_cleared_write(
    place: Place, remembering: Ledger
) -> None:
    """At most 3 held (the oldest go first, and are read from the database); a write that failed is
    not held; a write whose commit raced a clear (a tenant or router deleted) is not held."""
    recent = remembering.recent
    assert recent is not None
    decisions = [place.decision() for _ in range(5)]
    for decision in decisions:
        await remembering.write(LedgerWrite(decision=decision))
    ids = [str(d["id"]) for d in decisions]
    assert [d.id for d in await remembering.decisions(place.tenant_id, ids)] == ids
    assert (recent.hits, recent.misses) == (3, 2)

    duplicate = {**place.decision(), "id": ids[0]}  # the primary key is taken: the write fails
    with pytest.raises(LedgerError):
        await remembering.write(LedgerWrite(decision=duplicate))
    assert not recent.holds_any([ids[0]])

    raced = place.decision()
    params = model_params(DecisionRow, remembering.dialect, raced)
    generation = recent.generation  # read as ``write`` reads it, before handing the write over
    recent.clear()  # then the commit raced a clear
    recent.remember(params, generation)
    assert not recent.holds_any([str(raced["id"])])
    recent.remember(params, recent.generation)
    assert recent.holds_any([str(raced["id"])])
    recent.clear()
    await remembering.write(LedgerWrite(decision=raced | {"id": uuid.uuid4().hex}))
    assert len(recent) == 1
    recent.clear()
    await remembering.write(LedgerWrite(info=(str(raced["id"]), {"answered_by": "a"})))
    assert len(recent) == 0  # a merge into a decision not held holds nothing


@pytest.mark.parametrize("name", ["sqlite", "pg"])
async def test_a_cancelled_merge_drops_the_decision_from_memory(
    name: str, request: pytest.FixtureRequest
) -> None:
    """A writer cancelled while its ``info`` merge is with the ledger does not know whether it was
    committed (it is: a cancelled caller does not cancel a write), so memory forgets the decision, and
    the next read finds the merge in the database."""
    async with placed(request.getfixturevalue(f"{name}_stack")) as place:
        ledger = make_ledger(place.stack.database_url, 16, recent_decisions=8)  # writes go to the writer
        try:
            decision = place.decision()
            await ledger.write(LedgerWrite(decision=decision))
            did = str(decision["id"])
            merging = asyncio.ensure_future(ledger.write(LedgerWrite(info=(did, {"answered_by": "b"}))))
            await asyncio.sleep(0)  # handed to the writer, waiting for its commit
            assert not merging.done()
            merging.cancel()
            with pytest.raises(asyncio.CancelledError):
                await merging
            assert ledger.recent is not None and not ledger.recent.holds_any([did])
            for _ in range(100):  # the write goes on without its caller
                found = await ledger.decisions(place.tenant_id, [did])
                if found[0].info.get("answered_by") == "b":
                    break
                await asyncio.sleep(0.01)
            assert found[0].info == {"answered_by": "b"}
        finally:
            await ledger.close()


def budgeted(place: Place, seen: list[tuple[int, int]], budget: int = 3):  # type: ignore[no-untyped-def]
    """A choice as BALROG's: a query round while the counts show fewer than ``budget``."""

    def choose(counts: tuple[int, int]) -> tuple[tuple[int, int], LedgerWrite]:
        seen.append(counts)
        queried = 1 if counts[1] < budget else 0
        return counts, LedgerWrite(decision=place.decision(), count=(place.router_id, 1, queried))

    return choose


async def test_counted_decisions_of_two_ledgers_each_see_the_counts_before_them(
    place: Place, ledger: Ledger, request: pytest.FixtureRequest
) -> None:
    """Two ledgers on one database (two processes) decide 20 times concurrently: the counter's lock,
    held from the read through the choice to the write, gives every choice the counts of all the
    decisions committed before it: 0..19 each once, and exactly 3 query rounds."""
    other = make_ledger(place.stack.database_url, 128, sqlite_inline=inline(request))
    seen: list[tuple[int, int]] = []
    choose = budgeted(place, seen)
    try:
        chosen = await asyncio.gather(
            *(each.counted(place.router_id, choose) for _ in range(10) for each in (ledger, other))
        )
    finally:
        await other.close()
    assert sorted(chosen) == [(i, min(i, 3)) for i in range(20)] and sorted(seen) == sorted(chosen)
    assert await ledger.counts(place.router_id) == (20, 3)


async def test_a_counted_choice_that_raises_writes_nothing_and_releases_the_lock(
    place: Place, ledger: Ledger
) -> None:
    def fails(counts: tuple[int, int]) -> tuple[None, LedgerWrite]:
        raise RuntimeError(f"the policy failed at {counts}")

    await ledger.counted(place.router_id, budgeted(place, []))
    with pytest.raises(RuntimeError, match=r"failed at \(1, 1\)"):
        await ledger.counted(place.router_id, fails)
    decision = place.decision()
    await asyncio.wait_for(ledger.write(LedgerWrite(decision=decision, count=(place.router_id, 1, 0))), 5)
    assert await asyncio.wait_for(ledger.counted(place.router_id, budgeted(place, [])), 5) == (2, 1)
    assert await ledger.counts(place.router_id) == (3, 2)


@pytest.mark.parametrize("on_loop", [False, True])
async def test_sqlite_the_write_lock_is_held_during_the_choice(sqlite_stack: Stack, on_loop: bool) -> None:
    """On SQLite the counter's lock is the database's write lock: no other connection can write while
    the choice runs, on the writer's thread or inline on the loop alike, and can once it is committed."""
    async with placed(sqlite_stack) as place:
        ledger = make_ledger(sqlite_stack.database_url, 16, sqlite_inline=on_loop)
        other = sqlite3.connect(sqlite_path(sqlite_stack.database_url), timeout=0, isolation_level=None)
        outcomes: list[str] = []

        def choose(counts: tuple[int, int]) -> tuple[None, LedgerWrite]:
            try:
                other.execute("BEGIN IMMEDIATE")
                other.execute("ROLLBACK")
                outcomes.append("wrote")
            except sqlite3.OperationalError as exc:
                outcomes.append(str(exc))
            return None, LedgerWrite(decision=place.decision(), count=(place.router_id, 1, 0))

        try:
            await ledger.counted(place.router_id, choose)
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            assert isinstance(ledger, SqliteLedger) and ledger.inline_served == int(on_loop)
        finally:
            other.close()
            await ledger.close()
        assert outcomes == ["database is locked"]
        assert await place.counter() == 1


async def test_postgres_a_counted_decisions_dropped_connection_is_replaced(pg_stack: Stack) -> None:
    async with placed(pg_stack) as place:
        ledger = make_ledger(pg_stack.database_url, max_batch=16)
        try:
            assert await ledger.counted(place.router_id, budgeted(place, [])) == (0, 0)
            admin = await asyncpg.connect(PG_SERVER + "/test")
            try:
                killed = await admin.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name = ''",
                    pg_stack.database_url.rsplit("/", 1)[1],
                )
            finally:
                await admin.close()
            assert killed >= 1
            assert await ledger.counted(place.router_id, budgeted(place, [])) == (1, 1)
        finally:
            await ledger.close()


async def test_an_answer_merges_into_its_own_decision_in_the_write_that_inserts_it(
    place: Place, remembering: Ledger
) -> None:
    """A write holding a decision and an ``info`` merge into it (a forwarded request's one write after
    its call) stores the decision merged, as memory holds it."""
    decision = place.decision(t=2)
    did = str(decision["id"])
    await remembering.write(LedgerWrite(decision=decision, info=(did, {"answered_by": "b"})))
    expected = {"t": 2, "answered_by": "b"}
    assert [d.info for d in await remembering.decisions(place.tenant_id, [did])] == [expected]
    async with place.sessions() as session:
        row = await session.get(DecisionRow, did)
        assert row is not None and row.info == expected


async def test_a_counted_decision_whose_caller_is_cancelled_is_committed_and_remembered(
    place: Place, remembering: Ledger
) -> None:
    """A client that goes away does not cancel its decision (as with every write): the choice runs, the
    decision and its count are committed, and memory holds the decision as written."""
    decision = place.decision(t=1)

    def choose(counts: tuple[int, int]) -> tuple[tuple[int, int], LedgerWrite]:
        return counts, LedgerWrite(decision=decision, count=(place.router_id, 1, 1))

    deciding = asyncio.ensure_future(remembering.counted(place.router_id, choose))
    await asyncio.sleep(0)  # handed to the ledger
    deciding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await deciding
    for _ in range(100):  # the decision goes on without its caller
        if await remembering.counts(place.router_id) == (1, 1):
            break
        await asyncio.sleep(0.01)
    assert await remembering.counts(place.router_id) == (1, 1)
    assert remembering.recent is not None and remembering.recent.holds_any([str(decision["id"])])
    async with place.sessions() as session:
        row = await session.get(DecisionRow, decision["id"])
        assert row is not None and row.info == {"t": 1}
