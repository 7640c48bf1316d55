"""Rows and INSERTs on SQLAlchemy's side: rows are keyed by the mapped attribute names the rest of the
app uses (``DecisionRow.request_metadata`` is the column ``metadata``), and ``column_row`` renames them
to column keys (for the ledger's driver SQL, app/store/driver_sql.py); ``upsert_for`` is the session's
dialect's INSERT with ``ON CONFLICT`` (offline uploads). The request path writes through the ledger
(app/store/ledger.py) only.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from sqlalchemy import Table, inspect
from sqlalchemy.dialects import postgresql, sqlite
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


def upsert_for(session: AsyncSession):  # type: ignore[no-untyped-def]
    """The dialect's ``insert`` (Postgres or SQLite), the one with ``on_conflict_do_*``."""
    dialect = session.bind.dialect.name if session.bind is not None else "postgresql"
    return postgresql.insert if dialect == "postgresql" else sqlite.insert
