"""Session-side INSERTs built once per table (the request path's other writes go through the ledger,
app/store/ledger.py, as the driver's SQL: app/store/driver_sql.py).

``insert(Entity).values(**row)`` builds a new statement for every row: SQLAlchemy coerces each value
into a bound parameter, walks them all for the compiled-statement cache key and runs the ORM's bulk
bookkeeping, about a hundred coercions per forwarded request (profiled). A statement on the
``Table`` with no values, given the row as execution parameters, is the same SQL, compiled once and
taken from the cache after that; the rows go to the driver as they are.

Rows are keyed by the mapped attribute names the rest of the app uses (``DecisionRow.request_metadata``
is the column ``metadata``); ``column_row`` renames them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Insert, Table, insert, inspect
from sqlalchemy.ext.asyncio import AsyncSession

from app.store.models import Base


@cache
def _column_keys(model: type[Base]) -> dict[str, str]:
    return {attr.key: attr.columns[0].key for attr in inspect(model).column_attrs}


def column_row(model: type[Base], row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` (mapped attribute names) keyed by the table's column keys."""
    keys = _column_keys(model)
    return {keys[name]: value for name, value in row.items()}


def table_of(model: type[Base]) -> Table:
    """The model's ``Table``."""
    table = model.__table__
    assert isinstance(table, Table)
    return table


@cache
def _plain_insert(model: type[Base]) -> Insert:
    return insert(table_of(model))


async def insert_rows(session: AsyncSession, model: type[Base], rows: Sequence[Mapping[str, Any]]) -> None:
    """INSERT ``rows`` (mapped attribute names; one statement, the rows as its parameters); not
    committed. Every row must name the same attributes."""
    if rows:
        await session.execute(_plain_insert(model), [column_row(model, row) for row in rows])
