"""The request path's prebuilt write statements (app/store/statements.py)."""

from __future__ import annotations

from sqlalchemy.dialects import postgresql, sqlite

from app.store.models import Attempt, DecisionRow
from app.store.statements import _count_written, _insert_feedback, _plain_insert, column_row


def test_rows_are_renamed_from_attributes_to_column_keys() -> None:
    assert column_row(DecisionRow, {"id": "d", "request_metadata": {"a": 1}}) == {
        "id": "d",
        "metadata": {"a": 1},
    }
    assert column_row(Attempt, {"decision_id": "d", "number": 1}) == {"decision_id": "d", "number": 1}


def test_each_statement_is_built_once_and_carries_no_values() -> None:
    """Built once (cached), with the row's values left to the execution's parameters, so SQLAlchemy's
    compiled-statement cache serves every later request."""
    assert _plain_insert(DecisionRow) is _plain_insert(DecisionRow)
    assert _insert_feedback("sqlite") is _insert_feedback("sqlite")
    assert _count_written("postgresql") is _count_written("postgresql")
    sql = str(_count_written("postgresql").compile(dialect=postgresql.dialect()))
    assert "ON CONFLICT (router_id) DO UPDATE" in sql and "%(query_rounds" in sql
    feedback = str(_insert_feedback("sqlite").compile(dialect=sqlite.dialect()))
    assert "ON CONFLICT (decision_id, model, kind) DO NOTHING RETURNING id" in feedback
