"""Fixtures: real Postgres and Redis (the services on this machine), the embedded SQLite default, and
apps driven in-process through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.settings import Settings
from app.store.migrate import upgrade
from tests.fake_backend import FakeBackends

PG_SERVER = os.environ.get("BANDITGATE_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
REDIS_URL = os.environ.get("BANDITGATE_TEST_REDIS", "redis://127.0.0.1:6379/0")
ADMIN_KEY = "test-admin-key"
TEST_STREAM = f"banditgate:test-events:{os.getpid()}-{uuid.uuid4().hex[:6]}"
SECRET_KEY = "test-secret-key-for-backend-keys"
# A small committed cut of the RouteLLM data (see its README): the suite reads nothing outside the clone.
TEST_DATA = Path(__file__).resolve().parent / "data"


async def _admin_sql(statement: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_SERVER + "/test")
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextmanager
def fresh_pg_database() -> Iterator[str]:
    """A new Postgres database migrated to head (its URL), dropped afterwards. Sync: for fixtures."""
    name = f"bg_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    asyncio.run(_admin_sql(f'CREATE DATABASE "{name}"'))
    url = PG_SERVER.replace("postgresql://", "postgresql+asyncpg://") + f"/{name}"
    try:
        upgrade(url)
        yield url
    finally:
        asyncio.run(_admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextmanager
def own_database(stack: str, tmp: Path) -> Iterator[Stack]:
    """A database of the test's own, migrated and empty (SQLite: under ``tmp``): for tests that create
    what the session's other tests must not see, or that need nothing there."""
    if stack == "sqlite":
        tmp.mkdir(parents=True, exist_ok=True)
        url = f"sqlite+aiosqlite:///{tmp / 'own.db'}"
        upgrade(url)
        yield Stack("sqlite", url, None)
        return
    with fresh_pg_database() as url:
        yield Stack("postgres", url, REDIS_URL)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh Postgres database for this test session, migrated to head, dropped afterwards."""
    with fresh_pg_database() as url:
        yield url


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('db') / 'banditgate.db'}"
    upgrade(url)
    return url


@dataclass
class Stack:
    """Where an app keeps its state: ``sqlite`` (embedded default) or ``postgres`` (+ Redis)."""

    name: str
    database_url: str
    redis_url: str | None

    def settings(self, **overrides: object) -> Settings:
        values: dict[str, object] = {
            "database_url": self.database_url,
            "redis_url": self.redis_url,
            "admin_key": ADMIN_KEY,
            "secret_key": SECRET_KEY,
            "embedder": "hashing",
            "stream_block_ms": 100,
            # Not the default stream: test sessions of other checkouts share this Redis, and their router
            # ids collide with ours (each session has its own database), so their events must not reach us.
            "event_stream": TEST_STREAM,
            # Likewise the rate limiter's Redis keys: every session's clients share the address 127.0.0.1.
            "rate_limit_prefix": f"{TEST_STREAM}:ratelimit",
            # One pytest process starts hundreds of apps: frozen, their objects would never be collected
            # (tests/integration/test_hot_path.py checks the freeze itself).
            "gc_freeze": False,
        }
        values.update(overrides)
        return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture(params=["sqlite", "postgres"])
def stack(request: pytest.FixtureRequest) -> Stack:
    if request.param == "sqlite":
        return Stack("sqlite", request.getfixturevalue("sqlite_url"), None)
    return Stack("postgres", request.getfixturevalue("pg_url"), REDIS_URL)


@pytest.fixture
def pg_stack(pg_url: str) -> Stack:
    return Stack("postgres", pg_url, REDIS_URL)


@pytest.fixture
def sqlite_stack(sqlite_url: str) -> Stack:
    return Stack("sqlite", sqlite_url, None)


@pytest.fixture
def fake() -> Iterator[FakeBackends]:
    """Local misbehaving-on-request OpenAI-compatible backends (tests/fake_backend.py)."""
    server = FakeBackends().start()
    yield server
    server.stop()


@asynccontextmanager
async def running(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan entered, and a client that talks to it in-process."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            yield client


def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@dataclass
class Tenancy:
    tenant: str
    key: str
    router: str
    arms: list[str]


async def make_tenancy(
    client: httpx.AsyncClient,
    policy: str = "linucb",
    hyperparameters: dict[str, object] | None = None,
    n_arms: int = 2,
    reward_range: tuple[float, float] = (0.0, 1.0),
) -> Tenancy:
    """A tenant with a key, ``n_arms`` backends and a default router over them, through the admin API."""
    tenant = unique("t")
    arms = [unique(f"m{i}") for i in range(n_arms)]
    assert (
        await client.post("/admin/tenants", json={"name": tenant}, headers=admin_headers())
    ).status_code == 201
    for i, arm in enumerate(arms):
        body = {"name": arm, "base_url": "http://127.0.0.1:9/v1", "usd_per_mtok_in": 1.0 + i}
        assert (await client.post("/admin/backends", json=body, headers=admin_headers())).status_code == 201
    key = (await client.post(f"/admin/tenants/{tenant}/keys", json={}, headers=admin_headers())).json()["key"]
    router = {
        "name": "main",
        "policy": policy,
        "hyperparameters": hyperparameters or {},
        "arms": arms,
        "reward_range": list(reward_range),
        "is_default": True,
    }
    response = await client.post(f"/admin/tenants/{tenant}/routers", json=router, headers=admin_headers())
    assert response.status_code == 201, response.text
    return Tenancy(tenant, key, "main", arms)


def error_text(response: httpx.Response) -> str:
    """The messages of an error answer: a 422's ``detail`` list (its ``msg``s joined), another
    status's ``detail`` string."""
    detail = response.json()["detail"]
    if isinstance(detail, list):
        return "; ".join(str(e["msg"]) for e in detail)
    return str(detail)
