"""The request path's prebuilt write statements (app/store/statements.py)."""

from __future__ import annotations

from app.store.models import Attempt, DecisionRow
from app.store.statements import _plain_insert, column_row


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
    assert str(_plain_insert(DecisionRow)).startswith("INSERT INTO decisions")
