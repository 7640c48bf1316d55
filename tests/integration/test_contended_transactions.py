"""A transaction Postgres aborts to break a deadlock is the store's ``Contended``, and
``app.store.db.transaction`` sends the work again from the start (the admin API's deletes run in it)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import select, text, update

from app.main import create_app
from app.store.availability import Contended
from app.store.db import make_engine, make_sessionmaker, transaction
from app.store.models import Tenant
from tests.conftest import Stack, admin_headers, running


async def test_a_deadlocked_transaction_is_contended_and_sent_again(pg_stack: Stack) -> None:
    engine = make_engine(pg_stack.database_url)
    sessions = make_sessionmaker(engine)
    names = [f"dl-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    try:
        async with sessions() as setup:
            tenants = [Tenant(name=name) for name in names]
            setup.add_all(tenants)
            await setup.commit()
            first, second = (t.id for t in tenants)

        def rename(tenant_id: int, name: str) -> object:
            return update(Tenant).where(Tenant.id == tenant_id).values(name=name)

        attempts: list[int] = []
        other_holds_first, work_holds_second = asyncio.Event(), asyncio.Event()
        async with sessions() as session, sessions() as other:
            await other.execute(text("SET deadlock_timeout = '60s'"))  # the work is the one aborted

            async def work() -> int:
                attempts.append(len(attempts) + 1)
                await session.execute(rename(second, f"{names[1]}-w{len(attempts)}"))
                work_holds_second.set()
                await other_holds_first.wait()
                await session.execute(rename(first, f"{names[0]}-w{len(attempts)}"))  # waits on other
                return len(attempts)

            async def interfere() -> None:
                await other.execute(rename(first, f"{names[0]}-o"))
                other_holds_first.set()
                await work_holds_second.wait()
                await asyncio.sleep(0.1)  # the work's second update is waiting on this session now
                await other.execute(rename(second, f"{names[1]}-o"))  # deadlock: the work is aborted
                await other.rollback()

            done, _ = await asyncio.gather(transaction(session, work), interfere())
        assert done == 2 and attempts == [1, 2]
        async with sessions() as check:
            stored = await check.scalars(select(Tenant.name).where(Tenant.id.in_([first, second])))
            assert sorted(stored) == sorted([f"{names[0]}-w2", f"{names[1]}-w2"])

        # a conflict that outlasts every try reaches the caller as Contended, nothing committed
        async def always_contended() -> None:
            raise Contended("aborted")

        async with sessions() as session:
            with pytest.raises(Contended):
                await transaction(session, always_contended)
    finally:
        await engine.dispose()


async def test_a_contended_request_is_a_503_that_says_retry(sqlite_stack: Stack) -> None:
    app = create_app(sqlite_stack.settings())

    async def contended() -> None:
        raise Contended("deadlock detected")

    app.add_api_route("/admin/contended", contended, methods=["POST"])
    app.add_api_route("/v1/contended", contended, methods=["POST"])
    async with running(app) as client:
        plain = await client.post("/admin/contended", headers=admin_headers())
        assert plain.status_code == 503 and plain.headers["retry-after"] == "1"
        assert "nothing was written; retry" in plain.json()["detail"]
        openai = await client.post("/v1/contended", headers=admin_headers())
        assert openai.status_code == 503 and openai.json()["error"]["code"] == "database_conflict"
