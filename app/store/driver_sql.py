"""The request path's INSERTs (and its reads of counters and decisions) as the database driver's own
SQL, for the ledger (app/store/ledger.py), which goes through the driver without SQLAlchemy's
per-statement machinery.

Each statement is compiled once per table and dialect from the SQLAlchemy ``Table`` (so the column list,
quoting and Postgres's casts are SQLAlchemy's), and each row becomes the driver's positional parameters
through the same bind processors SQLAlchemy applies (JSON serialised, SQLite's datetimes as text), with
the columns' Python-side defaults filled in as SQLAlchemy would: rows written here read back through
the ORM exactly like rows written through it. Rows read here go the other way, through the same
result processors, so a decision read by the ledger holds what the ORM would load.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import JSON, Column, Table, insert, inspect, select
from sqlalchemy.dialects.postgresql import asyncpg as pg_asyncpg
from sqlalchemy.dialects.sqlite import pysqlite
from sqlalchemy.engine import Dialect

from app.store.models import Base, DecisionRow, FeedbackEvent, Probe, RouterCounter
from app.store.statements import column_row, table_of

Processor = Callable[[Any], Any]


def dialect_named(name: str) -> Dialect:
    """The SQLAlchemy dialect whose SQL and bind processors the ledger's driver takes."""
    if name == "postgresql":
        return pg_asyncpg.dialect()  # type: ignore[no-any-return]
    if name == "sqlite":
        return pysqlite.dialect()  # type: ignore[no-any-return]
    raise ValueError(f"no ledger for the {name!r} dialect")


def _default(column: Column[Any]) -> Any:
    """A column's Python-side default for a row that does not name it (None when it has none)."""
    default = column.default
    if default is None or not (default.is_scalar or default.is_callable):
        return None
    arg = default.arg  # type: ignore[attr-defined]
    if not default.is_callable:
        return arg
    try:  # SQLAlchemy wraps a function of no arguments into one of the execution context
        return arg(None)
    except TypeError:  # a builtin it could not inspect (``list``, ``dict``) is called bare
        return arg()


@dataclass(frozen=True)
class DriverInsert:
    """One table's INSERT in the driver's SQL: ``sql`` for one row, ``values`` its VALUES tuple (to
    repeat for several rows on Postgres), the columns in parameter order with their processors."""

    table: str
    sql: str
    columns_sql: str
    values: str
    columns: tuple[Column[Any], ...]
    processors: tuple[Processor | None, ...]

    def params(self, row: Mapping[str, Any]) -> list[Any]:
        """The row (column keys; missing ones take their default) as positional parameters."""
        out: list[Any] = []
        for column, process in zip(self.columns, self.processors, strict=True):
            value = row[column.key] if column.key in row else _default(column)
            out.append(value if process is None or value is None else process(value))
        return out


def _written_columns(table: Table) -> tuple[Column[Any], ...]:
    """Every column but an autoincrementing primary key (the database numbers those)."""
    return tuple(c for c in table.columns if not (c.primary_key and c.autoincrement is True))


_VALUES = re.compile(r"^INSERT INTO (\S+) \((.*)\) VALUES (\(.*\))$", re.DOTALL)


@cache
def driver_insert(model: type[Base], dialect_name: str) -> DriverInsert:
    """``model``'s table's INSERT of every written column, compiled for ``dialect_name``."""
    dialect = dialect_named(dialect_name)
    table = table_of(model)
    columns = _written_columns(table)
    compiled = insert(table).inline().compile(dialect=dialect, column_keys=[c.key for c in columns])
    order = compiled.positiontup or []
    by_key = {c.key: c for c in columns}
    ordered = tuple(by_key[name] for name in order)
    processors = tuple(c.type.dialect_impl(dialect).bind_processor(dialect) for c in ordered)
    match = _VALUES.match(compiled.string)
    assert match is not None, compiled.string
    return DriverInsert(match.group(1), compiled.string, match.group(2), match.group(3), ordered, processors)


def model_params(model: type[Base], dialect_name: str, row: Mapping[str, Any]) -> list[Any]:
    """``row`` (mapped attribute names, as the rest of the app keys them) as ``model``'s parameters."""
    return driver_insert(model, dialect_name).params(column_row(model, row))


def rows_params(
    tables: Sequence[tuple[type[Base], Sequence[Mapping[str, Any]]]], dialect_name: str
) -> list[list[list[Any]]]:
    """Each model's rows as its parameters (``model_params``), table by table: a write's rows in one
    call."""
    return [[model_params(model, dialect_name, row) for row in rows] for model, rows in tables]


_DOLLAR = re.compile(r"\$(\d+)")


def renumbered(values: str, offset: int) -> str:
    """A Postgres VALUES tuple with its ``$n`` placeholders shifted by ``offset``."""
    return _DOLLAR.sub(lambda m: f"${int(m.group(1)) + offset}", values)


