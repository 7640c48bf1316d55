"""app/api/in_flight.py: the count of HTTP requests a process serves rises with each one in flight and
falls when its response is sent or it fails."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI

from app.api.in_flight import CountInFlight, RequestsInFlight
from app.main import create_app
from app.settings import Settings

pytestmark = pytest.mark.asyncio


async def test_the_count_follows_the_requests_in_flight_and_falls_after_a_failure() -> None:
    in_flight = RequestsInFlight()
    release = asyncio.Event()
    seen: list[int] = []
    app = FastAPI()

    @app.get("/wait")
    async def wait() -> dict[str, int]:
        seen.append(in_flight.count)
        await release.wait()
        return {"ok": 1}

    @app.get("/fail")
    async def fail() -> None:
        seen.append(in_flight.count)
        raise RuntimeError("boom")

    app.add_middleware(CountInFlight, in_flight=in_flight)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        first = asyncio.ensure_future(client.get("/wait"))
        second = asyncio.ensure_future(client.get("/wait"))
        while len(seen) < 2:
            await asyncio.sleep(0.01)
        assert in_flight.count == 2 and in_flight.more_than_one()
        release.set()
        assert [(await first).status_code, (await second).status_code] == [200, 200]
        assert in_flight.count == 0 and not in_flight.more_than_one()
        assert (await client.get("/fail")).status_code == 500
        assert seen[2] == 1  # itself only
        assert in_flight.count == 0


@pytest.mark.parametrize(
    ("database_url", "ledger_inline", "counted"),
    [
        ("sqlite+aiosqlite:///unused.db", True, True),
        ("sqlite+aiosqlite:///unused.db", False, False),
        ("postgresql+asyncpg://postgres@127.0.0.1:5432/unused", True, False),
    ],
)
async def test_only_an_app_whose_sqlite_ledger_goes_inline_counts_requests(
    database_url: str, ledger_inline: bool, counted: bool
) -> None:
    """The count is the inline path's gate and nothing else's: no other app pays for it per request."""
    app = create_app(Settings(database_url=database_url, ledger_inline=ledger_inline, embedder="hashing"))
    assert any(m.cls is CountInFlight for m in app.user_middleware) is counted
