"""X-Forwarded-For is honoured from ``BANDITGATE_TRUSTED_PROXIES`` only: under the server options of
``banditgate serve`` a client on loopback that rotates the header does not escape the failed-auth
lockout, while a trusted proxy's header names each client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from app.cli import proxy_warning, server_limits
from app.main import create_app
from app.settings import Settings
from bench.local_server import serving
from tests.conftest import Stack

FAILURES = 5


@asynccontextmanager
async def serve_like_the_cli(settings: Settings) -> AsyncIterator[str]:
    """The app under uvicorn on 127.0.0.1 with the options ``banditgate serve`` passes."""
    async with serving(create_app(settings), **server_limits(settings)) as url:
        yield url


async def statuses_with_rotating_header(url: str, count: int) -> list[int]:
    async with httpx.AsyncClient(base_url=url) as client:
        out = []
        for i in range(count):
            headers = {
                "Authorization": f"Bearer wrong-{i}",
                "X-Forwarded-For": f"10.9.{i // 250}.{i % 250 + 1}",
            }
            out.append((await client.post("/route", json={"prompt": "x"}, headers=headers)).status_code)
        return out


async def test_a_rotating_forwarded_for_does_not_escape_the_lockout(sqlite_stack: Stack) -> None:
    settings = sqlite_stack.settings(auth_failure_limit=FAILURES)
    async with serve_like_the_cli(settings) as url:
        statuses = await statuses_with_rotating_header(url, FAILURES + 3)
    assert statuses == [401] * FAILURES + [429] * 3


async def test_a_trusted_proxys_forwarded_for_names_each_client(sqlite_stack: Stack) -> None:
    settings = sqlite_stack.settings(auth_failure_limit=FAILURES, trusted_proxies="127.0.0.0/8, ::1")
    async with serve_like_the_cli(settings) as url:
        statuses = await statuses_with_rotating_header(url, FAILURES + 3)
        assert statuses == [401] * (FAILURES + 3)  # each forwarded address is a client of its own
        async with httpx.AsyncClient(base_url=url) as client:
            one = {"Authorization": "Bearer wrong", "X-Forwarded-For": "10.8.0.1"}
            same = [
                (await client.post("/route", json={}, headers=one)).status_code for _ in range(FAILURES + 1)
            ]
    assert same == [401] * FAILURES + [429]


def test_trusted_proxies_must_be_addresses_or_networks() -> None:
    with pytest.raises(ValueError, match=r"10\.0\.0\.300"):
        Settings(trusted_proxies="127.0.0.1, 10.0.0.300")
    assert Settings(trusted_proxies="10.0.0.0/8,::1").trusted_proxies == "10.0.0.0/8,::1"


def test_serve_warns_on_loopback_with_no_trusted_proxy() -> None:
    assert "BANDITGATE_TRUSTED_PROXIES" in (proxy_warning("127.0.0.1", Settings()) or "")
    assert proxy_warning("0.0.0.0", Settings()) is None
    assert proxy_warning("127.0.0.1", Settings(trusted_proxies="127.0.0.1")) is None
