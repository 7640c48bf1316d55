"""A private Postgres database taken away from its clients and given back, the server left alone: closed
to new connections (``ALLOW_CONNECTIONS false``) with its sessions terminated, then reopened."""

from __future__ import annotations

from sqlalchemy import make_url

from tests.conftest import _admin_sql


def database_name(url: str) -> str:
    name = make_url(url).database
    assert name and name.startswith("bg_test_"), f"only a private test database may be closed: {name!r}"
    return name


async def terminate_sessions(url: str) -> None:
    """Terminate every session of the database (its pooled connections break under their next use)."""
    name = database_name(url)
    await _admin_sql(
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}' "
        "AND pid <> pg_backend_pid()"
    )


async def close_database(url: str) -> None:
    """Refuse new connections to the database and terminate the open ones."""
    await _admin_sql(f'ALTER DATABASE "{database_name(url)}" ALLOW_CONNECTIONS false')
    await terminate_sessions(url)


async def open_database(url: str) -> None:
    await _admin_sql(f'ALTER DATABASE "{database_name(url)}" ALLOW_CONNECTIONS true')
