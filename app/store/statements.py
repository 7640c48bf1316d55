"""The request path's write statements, built once per table and dialect.

``insert(Entity).values(**row)`` builds a new statement for every row: SQLAlchemy coerces each value
into a bound parameter, walks them all for the compiled-statement cache key and runs the ORM's bulk
bookkeeping, about a hundred coercions per forwarded request (issue 13's profile). A statement on the
``Table`` with no values, given the row as execution parameters, is the same SQL, compiled once and
taken from the cache after that; the rows go to the driver as they are.

Rows are keyed by the mapped attribute names the rest of the app uses (``DecisionRow.request_metadata``
is the column ``metadata``); ``column_row`` renames them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Insert, Table, bindparam, insert, inspect
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.store.models import Base, FeedbackEvent, RouterCounter


def dialect_of(session: AsyncSession) -> str:
    """``postgresql`` or ``sqlite`` (the session's engine)."""
    return session.bind.dialect.name if session.bind is not None else "postgresql"


@cache
def _column_keys(model: type[Base]) -> dict[str, str]:
    return {attr.key: attr.columns[0].key for attr in inspect(model).column_attrs}


def column_row(model: type[Base], row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` (mapped attribute names) keyed by the table's column keys."""
    keys = _column_keys(model)
    return {keys[name]: value for name, value in row.items()}


def _table(model: type[Base]) -> Table:
    table = model.__table__
    assert isinstance(table, Table)
    return table


@cache
def _plain_insert(model: type[Base]) -> Insert:
    return insert(_table(model))


async def insert_rows(session: AsyncSession, model: type[Base], rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT ``rows`` (mapped attribute names; one statement, the rows as its parameters); not
    committed. Every row must name the same attributes."""
    if rows:
        await session.execute(_plain_insert(model), [column_row(model, row) for row in rows])


@cache
def _insert_feedback(dialect: str) -> Any:
    upsert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return (
        upsert(_table(FeedbackEvent))
        .on_conflict_do_nothing(index_elements=["decision_id", "model", "kind"])
        .returning(_table(FeedbackEvent).c.id)
    )


async def insert_feedback(session: AsyncSession, row: Mapping[str, Any]) -> int | None:
    """INSERT a feedback event unless one with its (decision, model, kind) exists; its new id, or None
    for a duplicate. Not committed."""
    inserted = await session.scalar(_insert_feedback(dialect_of(session)), column_row(FeedbackEvent, row))
    return None if inserted is None else int(inserted)


@cache
def _count_written(dialect: str) -> Any:
    upsert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    counters = _table(RouterCounter)
    return (
        upsert(counters)
        .values(
            router_id=bindparam("router_id"),
            decisions=1,
            query_rounds=bindparam("query_rounds"),
        )
        .on_conflict_do_update(
            index_elements=["router_id"],
            set_={
                "decisions": counters.c.decisions + 1,
                "query_rounds": counters.c.query_rounds + bindparam("query_rounds"),
            },
        )
    )


async def count_written(session: AsyncSession, router_id: int, queried: bool) -> None:
    """Count one written decision of the router (and a query round when it queried); not committed."""
    await session.execute(
        _count_written(dialect_of(session)), {"router_id": router_id, "query_rounds": 1 if queried else 0}
    )
