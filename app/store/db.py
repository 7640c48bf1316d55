"""Engine and session factory. SQLite gets WAL mode, a busy timeout and foreign keys on.

The Postgres pool is bounded (``db_pool_size`` connections kept, ``db_max_overflow`` more under load,
``db_pool_timeout_s`` to wait for one), its connects time out after ``db_connect_timeout_s`` and are
spread by a ``ReconnectBackoff`` after a failure. A connect that fails, a pool with no connection free in
time, and a connection dropped under a statement raise ``DatabaseUnavailable`` (app/store/availability.py:
the request's 503), so no driver's exception leaves the store for them.

Pooled connections are not pinged on checkout (a round trip per request); they are replaced after
``db_pool_recycle_s``, and a statement that finds its connection dropped (the server restarted, a
connection killed) is retried once on a fresh one when it was the first of its transaction, so nothing
of the transaction was lost with the connection (``RetryingSession``). SQLAlchemy invalidates the
pool's older connections on such an error, so one retry is enough. A commit with no transaction open
is a no-op.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import event, make_url, text
from sqlalchemy.engine import Dialect, ExceptionContext
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry

from app.settings import SettingsView
from app.store.availability import (
    Contended,
    DatabaseUnavailable,
    ReconnectBackoff,
    contended,
    unreachable,
)
from app.store.driver_sql import lock_router_pg
from app.store.ledger import Ledger
from app.store.ledger_postgres import PostgresLedger
from app.store.ledger_sqlite import SqliteLedger
from app.store.recent_decisions import RecentDecisions
from app.store.sqlite_settings import BUSY_TIMEOUT_S, apply_pragmas, sqlite_path

log = logging.getLogger(__name__)

Done = TypeVar("Done")
# an admin change is rare and may wait: more tries than a request's write, each after a longer wait
ADMIN_CONTENDED_TRIES = 6
CONTENDED_WAIT_S = 0.05


@dataclass(frozen=True)
class DbPool(SettingsView):
    """The engine's pool and connect settings (app/settings.py)."""

    db_pool_size: int
    db_max_overflow: int
    db_pool_timeout_s: float
    db_connect_timeout_s: float
    db_pool_recycle_s: float
    db_reconnect_backoff_s: float
    db_reconnect_backoff_max_s: float


def is_sqlite(url: str) -> bool:
    """Whether ``url`` names the embedded SQLite database (else Postgres)."""
    return url.startswith("sqlite")


class BoundedPool(AsyncAdaptedQueuePool):
    """SQLAlchemy's async queue pool, whose wait for a free connection ends in ``DatabaseUnavailable``."""

    def _do_get(self) -> ConnectionPoolEntry:
        try:
            return super()._do_get()
        except PoolTimeout as exc:
            raise DatabaseUnavailable(f"no pooled database connection free in time: {exc}") from exc


# SQLAlchemy keeps its own pool loggers at WARNING; this subclass logs under its own name, as quietly
logging.getLogger(f"{BoundedPool.__module__}.{BoundedPool.__name__}").setLevel(logging.WARNING)


def make_engine(url: str, pool: DbPool | None = None) -> AsyncEngine:
    """The engine of ``url``: ``pool``'s bounds and timeouts (the settings' defaults when None)."""
    pool = pool or DbPool.of()
    kwargs: dict[str, Any]
    if is_sqlite(url):
        kwargs = {"connect_args": {"timeout": BUSY_TIMEOUT_S}}
    else:
        kwargs = {
            "poolclass": BoundedPool,
            "pool_size": pool.db_pool_size,
            "max_overflow": pool.db_max_overflow,
            "pool_timeout": pool.db_pool_timeout_s,
            "pool_recycle": pool.db_pool_recycle_s,
            "connect_args": {"timeout": pool.db_connect_timeout_s},
        }
    engine = create_async_engine(url, **kwargs)
    backoff = ReconnectBackoff(pool.db_reconnect_backoff_s, pool.db_reconnect_backoff_max_s)

    @event.listens_for(engine.sync_engine, "do_connect")
    def _connect(dialect: Dialect, _: Any, cargs: Any, cparams: Any) -> Any:
        backoff.check()
        try:
            connection = dialect.connect(*cargs, **cparams)
        except Exception as exc:
            backoff.failed()
            raise DatabaseUnavailable(f"the database could not be reached: {exc!r}") from exc
        backoff.succeeded()
        return connection

    @event.listens_for(engine.sync_engine, "handle_error")
    def _store_error(context: ExceptionContext) -> BaseException | None:
        """A transaction aborted for a conflict as ``Contended``, a dropped connection as
        ``DatabaseUnavailable``; any other error as the driver raised it."""
        if context.is_pre_ping or context.connection is None:
            return None
        if contended(context.original_exception):
            return Contended(f"the database aborted the transaction: {context.original_exception}")
        if not (context.is_disconnect or unreachable(context.original_exception)):
            return None
        context.is_disconnect = True  # discarded, never returned to the pool
        return DatabaseUnavailable(
            f"the database connection dropped: {context.original_exception!r}", dropped=True
        )

    if is_sqlite(url):

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _: Any) -> None:
            apply_pragmas(dbapi_conn)

    return engine


def dropped_connection(exc: BaseException) -> bool:
    """Whether ``exc`` is a connection that broke under a statement (discarded by the engine)."""
    if isinstance(exc, DatabaseUnavailable):
        return exc.dropped
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


