"""A database that cannot be reached is a 503 with ``Retry-After`` on every endpoint that needs it, in
the error shape of its path, and the gateway serves again within seconds of its return. Each test
closes a private Postgres database of its own (tests/pg_outage.py), never the shared server."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import text

from app.main import create_app
from app.store.availability import DatabaseUnavailable, ReconnectBackoff, unreachable
from app.store.db import close_if_used, make_engine, make_sessionmaker
from tests.conftest import REDIS_URL, Stack, admin_headers, bearer, fresh_pg_database, running, unique
from tests.fake_backend import FakeBackends
from tests.integration.test_forwarding import add_backend, add_tenant
from tests.pg_outage import close_database, open_database, terminate_sessions

RETRY_AFTER_S = 3
RECOVERY_S = 5.0


@pytest.fixture
def private_pg() -> Iterator[Stack]:
    with fresh_pg_database() as url:
        yield Stack("postgres", url, REDIS_URL)


def assert_unavailable(response: httpx.Response, path: str) -> None:
    assert response.status_code == 503, (path, response.status_code, response.text)
    assert response.headers["retry-after"] == str(RETRY_AFTER_S), path
    assert "x-banditgate-declined" not in response.headers, path
    body = response.json()
    if path.startswith("/v1/"):
        assert body["error"]["code"] == "database_unavailable", body
        assert body["error"]["type"] == "server_error", body
    else:
        assert body == {"detail": f"the database is unavailable; retry after {RETRY_AFTER_S} s"}, body


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "fastapi"])
async def test_a_closed_database_is_a_503_everywhere_and_service_resumes_within_seconds(
    private_pg: Stack, fake: FakeBackends, lean: bool
) -> None:
    settings = private_pg.settings(
        lean_routes=lean, db_retry_after_s=RETRY_AFTER_S, forward_max_retries=0, catalog_ttl_s=60
    )
    app = create_app(settings)
    async with running(app) as client:
        arm = await add_backend(client, fake, "ok")
        key = await add_tenant(client, [arm])
        tenant_id = (await client.get("/admin/tenants", headers=admin_headers())).json()[0]["name"]
        decided = await client.post("/route", json={"prompt": "warm"}, headers=bearer(key))
        assert decided.status_code == 200, decided.text
        decision_id = decided.json()["decision_id"]
        calls: list[tuple[str, str, dict[str, object] | None, dict[str, str]]] = [
            ("POST", "/route", {"prompt": "hello"}, bearer(key)),
            ("POST", "/feedback", {"decision_id": decision_id, "reward": 1.0}, bearer(key)),
            (
                "POST",
                "/feedback/batch",
                {"events": [{"decision_id": decision_id, "reward": 0.5}]},
                bearer(key),
            ),
            (
                "POST",
                "/v1/chat/completions",
                {"model": "router", "messages": [{"role": "user", "content": "hi"}]},
                bearer(key),
            ),
            ("GET", "/admin/tenants", None, admin_headers()),
            ("POST", "/admin/tenants", {"name": unique("t")}, admin_headers()),
            ("GET", f"/admin/tenants/{tenant_id}/routers", None, admin_headers()),
        ]
        await close_database(private_pg.database_url)
        try:
            for cached in (True, False):  # a key and router held by the catalog, then read afresh
                if not cached:
                    app.state.ctx.catalog.clear()
                for method, path, body, headers in calls:
                    response = await client.request(method, path, json=body, headers=headers)
                    assert_unavailable(response, path)
            ready = await client.get("/readyz")
            assert ready.status_code == 503
        finally:
            await open_database(private_pg.database_url)
        reopened = time.monotonic()
        while True:
            response = await client.post("/route", json={"prompt": "back"}, headers=bearer(key))
            if response.status_code == 200:
                break
            assert_unavailable(response, "/route")
            assert time.monotonic() - reopened < RECOVERY_S, "no recovery within 5 s"
            await asyncio.sleep(0.05)
        print(f"first 200 after the database reopened: {time.monotonic() - reopened:.3f} s")
        for method, path, body, headers in calls:
            if path == "/admin/tenants" and method == "POST":
                body = {"name": unique("t")}
            response = await client.request(method, path, json=body, headers=headers)
            assert response.status_code < 300, (path, response.status_code, response.text)


async def test_an_exact_policys_decision_is_a_503_while_closed_and_resumes(
    private_pg: Stack, fake: FakeBackends
) -> None:
    """BALROG's decisions (``counter_use == "exact"``) take the ledger's counted-decision connection:
    closed under it, ``/route`` and a forwarded chat completion are 503s, and both serve again within
    seconds of the database's return."""
    settings = private_pg.settings(db_retry_after_s=RETRY_AFTER_S, forward_max_retries=0, catalog_ttl_s=60)
    async with running(create_app(settings)) as client:
        arm = await add_backend(client, fake, "ok")
        key = await add_tenant(client, [arm], policy="balrog", hyperparameters={})
        calls = [
            ("/route", {"prompt": "hello"}),
            ("/v1/chat/completions", {"model": "router", "messages": [{"role": "user", "content": "hi"}]}),
        ]
        for path, body in calls:  # the counted connection is open
            response = await client.post(path, json=body, headers=bearer(key))
            assert response.status_code == 200, response.text
        await close_database(private_pg.database_url)
        try:
            for path, body in calls:
                assert_unavailable(await client.post(path, json=body, headers=bearer(key)), path)
        finally:
            await open_database(private_pg.database_url)
        reopened = time.monotonic()
        while (
            response := await client.post("/route", json={"prompt": "back"}, headers=bearer(key))
        ).status_code != 200:
            assert_unavailable(response, "/route")
            assert time.monotonic() - reopened < RECOVERY_S, "no recovery within 5 s"
            await asyncio.sleep(0.05)
        for path, body in calls:
            response = await client.post(path, json=body, headers=bearer(key))
            assert response.status_code == 200, response.text


