"""The ledger's pure parts: rows as driver parameters, a batch's counters and feedback ids, and the
Postgres batch statement (app/store/driver_sql.py, app/store/ledger.py, app/store/ledger_postgres.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from app.store.driver_sql import driver_insert, model_params, renumbered
from app.store.ledger import LedgerWrite, PreparedWrite, feedback_ids, merged_counts, prepare
from app.store.ledger_postgres import batch_statement
from app.store.models import Attempt, DecisionRow, FeedbackEvent

DECISION = {
    "id": "d1",
    "tenant_id": 1,
    "router_id": 2,
    "router_version": 1,
    "policy": "always",
    "models": ["a"],
    "query": [],
    "scores": {},
    "info": {"t": 1},
    "embedding": b"\x00\x00\x80?",
    "prompt_hash": "h",
    "prompt_chars": 3,
    "request_metadata": {"team": "x"},
    "created_at": datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC),
}

# an attempt's row without ``error`` or ``created_at``: those take their defaults
ATTEMPT = {
    "decision_id": "d1",
    "model": "a",
    "number": 1,
    "outcome": "ok",
    "http_status": 200,
    "latency_ms": 1.0,
}


def test_sqlite_parameters_are_what_sqlalchemy_would_bind() -> None:
    """JSON as its text, the datetime as SQLite's text, the attribute ``request_metadata`` as the
    column ``metadata``, in the statement's column order."""
    insert = driver_insert(DecisionRow, "sqlite")
    assert insert.sql.startswith("INSERT INTO decisions (id, tenant_id, router_id")
    params = dict(
        zip([c.key for c in insert.columns], model_params(DecisionRow, "sqlite", DECISION), strict=True)
    )
    assert params["info"] == '{"t": 1}' and params["metadata"] == '{"team": "x"}'
    assert params["created_at"] == "2026-01-02 03:04:05.600000"
    assert params["embedding"] == b"\x00\x00\x80?"


def test_missing_columns_take_their_defaults_and_autoincrement_ids_are_left_out() -> None:
    insert = driver_insert(Attempt, "postgresql")
    keys = [c.key for c in insert.columns]
    assert "id" not in keys and keys[-1] == "created_at"
    params = model_params(Attempt, "postgresql", ATTEMPT)
    assert params[keys.index("error")] is None
    assert isinstance(params[keys.index("created_at")], datetime)
    assert "$8::TIMESTAMP WITH TIME ZONE" in insert.values
    feedback = driver_insert(FeedbackEvent, "postgresql")
    assert "id" not in [c.key for c in feedback.columns]


def test_placeholders_are_shifted() -> None:
    assert renumbered("($1::VARCHAR, $2::JSON, $10::INT)", 20) == "($21::VARCHAR, $22::JSON, $30::INT)"


def test_counts_are_summed_per_router_in_id_order() -> None:
    batch = [
        PreparedWrite(count=(9, 1, 0)),
        PreparedWrite(count=(3, 1, 1)),
        PreparedWrite(),
        PreparedWrite(count=(9, 1, 1)),
    ]
    assert merged_counts(batch) == [(3, 1, 1), (9, 2, 1)]


def test_feedback_ids_go_back_in_order_and_a_repeated_key_gets_none() -> None:
    first = PreparedWrite(feedback_keys=[("d1", "a", "cost"), ("d1", "b", "cost")])
    second = PreparedWrite(feedback_keys=[("d1", "a", "cost")])  # the same key: a duplicate
    third = PreparedWrite(feedback_keys=[("d2", "a", "bandit")])
    inserted = [(("d2", "a", "bandit"), 12), (("d1", "a", "cost"), 10), (("d1", "b", "cost"), 11)]
    assert feedback_ids([first, second, third], inserted) == [[10, 11], [None], [12]]


def test_a_postgres_batch_is_one_statement_with_its_parameters_in_order() -> None:
    event = {
        "decision_id": "d1",
        "tenant_id": 1,
        "router_id": 2,
        "model": "a",
        "kind": "cost",
        "reward": None,
        "cost": 0.5,
        "payload": {},
    }
    one = prepare(
        LedgerWrite(decision=DECISION, attempts=[ATTEMPT], feedback=[event], count=(2, 1, 0)), "postgresql"
    )
    two = prepare(LedgerWrite(info=("d0", {"answered_by": "b"}), count=(2, 1, 1)), "postgresql")
    sql, args = batch_statement([one, two])
    decision_width = len(driver_insert(DecisionRow, "postgresql").columns)
    attempt_width = len(driver_insert(Attempt, "postgresql").columns)
    feedback_width = len(driver_insert(FeedbackEvent, "postgresql").columns)
    assert len(args) == decision_width + attempt_width + 2 + 3 + feedback_width + 1
    # the routers' advisory locks first (the main query's one-time filter), then the rows
    assert sql.startswith("WITH lk AS (SELECT pg_advisory_xact_lock_shared(")
    assert ", d AS (INSERT INTO decisions" in sql
    assert ", a AS (INSERT INTO attempts" in sql and ", u AS (UPDATE decisions" in sql
    assert ", c AS (INSERT INTO router_counters" in sql
    assert "ON CONFLICT (decision_id, model, kind) DO NOTHING RETURNING id, decision_id, model, kind)" in sql
    assert sql.endswith("SELECT id, decision_id, model, kind FROM f WHERE (SELECT count(*) FROM lk) >= 0")
    assert args[-1] == [2]  # every router the batch names, once, in id order
    # the counters' increments were merged: one row for router 2, 2 decisions, 1 query round
    counter_at = decision_width + attempt_width + 2
    assert args[counter_at : counter_at + 3] == [2, 2, 1]
    assert args[decision_width + attempt_width : counter_at] == ["d0", json.dumps({"answered_by": "b"})]
    assert f"${len(args)}::BIGINT[]" in sql and f"${len(args) + 1}" not in sql


def test_a_postgres_batch_without_routers_takes_no_lock_and_one_without_feedback_still_locks() -> None:
    merge = prepare(LedgerWrite(info=("d0", {"answered_by": "b"})), "postgresql")
    assert merge.routers == ()
    sql, args = batch_statement([merge])
    assert "pg_advisory" not in sql and args == ["d0", json.dumps({"answered_by": "b"})]
    assert sql.endswith("FROM (SELECT true AS locked) AS g WHERE NOT g.locked")
    counted = prepare(LedgerWrite(decision=DECISION, count=(2, 1, 0)), "postgresql")
    assert counted.routers == (2,)
    sql, args = batch_statement([counted])
    assert sql.startswith("WITH lk AS (") and args[-1] == [2]
    assert sql.endswith("FROM (SELECT (SELECT count(*) FROM lk) >= 0 AS locked) AS g WHERE NOT g.locked")