async def close_if_used(session: AsyncSession) -> bool:
    """Close ``session`` as ``async with`` closes it (rolling back an open transaction, returning its
    connection, dropping its objects; to completion even if the caller is cancelled meanwhile) unless it
    never began a transaction and holds no object. Such a session holds nothing to release, and closing
    it anyway is a greenlet hand-off: 0.09-0.12 ms of a forwarded request's CPU on the development
    machine, where the hot path reads only through the catalog's caches. Returns whether it
    closed."""
    sync = session.sync_session
    if not session.in_transaction() and not sync.identity_map and not sync.new and not sync.deleted:
        return False
    try:
        async with session:
            pass
    except DatabaseUnavailable:  # its connection dropped: discarded, with nothing left to roll back
        log.debug("a session's connection dropped before its close", exc_info=True)
    return True


async def commit_if_used(session: AsyncSession) -> bool:
    """Commit ``session`` unless it never began a transaction and holds no change: the request path
    ends its read transaction before a backend call (no pooled connection held during it), and on a
    session it never used that commit is a transaction begun and ended for nothing, about 0.03 ms of
    CPU. Returns whether it committed."""
    sync = session.sync_session
    if not session.in_transaction() and not sync.new and not sync.deleted and not sync.dirty:
        return False
    await session.commit()
    return True


class RetryingSession(AsyncSession):
    """An ``AsyncSession`` whose first statement of a transaction is retried once on a fresh connection
    when the pooled one turns out to be dropped. Later statements are not retried: the transaction they
    belonged to is gone, and the error reaches the caller."""

    async def _first_retried(self, call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        fresh = not self.in_transaction()
        try:
            return await call(*args, **kwargs)
        except (DBAPIError, DatabaseUnavailable) as exc:
            if not (fresh and dropped_connection(exc)):
                raise
            await self.rollback()
            return await call(*args, **kwargs)

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        return await self._first_retried(super().execute, *args, **kwargs)

    async def scalar(self, *args: Any, **kwargs: Any) -> Any:
        return await self._first_retried(super().scalar, *args, **kwargs)

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        return await self._first_retried(super().get, *args, **kwargs)

    async def commit(self) -> None:
        """Commit the transaction, if one is open. The request path ends its read transaction before
        each upstream call; when every read was served from the catalog's cache there is none, and
        SQLAlchemy would begin one only to commit it (a greenlet hand-off for nothing)."""
        if self.in_transaction():
            await super().commit()


async def transaction(session: AsyncSession, work: Callable[[], Awaitable[Done]]) -> Done:
    """``work`` (its reads and writes on ``session``) and the commit, sent again from the start when the
    database aborts it for a conflict (``Contended``: a deadlock with the request path's writes, say,
    while a router's deletion cascades through them), at most ``ADMIN_CONTENDED_TRIES`` times in all,
    after a jittered wait that grows with each try (the writes it met get to finish first). ``work``
    must read what it changes itself: after a rollback, objects loaded before are stale."""
    for attempt in range(1, ADMIN_CONTENDED_TRIES + 1):
        try:
            done = await work()
            await session.commit()
            return done
        except Contended:
            await session.rollback()
            if attempt == ADMIN_CONTENDED_TRIES:
                raise
            log.info("a transaction was aborted for a conflict (try %d); sending it again", attempt)
            await asyncio.sleep(random.uniform(0, CONTENDED_WAIT_S * attempt))
    raise AssertionError("unreachable")


async def lock_routers(session: AsyncSession, router_ids: Sequence[int]) -> None:
    """On Postgres, lock the routers exclusively (in id order) until the transaction ends, after the
    request path's writes that hold them (app/store/driver_sql.router_locks_pg): a deletion's cascade
    then meets none of them half done."""
    if session.get_bind().dialect.name != "postgresql":
        return
    for router_id in sorted(router_ids):
        await session.execute(text(lock_router_pg()), {"router_id": router_id})


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, class_=RetryingSession, expire_on_commit=False)


def make_ledger(
    url: str,
    max_batch: int,
    sqlite_inline: bool = False,
    inline_checkpoint_commits: int = 100,
    busy: Callable[[], bool] | None = None,
    recent_decisions: int = 0,
    pool: DbPool | None = None,
) -> Ledger:
    """The request path's group-committed writer (app/store/ledger.py) for the engine's database;
    on SQLite, ``sqlite_inline`` serves an item that finds the writer idle on the event loop, unless
    ``busy()`` says the process serves other requests too (app/store/ledger_sqlite.py). With
    ``recent_decisions``, it keeps that many of the decisions it commits in memory
    (app/store/recent_decisions.py). On Postgres its own connection's connect timeout and backoff are
    ``pool``'s."""
    ledger: Ledger
    if is_sqlite(url):
        ledger = SqliteLedger(
            sqlite_path(url),
            max_batch,
            inline=sqlite_inline,
            inline_checkpoint_commits=inline_checkpoint_commits,
            busy=busy,
        )
    else:
        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        pool = pool or DbPool.of()
        backoff = ReconnectBackoff(pool.db_reconnect_backoff_s, pool.db_reconnect_backoff_max_s)
        ledger = PostgresLedger(dsn, max_batch, pool.db_connect_timeout_s, backoff)
    if recent_decisions > 0:
        ledger.recent = RecentDecisions(recent_decisions, ledger.dialect)
    return ledger