async def test_a_503_database_unavailable_is_in_the_contract(private_pg: Stack) -> None:
    async with running(create_app(private_pg.settings())) as client:
        spec = (await client.get("/openapi.json")).json()
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            if not operation.get("security"):
                continue
            documented = operation["responses"].get("503")
            assert documented is not None, (method, path)
            assert "database_unavailable" in documented["description"], (method, path)
            assert "Retry-After" in documented.get("headers", {}), (method, path)


def test_a_driver_error_is_told_apart_from_a_refused_statement() -> None:
    assert unreachable(ConnectionRefusedError(111, "refused"))
    assert unreachable(sqlite3.OperationalError("unable to open database file"))
    assert not unreachable(sqlite3.OperationalError("no such table: x"))
    assert not unreachable(sqlite3.IntegrityError("UNIQUE constraint failed"))
    assert not unreachable(ValueError("x"))


def test_the_reconnect_backoff_lets_one_attempt_through_per_jittered_doubling_wait() -> None:
    now = [100.0]
    backoff = ReconnectBackoff(0.1, 0.4, clock=lambda: now[0])
    backoff.check()  # no failure yet: every connect goes through
    backoff.check()
    waits = []
    for _ in range(5):
        backoff.failed()
        wait = backoff.next_attempt - now[0]
        waits.append(wait)
        with pytest.raises(DatabaseUnavailable):
            backoff.check()
        now[0] += wait
        backoff.check()  # this caller probes...
        with pytest.raises(DatabaseUnavailable):
            backoff.check()  # ...and the next one waits for it
    full = [0.1, 0.2, 0.4, 0.4, 0.4]
    assert all(f / 2 <= w <= f for w, f in zip(waits, full, strict=True)), waits
    backoff.succeeded()
    backoff.check()
    backoff.check()


async def test_a_session_whose_connection_dropped_closes_quietly(private_pg: Stack) -> None:
    """A request's session is closed after its response: a connection the database dropped meanwhile
    must not turn that close into an error logged as unhandled."""
    engine = make_engine(private_pg.database_url)
    session = make_sessionmaker(engine)()
    await session.execute(text("SELECT 1"))  # a transaction open on a pooled connection
    await terminate_sessions(private_pg.database_url)
    assert await close_if_used(session)
    async with make_sessionmaker(engine)() as fresh:
        assert await fresh.scalar(text("SELECT 1")) == 1
    await engine.dispose()
