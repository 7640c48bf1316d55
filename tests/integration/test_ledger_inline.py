"""The SQLite ledger's inline path (``ledger_inline``, app/store/ledger_sqlite.py) against a real
SQLite file: an item that finds the writer idle is committed on the event loop; one that finds the
write lock held elsewhere goes to the writer's thread without the loop waiting for the lock, nothing
of it committed twice; a bad write fails alone; the inline connection never checkpoints, and the
checkpoints asked for every N inline commits move the WAL into the database file; a gateway run with
the setting answers and stores as without it."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.store.db import make_ledger
from app.store.ledger import LedgerError, LedgerWrite
from app.store.ledger_sqlite import SqliteLedger
from app.store.migrate import upgrade
from app.store.models import DecisionRow
from app.store.sqlite_settings import sqlite_path
from tests.conftest import Stack, bearer, running
from tests.fake_backend import FakeBackends
from tests.integration.test_forwarding import PROMPT, add_backend, add_tenant, gateway_app
from tests.integration.test_ledger import Place, placed

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def place(sqlite_stack: Stack) -> AsyncIterator[Place]:
    async with placed(sqlite_stack) as place:
        yield place


def inline_ledger(place: Place, checkpoint_commits: int = 100) -> SqliteLedger:
    ledger = make_ledger(place.stack.database_url, 128, True, checkpoint_commits)
    assert isinstance(ledger, SqliteLedger)
    return ledger


async def stored(place: Place, ids: list[object]) -> int:
    async with place.sessions() as session:
        return int(await session.scalar(select(func.count()).where(DecisionRow.id.in_(ids))) or 0)


async def test_an_item_that_finds_the_writer_idle_is_committed_on_the_loop(place: Place) -> None:
    ledger = inline_ledger(place)
    try:
        decision = place.decision()
        before = await ledger.counts(place.router_id)
        assert await ledger.write(LedgerWrite(decision=decision, count=(place.router_id, 1, 0))) == []
        assert await ledger.counts(place.router_id) == (before[0] + 1, before[1])
        assert (ledger.inline_served, ledger.inline_deferred) == (3, 0)  # two reads and the write
        assert await stored(place, [decision["id"]]) == 1
    finally:
        await ledger.close()


async def test_a_held_write_lock_sends_the_item_to_the_thread_without_blocking_the_loop(place: Place) -> None:
    ledger = inline_ledger(place)
    blocker = sqlite3.connect(sqlite_path(place.stack.database_url), isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        decision = place.decision()
        started = time.perf_counter()
        write = asyncio.ensure_future(
            ledger.write(LedgerWrite(decision=decision, count=(place.router_id, 1, 0)))
        )
        ticks = 0
        for _ in range(20):  # the loop keeps running while the write waits for the lock on the thread
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 20 and time.perf_counter() - started < 5
        assert not write.done()  # nothing is acknowledged before its commit
        assert ledger.inline_deferred == 1 and ledger.inline_served == 0
        blocker.execute("COMMIT")
        assert await write == []
        assert await stored(place, [decision["id"]]) == 1  # committed once, by the thread
        assert await place.counter() == 1
        assert ledger._inline is not None and not ledger._inline.in_transaction
        again = place.decision()
        await ledger.write(LedgerWrite(decision=again))  # the lock is free again: inline
        assert ledger.inline_served == 1
    finally:
        blocker.close()
        await ledger.close()


async def test_a_bad_inline_write_fails_alone_and_leaves_no_transaction_open(place: Place) -> None:
    ledger = inline_ledger(place)
    try:
        orphan = place.feedback("no-such-decision")  # breaks the foreign key to decisions
        with pytest.raises(LedgerError):
            await ledger.write(LedgerWrite(feedback=[orphan], count=(place.router_id, 1, 0)))
        assert ledger._inline is not None and not ledger._inline.in_transaction
        good = place.decision()
        await ledger.write(LedgerWrite(decision=good))
        assert await stored(place, [good["id"]]) == 1
        assert await place.counter() == 0  # the bad write's count was rolled back with it
    finally:
        await ledger.close()


async def test_while_the_process_serves_other_requests_the_thread_takes_the_item(place: Place) -> None:
    busy = [True]
    ledger = make_ledger(place.stack.database_url, 128, True, 100, busy=lambda: busy[0])
    assert isinstance(ledger, SqliteLedger)
    try:
        first = place.decision()
        await ledger.write(LedgerWrite(decision=first))
        assert (ledger.inline_served, ledger.inline_deferred) == (0, 0)  # not tried: handed to the thread
        busy[0] = False
        second = place.decision()
        await ledger.write(LedgerWrite(decision=second))
        assert ledger.inline_served == 1
        assert await stored(place, [first["id"], second["id"]]) == 2
    finally:
        await ledger.close()


def decisions_in_the_database_file(db: Path, tmp: Path) -> int:
    """Decisions in the main database file alone, the WAL left out: what checkpoints moved there."""
    copy = tmp / "copy.db"
    shutil.copyfile(db, copy)
    conn = sqlite3.connect(copy)
    try:
        return int(conn.execute("SELECT count(*) FROM decisions").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def own_db(tmp_path: Path) -> Path:
    """A database of its own: a checkpoint moves every test's WAL frames, not only its own."""
    db = tmp_path / "own.db"
    upgrade(f"sqlite+aiosqlite:///{db}")
    return db


