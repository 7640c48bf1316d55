"""The JSON contract of ``bench run`` (``bench/data/result_schema.json``) and its validation."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any


@lru_cache(maxsize=1)
def result_schema() -> dict[str, Any]:
    text = resources.files("bench").joinpath("data/result_schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate_report(report: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``report`` follows the contract."""
    import jsonschema

    jsonschema.validate(report, result_schema(), cls=jsonschema.Draft202012Validator)
