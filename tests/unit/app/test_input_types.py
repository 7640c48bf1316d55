"""The input types of app/input_types.py, the display of stored JSON (app/jsonable.py), the 422 echo
(app/api/errors.py) and the time-window ranges (app/timewindow.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import ValidationError

from app.api.errors import echoed, unprocessable_detail, validation_errors
from app.api.http_limits import HttpLimits, RequestLimits
from app.input_types import (
    DEFAULT_LIMITS,
    JsonLimits,
    JsonTooLarge,
    check_json,
    current_limits,
    text_problem,
)
from app.jsonable import DEEPER, readable
from app.routing.errors import Invalid
from app.schemas import BackendUpdate, ChatMessage, FeedbackRequest, RouteRequest, TenantCreate
from app.settings import Settings
from app.timewindow import EARLIEST, parse_bucket, parse_time


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def test_text_problems() -> None:
    assert text_problem("plain ünïcode 😀") is None
    assert text_problem("ab\x00c") == "contains a NUL character (U+0000) at position 2"
    problem = text_problem("ab\udc80")
    assert problem is not None and "lone UTF-16 surrogate (U+DC80) at position 2" in problem


def test_json_depth_is_counted_in_containers() -> None:
    check_json(1, 0, 100, "S")  # a scalar is depth 0
    check_json(nested(3), 3, 100, "S")
    with pytest.raises(ValueError, match=r"at a\.a\.a: nested deeper than 3 levels"):
        check_json(nested(4), 3, 100, "S")
    check_json([[[]]], 3, 100, "S")
    with pytest.raises(ValueError, match=r"at \[0\]\[0\]\[0\]: nested deeper than 3"):
        check_json([[[[]]]], 3, 100, "S")


def test_json_size_is_compact_utf8_bytes() -> None:
    value = {"k": "é" * 10}  # {"k":"éééééééééé"} = 8 ASCII bytes + 10 two-byte characters
    assert len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()) == 28
    check_json(value, 5, 28, "S")
    with pytest.raises(JsonTooLarge, match=r"^28 bytes of JSON; the limit is 27 \(S\)$"):
        check_json(value, 5, 27, "S")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"x": float("nan")}, "at x: nan: only finite numbers"),
        ({"x": [1, float("-inf")]}, r"at x\[1\]: -inf: only finite"),
        ({"x": "\ud800"}, "at x: contains a lone UTF-16 surrogate"),
        ({"\ud800": 1}, "a key contains a lone UTF-16 surrogate"),
        ({"x": {"y": "\x00"}}, r"at x\.y: contains a NUL"),
        ({"x": {1, 2}}, "at x: a set is not a JSON value"),
    ],
)
def test_json_refuses(value: Any, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        check_json(value, 10, 10_000, "S")


def test_models_use_the_limits_in_force() -> None:
    deepest = DEFAULT_LIMITS.json_max_depth
    assert RouteRequest(prompt="x", metadata=nested(deepest)).metadata == nested(deepest)
    with pytest.raises(ValidationError) as refused:
        RouteRequest(prompt="x", metadata=nested(deepest + 1))
    assert refused.value.errors()[0]["loc"] == ("metadata",)
    assert "BANDITGATE_JSON_MAX_DEPTH" in str(refused.value)

    async def inside_a_request() -> JsonLimits:
        seen: list[JsonLimits] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            seen.append(current_limits())
            # over a size limit is a 413 (TooLarge), not a 422: pydantic lets it through
            with pytest.raises(JsonTooLarge, match="BANDITGATE_METADATA_MAX_BYTES"):
                FeedbackRequest(decision_id="d", reward=1.0, metadata={"k": "x" * 20})

        settings = Settings(metadata_max_bytes=20, json_max_depth=4)
        middleware = RequestLimits(app, HttpLimits.of(settings), JsonLimits.of(settings))
        await middleware({"type": "http", "path": "/feedback", "headers": []}, None, None)
        return seen[0]

    assert asyncio.run(inside_a_request()) == JsonLimits(json_max_depth=4, metadata_max_bytes=20)
    assert current_limits() == DEFAULT_LIMITS  # reset after the request


def test_names_and_urls_have_their_column_lengths() -> None:
    with pytest.raises(ValidationError, match="at most 100 characters"):
        TenantCreate(name="t" * 101)
    with pytest.raises(ValidationError, match="at most 200 characters"):
        BackendUpdate(upstream_model="m" * 201)
    with pytest.raises(ValidationError, match="at most 2000 characters"):
        BackendUpdate(base_url="http://" + "x" * 2000)
    assert BackendUpdate(upstream_model="m" * 200).upstream_model == "m" * 200
    with pytest.raises(ValidationError, match="NUL"):
        RouteRequest(prompt="a\x00")
    with pytest.raises(ValidationError, match="surrogate"):
        ChatMessage(role="user", content="\udfff")
    with pytest.raises(ValidationError, match="finite"):
        ChatMessage(role="user", content=[{"type": "text", "text": "x"}], weight=float("inf"))


def test_readable_repairs_what_was_stored() -> None:
    stored = {"who": "a\ud800b", "\udc00": [float("nan"), 1.5, True, None], "deep": nested(5)}
    shown = readable(stored, 3)
    assert shown == {"who": "a\ufffdb", "\ufffd": [None, 1.5, True, None], "deep": {"a": {"a": DEEPER}}}
    json.dumps(shown, allow_nan=False).encode()  # valid JSON, encodable as UTF-8


def test_the_echo_is_safe_and_short() -> None:
    assert echoed("x" * 1000) == "x" * 200 + DEEPER
    assert echoed(list(range(100))) == list(range(20))
    assert echoed({"k": [float("inf"), "\ud800", ValueError("boom")]}) == {"k": [None, "\ufffd", "boom"]}
    errors = validation_errors(
        [
            {
                "type": "t",
                "loc": ("body", "seed"),
                "msg": "bad",
                "input": nested(50),
                "ctx": {"e": ValueError("x")},
            }
        ]
    )
    assert errors == [
        {
            "type": "t",
            "loc": ["body", "seed"],
            "msg": "bad",
            "input": {"a": {"a": {"a": DEEPER}}},
            "ctx": {"e": "x"},
        }
    ]
    assert unprocessable_detail("the prompt is empty", None) == [
        {"type": "value_error", "loc": [], "msg": "the prompt is empty"}
    ]
    assert unprocessable_detail("bad", "since")[0]["loc"] == ["since"]


def test_times_and_buckets_are_range_checked() -> None:
    assert parse_time("since", "1970-01-01T00:00:00Z") == EARLIEST
    for value in ("0001-01-01", "0001-01-01T00:00:00+01:00", "1969-12-31T23:59:59Z", "9999-12-31"):
        with pytest.raises(Invalid) as refused:
            parse_time("since", value)
        assert refused.value.param == "since"
    assert parse_bucket("366d", 366 * 86400) == 366 * 86400
    for value in ("367d", "1000d", "9" * 13):
        with pytest.raises(Invalid) as refused:
            parse_bucket(value, 366 * 86400)
        assert refused.value.param == "bucket"