def pg_tuples(template: str, count: int, offset: int) -> tuple[str, int]:
    """Postgres: ``count`` copies of a VALUES tuple (``template`` numbered from ``$1``), joined, each
    numbered on from ``offset``; also the offset after them."""
    width = len(set(_DOLLAR.findall(template)))
    tuples = ", ".join(renumbered(template, offset + i * width) for i in range(count))
    return tuples, offset + count * width


def rows_sql(insert_: DriverInsert, rows: int, offset: int) -> tuple[str, int]:
    """Postgres: ``INSERT INTO t (cols) VALUES (...), (...)`` for ``rows`` rows whose parameters start
    after ``offset``; also the offset after them."""
    tuples, offset = pg_tuples(insert_.values, rows, offset)
    return f"INSERT INTO {insert_.table} ({insert_.columns_sql}) VALUES {tuples}", offset


FEEDBACK_CONFLICT = "ON CONFLICT (decision_id, model, kind) DO NOTHING"


@cache
def feedback_insert_sqlite() -> str:
    """SQLite: one feedback row, unless its (decision, model, kind) exists; its id or no row."""
    return f"{driver_insert(FeedbackEvent, 'sqlite').sql} {FEEDBACK_CONFLICT} RETURNING id"


COUNTER_VALUES_PG = "($1::BIGINT, $2::BIGINT, $3::BIGINT)"  # router_id, decisions, query_rounds


def counter_upsert(values: str) -> str:
    """Add (decisions, query rounds) to routers' counters, creating them at those values; ``values``:
    the VALUES tuples, ``(?, ?, ?)`` on SQLite."""
    table = RouterCounter.__tablename__
    return (
        f"INSERT INTO {table} (router_id, decisions, query_rounds) VALUES {values} "
        f"ON CONFLICT (router_id) DO UPDATE SET decisions = {table}.decisions + excluded.decisions, "
        f"query_rounds = {table}.query_rounds + excluded.query_rounds"
    )


def router_lock_key(router: str) -> str:
    """Postgres: the advisory lock key of the router whose id is the SQL expression ``router``."""
    return f"hashtextextended('banditgate:router:' || ({router})::TEXT, 0)"


def router_locks_pg(routers: str) -> str:
    """Postgres: a query that takes a shared, transaction-level advisory lock on each router of the
    BIGINT[] ``routers``, in id order. Every write of the request path takes its routers' locks so,
    before it touches a row; deleting a router (or resetting it) takes its lock exclusively first
    (``lock_router_pg``). So a deletion cascading through a router's rows never meets a write that
    holds one of them while waiting for the router's row: without the locks, the two deadlock."""
    return (
        f"SELECT pg_advisory_xact_lock_shared({router_lock_key('r')}) "
        f"FROM (SELECT unnest({routers}) AS r ORDER BY 1) AS routers"
    )


def lock_router_pg() -> str:
    """Postgres: lock the router ``:router_id`` exclusively until the transaction ends (wait for the
    writes that hold it shared: ``router_locks_pg``)."""
    return f"SELECT pg_advisory_xact_lock({router_lock_key('CAST(:router_id AS BIGINT)')})"


def counter_lock_pg() -> str:
    """Postgres: lock a router's counter row and return its (decisions, query_rounds); the row is
    created at (0, 0) when missing (a concurrent creator waits on the unique index, then takes the
    lock in turn), after the router's shared advisory lock (``router_locks_pg``). Parameter: the
    router id. The locks are held until the transaction ends."""
    table = RouterCounter.__tablename__
    return (
        f"WITH lk AS ({router_locks_pg('ARRAY[$1::BIGINT]')}) "
        f"INSERT INTO {table} (router_id, decisions, query_rounds) "
        "SELECT $1::BIGINT, 0, 0 WHERE (SELECT count(*) FROM lk) >= 0 "
        f"ON CONFLICT (router_id) DO UPDATE SET decisions = {table}.decisions "
        "RETURNING decisions, query_rounds"
    )


INFO_VALUES_PG = "($1::VARCHAR, $2::JSONB)"  # decision id, the keys to merge


def info_merge(dialect_name: str, values: str = "") -> str:
    """Merge JSON objects into stored decisions' ``info`` (top-level keys replaced). SQLite: one
    decision, parameters (keys, id); Postgres: the decisions of ``values`` (``INFO_VALUES_PG`` tuples)."""
    table = DecisionRow.__tablename__
    if dialect_name == "sqlite":
        return f"UPDATE {table} SET info = json_patch(COALESCE(info, '{{}}'), ?) WHERE id = ?"
    return (
        f"UPDATE {table} AS t SET info = (COALESCE(t.info::jsonb, '{{}}'::jsonb) || v.keys)::json "
        f"FROM (VALUES {values}) AS v(id, keys) WHERE t.id = v.id"
    )


