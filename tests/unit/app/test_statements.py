"""Rows on SQLAlchemy's side (app/store/statements.py)."""

from __future__ import annotations

from app.store.models import Attempt, DecisionRow
from app.store.statements import column_row


def test_rows_are_renamed_from_attributes_to_column_keys() -> None:
    assert column_row(DecisionRow, {"id": "d", "request_metadata": {"a": 1}}) == {
        "id": "d",
        "metadata": {"a": 1},
    }
    assert column_row(Attempt, {"decision_id": "d", "number": 1}) == {"decision_id": "d", "number": 1}
