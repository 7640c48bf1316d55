"""``banditgate warm-start``'s batching (app/warm_start_client.py): batches bounded by rows and bytes, and
a batch the gateway refuses as too large (413) halved until it fits. The gateway here is an
in-process stand-in (httpx.MockTransport) with the real endpoint's two limits, rows and bytes; the end-to-end run against a real gateway is
tests/integration/test_warm_start.py::test_cli_round_trip_against_a_gateway_process."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from app.warm_start_client import (
    Gateway,
    GatewayRefused,
    PriorSpecError,
    WarmStartError,
    ndjson_line,
    parse_prior,
    parse_priors,
    send_priors,
    upload_rows,
)

ARM = "m"


class Observations:
    """A stand-in for the observations endpoint with ``max_rows`` and ``max_bytes`` limits; it records
    the size of every batch it was sent."""

    def __init__(self, max_rows: int, max_bytes: int) -> None:
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.sent: list[tuple[int, int, int]] = []  # (rows, bytes, status)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"arms": [ARM]})
        body = request.content
        rows = [json.loads(line) for line in body.splitlines() if line.strip()]
        status = 413 if len(rows) > self.max_rows or len(body) > self.max_bytes else 200
        self.sent.append((len(rows), len(body), status))
        if status == 413:
            return httpx.Response(413, json={"detail": "too large"})
        return httpx.Response(200, json={"rows": len(rows), "new": len(rows), "duplicates": 0})


def gateway(endpoint: Observations) -> Gateway:
    client = httpx.Client(transport=httpx.MockTransport(endpoint), base_url="http://gw")
    return Gateway(client, "t", "r", retries=0, backoff_s=0.0)


def rows(n: int, prompt_chars: int = 50) -> list[tuple[dict[str, Any], int]]:
    return [
        ({"id": f"r{i:03d}", "prompt": "p" * prompt_chars, "model": ARM, "reward": 1.0}, i + 1)
        for i in range(n)
    ]


def test_batches_are_bounded_by_bytes_as_well_as_rows() -> None:
    line = len(ndjson_line(rows(1)[0][0]))
    endpoint = Observations(max_rows=1000, max_bytes=10 * line)
    summary = upload_rows(gateway(endpoint), rows(25), batch_size=500, batch_bytes=4 * line)
    assert [sent[:1] for sent in endpoint.sent] == [(4,)] * 6 + [(1,)]  # 25 rows, 4 lines a batch
    assert all(status == 200 for *_, status in endpoint.sent) and summary.new == 25


def test_a_batch_refused_as_too_large_is_halved_until_it_fits() -> None:
    line = len(ndjson_line(rows(1)[0][0]))
    endpoint = Observations(max_rows=1000, max_bytes=3 * line)
    summary = upload_rows(gateway(endpoint), rows(8), batch_size=8)
    # 8 rows (413) -> 4 (413) -> 2, 2 -> 4 (413) -> 2, 2
    assert [(n, status) for n, _, status in endpoint.sent] == [
        (8, 413),
        (4, 413),
        (2, 200),
        (2, 200),
        (4, 413),
        (2, 200),
        (2, 200),
    ]
    assert (summary.rows, summary.new) == (8, 8)
    fewer_rows = Observations(max_rows=3, max_bytes=10**6)  # the gateway's max_offline_batch
    assert upload_rows(gateway(fewer_rows), rows(7), batch_size=7).new == 7


def test_a_single_row_too_large_stops_the_run() -> None:
    endpoint = Observations(max_rows=1000, max_bytes=100)
    with pytest.raises(WarmStartError, match="a single row of"):
        upload_rows(gateway(endpoint), rows(2, prompt_chars=200), batch_size=2)


def test_prior_specs_parse_with_the_model_before_the_last_equals_sign() -> None:
    assert parse_prior("gpt-4o=0.8:20") == ("gpt-4o", {"mean": 0.8, "weight": 20.0})
    # a model name may hold ':' and '=' (MEAN:WEIGHT follows the last '=')
    assert parse_prior("llama3:8b=0.5:2.5") == ("llama3:8b", {"mean": 0.5, "weight": 2.5})
    assert parse_prior("a=b=-1:1e3") == ("a=b", {"mean": -1.0, "weight": 1000.0})
    assert parse_priors(["x=0.1:1", "y=0.9:4"]) == {
        "x": {"mean": 0.1, "weight": 1.0},
        "y": {"mean": 0.9, "weight": 4.0},
    }
    for spec, needle in [
        ("gpt-4o", "expected MODEL=MEAN:WEIGHT"),
        ("=0.8:2", "expected MODEL=MEAN:WEIGHT"),
        ("m=0.8", "expected MODEL=MEAN:WEIGHT"),
        ("m=x:2", "must be numbers"),
        ("m=nan:2", "MEAN must be finite"),
        ("m=0.5:-1", "WEIGHT a finite number > 0"),
        ("m=0.5:inf", "WEIGHT a finite number > 0"),
    ]:
        with pytest.raises(PriorSpecError, match=needle):
            parse_prior(spec)
    with pytest.raises(PriorSpecError, match="given twice"):
        parse_priors(["m=0.1:1", "m=0.2:1"])


def test_priors_are_checked_against_the_arms_then_sent_in_one_put() -> None:
    sent: list[tuple[str, str, Any]] = []

    def endpoint(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        sent.append((request.method, request.url.path, body))
        if request.method == "GET":
            return httpx.Response(200, json={"arms": [ARM, "n"]})
        return httpx.Response(200, json={"hyperparameters": body})

    client = httpx.Client(transport=httpx.MockTransport(endpoint), base_url="http://gw")
    gw = Gateway(client, "t", "r", retries=0, backoff_s=0.0)
    line = send_priors(gw, {ARM: {"mean": 0.75, "weight": 8.0}})
    assert line == "priors set (mean x weight): m 0.75 x 8"
    assert sent == [
        ("GET", "/admin/tenants/t/routers/r", None),
        ("PUT", "/admin/tenants/t/routers/r/priors", {"priors": {ARM: {"mean": 0.75, "weight": 8.0}}}),
    ]
    sent.clear()
    with pytest.raises(PriorSpecError, match=r"--prior names \['x'\], not arms of the router"):
        send_priors(gw, {"x": {"mean": 0.5, "weight": 1.0}})
    assert [method for method, _, _ in sent] == ["GET"]  # nothing was sent


def test_a_refusal_is_the_gateways_message() -> None:
    def endpoint(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"detail": [{"loc": ["body", "priors"], "msg": "not an arm"}]})

    client = httpx.Client(transport=httpx.MockTransport(endpoint), base_url="http://gw")
    with pytest.raises(GatewayRefused, match="PUT /admin/tenants/t/routers/r/priors: 422 not an arm"):
        Gateway(client, "t", "r", retries=0, backoff_s=0.0).set_priors({})