PROBE_MARK_VALUES_PG = "($1::VARCHAR, $2::VARCHAR)"  # decision id, model


def probes_answered(values: str = "") -> str:
    """Mark pending probes answered. SQLite: one probe, parameters (decision id, model); Postgres: the
    probes of ``values`` (``PROBE_MARK_VALUES_PG`` tuples)."""
    table = Probe.__tablename__
    if not values:
        return f"UPDATE {table} SET status = 'answered' WHERE decision_id = ? AND model = ? AND status = 'pending'"
    return (
        f"UPDATE {table} AS t SET status = 'answered' FROM (VALUES {values}) AS v(decision_id, model) "
        "WHERE t.decision_id = v.decision_id AND t.model = v.model AND t.status = 'pending'"
    )


SQLITE_KEYS_PER_SELECT = 500  # well under SQLite's bound on a statement's parameters
Select = tuple[str, list[Any]]  # a statement and its parameters


def selects_by_key(head: str, pg_type: str, keys: Sequence[Any], dialect_name: str) -> list[Select]:
    """``head`` (a SELECT ending in ``WHERE <column>``) for the rows whose column is one of ``keys``:
    on Postgres one statement taking them as one array of ``pg_type``, on SQLite one statement per
    ``SQLITE_KEYS_PER_SELECT`` keys; none for no keys."""
    if not keys:
        return []
    if dialect_name == "postgresql":
        return [(f"{head} = ANY($1::{pg_type}[])", [list(keys)])]
    selects: list[Select] = []
    for start in range(0, len(keys), SQLITE_KEYS_PER_SELECT):
        chunk = list(keys[start : start + SQLITE_KEYS_PER_SELECT])
        selects.append((f"{head} IN ({', '.join('?' * len(chunk))})", chunk))
    return selects


def counts_selects(dialect_name: str, router_ids: Sequence[int]) -> list[Select]:
    """Routers' counters: (router_id, decisions, query_rounds) rows."""
    head = f"SELECT router_id, decisions, query_rounds FROM {RouterCounter.__tablename__} WHERE router_id"
    return selects_by_key(head, "BIGINT", router_ids, dialect_name)


def _result_processor(column: Column[Any], dialect_name: str) -> Processor | None:
    """How the driver's value of ``column`` becomes the ORM's. SQLAlchemy's asyncpg dialect decodes
    JSON with a codec it installs on its own connections; the ledger's connection has asyncpg's
    default, which returns the text."""
    if dialect_name == "postgresql" and isinstance(column.type, JSON):
        return json.loads
    dialect = dialect_named(dialect_name)
    processor: Processor | None = column.type.dialect_impl(dialect).result_processor(dialect, None)
    return processor


@dataclass(frozen=True)
class DriverRows:
    """A table's rows read through the driver: ``sql``, the SELECT of every column (add a WHERE), and
    each column's mapped attribute name and result processor, so a row becomes the attributes the ORM
    would load."""

    sql: str
    keys: tuple[str, ...]
    processors: tuple[Processor | None, ...]

    def attributes(self, record: Sequence[Any]) -> dict[str, Any]:
        """One row (its values in column order) as mapped attribute names and the ORM's values."""
        return {
            key: value if process is None or value is None else process(value)
            for key, process, value in zip(self.keys, self.processors, record, strict=True)
        }


def _rows_in(model: type[Base], columns: Sequence[Column[Any]], dialect_name: str, sql: str) -> DriverRows:
    """How values of ``model``'s ``columns``, in that order, become its mapped attributes."""
    mapper = inspect(model)
    keys = tuple(mapper.get_property_by_column(c).key for c in columns)
    return DriverRows(sql, keys, tuple(_result_processor(c, dialect_name) for c in columns))


@cache
def driver_rows(model: type[Base], dialect_name: str) -> DriverRows:
    """``model``'s SELECT of every column, compiled for ``dialect_name``, and how to read its rows."""
    columns = tuple(table_of(model).columns)
    sql = str(select(*columns).compile(dialect=dialect_named(dialect_name)))
    return _rows_in(model, columns, dialect_name, sql)


def decisions_selects(dialect_name: str, ids: Sequence[str]) -> list[Select]:
    """Every column of the decisions of ``ids`` (rows for ``driver_rows(DecisionRow, ...)``)."""
    head = f"{driver_rows(DecisionRow, dialect_name).sql} WHERE {DecisionRow.__tablename__}.id"
    return selects_by_key(head, "VARCHAR", ids, dialect_name)


@cache
def written_rows(model: type[Base], dialect_name: str) -> DriverRows:
    """How a row as the ledger writes it (``model_params``: its INSERT's parameters, in that order)
    becomes the attributes the ORM would load of it once stored (``sql`` is empty: it reads nothing)."""
    return _rows_in(model, driver_insert(model, dialect_name).columns, dialect_name, "")
