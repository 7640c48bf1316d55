"""A request's session is closed only when it holds something (``app.store.db.close_if_used``): whatever it
used goes back to the pool and nothing it left pending is written, on SQLite and on Postgres."""

from __future__ import annotations

import uuid

from sqlalchemy import select

from app.store.db import close_if_used, commit_if_used, make_engine, make_sessionmaker
from app.store.models import Tenant
from tests.conftest import Stack


async def test_a_session_is_closed_exactly_when_it_holds_something(stack: Stack) -> None:
    engine = make_engine(stack.database_url)
    sessions = make_sessionmaker(engine)
    name = f"sessions-{uuid.uuid4().hex[:8]}"
    try:
        async with sessions() as session:
            session.add(Tenant(name=name))
            await session.commit()

        untouched = sessions()
        assert await close_if_used(untouched) is False
        assert engine.pool.checkedout() == 0

        reading = sessions()  # a read begins a transaction: its connection is checked out until closed
        tenant = await reading.scalar(select(Tenant).where(Tenant.name == name))
        assert tenant is not None
        assert engine.pool.checkedout() == 1
        assert await close_if_used(reading) is True
        assert engine.pool.checkedout() == 0
        assert tenant not in reading

        committed = sessions()  # no transaction left open, but the loaded tenant is still held
        tenant = await committed.scalar(select(Tenant).where(Tenant.name == name))
        await committed.commit()
        assert not committed.in_transaction()
        assert await close_if_used(committed) is True
        assert tenant not in committed

        pending = sessions()  # an object added and never flushed: dropped, never written
        pending.add(Tenant(name=name + "-pending"))
        assert await close_if_used(pending) is True
        async with sessions() as check:
            found = await check.scalar(select(Tenant).where(Tenant.name == name + "-pending"))
            assert found is None
        assert engine.pool.checkedout() == 0
    finally:
        await engine.dispose()


async def test_a_session_is_committed_exactly_when_it_began_a_transaction_or_holds_changes(
    stack: Stack,
) -> None:
    """``commit_if_used``, the request path's end of its read transaction before a backend call."""
    engine = make_engine(stack.database_url)
    sessions = make_sessionmaker(engine)
    name = f"commits-{uuid.uuid4().hex[:8]}"
    try:
        untouched = sessions()
        assert await commit_if_used(untouched) is False
        await close_if_used(untouched)

        reading = sessions()  # the read's connection goes back to the pool at the commit
        assert await reading.scalar(select(Tenant).where(Tenant.name == name)) is None
        assert engine.pool.checkedout() == 1
        assert await commit_if_used(reading) is True
        assert engine.pool.checkedout() == 0 and not reading.in_transaction()
        assert await commit_if_used(reading) is False  # nothing began since
        await close_if_used(reading)

        adding = sessions()  # an added object, not flushed yet: written by the commit
        adding.add(Tenant(name=name))
        assert await commit_if_used(adding) is True
        await close_if_used(adding)
        async with sessions() as check:
            assert await check.scalar(select(Tenant).where(Tenant.name == name)) is not None
        assert engine.pool.checkedout() == 0
    finally:
        await engine.dispose()