async def test_checkpoints_every_n_inline_commits_move_the_wal_into_the_database(
    own_db: Path, tmp_path: Path
) -> None:
    db = own_db
    place = Place(Stack("sqlite", f"sqlite+aiosqlite:///{db}", None))
    await place.setup()
    await place.engine.dispose()
    never = inline_ledger(place, checkpoint_commits=100_000)
    keep = sqlite3.connect(db)  # open throughout: a database's last connection to close checkpoints it
    try:
        for _ in range(12):
            await never.write(LedgerWrite(decision=place.decision()))
        assert never.inline_served == 12
        # none of the 12 reached the database file: the inline connection made no checkpoint
        assert decisions_in_the_database_file(db, tmp_path) == 0
        await never.close()
        await checkpointed_twenty_and_thirty(place, db, tmp_path)
    finally:
        keep.close()


async def checkpointed_twenty_and_thirty(place: Place, db: Path, tmp_path: Path) -> None:
    ledger = inline_ledger(place, checkpoint_commits=10)
    try:
        for _ in range(35):
            await ledger.write(LedgerWrite(decision=place.decision()))
            if ledger._checkpoint is not None:  # at a slow pace: each checkpoint done before the next commit
                await asyncio.wrap_future(ledger._checkpoint)
        assert ledger.checkpoints == 3  # after inline commits 10, 20 and 30
        # the 12 of the first ledger and the first 30 of these: the WAL up to commit 30, the last 5 not
        assert decisions_in_the_database_file(db, tmp_path) == 12 + 30
    finally:
        await ledger.close()


async def test_a_gateway_with_inline_writes_answers_and_stores_decisions_and_feedback(
    sqlite_stack: Stack, fake: FakeBackends
) -> None:
    app = gateway_app(sqlite_stack, ledger_inline=True)
    async with running(app) as client:
        backend = await add_backend(client, fake, "plain")
        key = await add_tenant(client, [backend], policy="knn-ucb", hyperparameters={})
        body = {"model": "router", "messages": [{"role": "user", "content": PROMPT}]}
        answers = [
            await client.post("/v1/chat/completions", json=body, headers=bearer(key)) for _ in range(3)
        ]
        assert [a.status_code for a in answers] == [200, 200, 200]
        decision = answers[-1].headers["x-banditgate-decision-id"]
        accepted = await client.post(
            "/feedback", json={"decision_id": decision, "reward": 1.0}, headers=bearer(key)
        )
        assert accepted.status_code == 202, accepted.text
        again = await client.post(
            "/feedback", json={"decision_id": decision, "reward": 1.0}, headers=bearer(key)
        )
        assert again.status_code == 202 and again.json()["duplicate"] is True
        ledger = app.state.ctx.ledger
        assert isinstance(ledger, SqliteLedger) and ledger.inline_served >= 4
        async with app.state.ctx.sessionmaker() as session:
            ids = [a.headers["x-banditgate-decision-id"] for a in answers]
            assert await session.scalar(select(func.count()).where(DecisionRow.id.in_(ids))) == 3
