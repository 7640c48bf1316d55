"""The Postgres pool is bounded by its settings: they reach the engine, and a burst of sessions never
opens more connections than ``db_pool_size + db_max_overflow``; a wait for a free connection longer than
``db_pool_timeout_s`` is ``DatabaseUnavailable`` (a 503), not a driver's timeout (a 500)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy import make_url, text

from app.main import create_app
from app.settings import Settings
from app.store.availability import DatabaseUnavailable
from app.store.db import DbPool, make_engine, make_sessionmaker
from tests.conftest import PG_SERVER, Stack, running


async def connections_to(database: str) -> int:
    conn = await asyncpg.connect(PG_SERVER + "/test")
    try:
        found = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", database
        )
        return int(found)
    finally:
        await conn.close()


async def test_the_pool_settings_reach_the_engine(pg_stack: Stack) -> None:
    settings = pg_stack.settings(
        db_pool_size=3, db_max_overflow=2, db_pool_timeout_s=1.5, db_connect_timeout_s=2
    )
    async with running(create_app(settings)) as client:
        assert (await client.get("/healthz")).status_code == 200
        pool = client._transport.app.state.ctx.engine.pool  # type: ignore[attr-defined]
        assert (pool.size(), pool._max_overflow, pool._timeout) == (3, 2, 1.5)
    defaults = Settings()
    assert (defaults.db_pool_size, defaults.db_max_overflow) == (5, 5)


async def test_a_burst_never_exceeds_pool_plus_overflow(pg_url: str) -> None:
    database = make_url(pg_url).database
    assert database is not None
    pool = DbPool.of(Settings(db_pool_size=2, db_max_overflow=1, db_pool_timeout_s=10))
    engine = make_engine(pg_url, pool)
    sessionmaker = make_sessionmaker(engine)
    before = await connections_to(database)
    peak = 0

    async def one() -> None:
        async with sessionmaker() as session:
            await session.execute(text("SELECT pg_sleep(0.1)"))

    async def watch(done: asyncio.Event) -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, await connections_to(database) - before)
            await asyncio.sleep(0.02)

    done = asyncio.Event()
    watcher = asyncio.create_task(watch(done))
    try:
        await asyncio.gather(*(one() for _ in range(20)))  # 20 at once: queued behind 3 connections
    finally:
        done.set()
        await watcher
    assert 1 <= peak <= 3, peak
    assert engine.pool.checkedout() == 0

    short = make_sessionmaker(
        make_engine(pg_url, DbPool.of(Settings(db_pool_size=1, db_max_overflow=0, db_pool_timeout_s=0.2)))
    )

    async def held() -> None:
        async with short() as session:
            await session.execute(text("SELECT pg_sleep(0.5)"))

    outcomes = await asyncio.gather(*(held() for _ in range(3)), return_exceptions=True)
    assert sum(isinstance(o, DatabaseUnavailable) for o in outcomes) == 2, outcomes
    await short.kw["bind"].dispose()
    await engine.dispose()


@pytest.mark.parametrize("size", [0, 1_001])
def test_a_pool_size_out_of_bounds_is_refused(size: int) -> None:
    with pytest.raises(ValueError):
        Settings(db_pool_size=size)
