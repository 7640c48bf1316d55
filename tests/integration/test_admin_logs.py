"""GET /admin/decisions, /admin/decisions/{id} and /admin/feedback on both stacks: filters, keyset paging
with opaque cursors, a decision's explanation and feedback; and GET /metrics."""

from __future__ import annotations

import re
from typing import Any

import httpx

from app.main import create_app
from tests.conftest import Stack, admin_headers, bearer, error_text, make_tenancy, running, unique
from tests.integration.test_rate_limits import from_addresses


async def pages(client: httpx.AsyncClient, path: str, params: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Every page of a paged listing, following next_cursor."""
    out: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    while True:
        query = params | ({"cursor": cursor} if cursor else {})
        response = await client.get(path, params=query, headers=admin_headers())
        assert response.status_code == 200, response.text
        body = response.json()
        out.append(body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return out


async def test_decision_and_feedback_logs(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        other = await make_tenancy(client)
        ids: list[str] = []
        for i in range(5):
            d = (await client.post("/route", json={"prompt": f"question {i}"}, headers=bearer(t.key))).json()
            ids.append(d["decision_id"])
            body = {"decision_id": d["decision_id"], "reward": i / 4, "cost": 0.001 * i}
            assert (await client.post("/feedback", json=body, headers=bearer(t.key))).status_code == 202
        await client.post("/route", json={"prompt": "elsewhere"}, headers=bearer(other.key))

        decided = await pages(client, "/admin/decisions", {"tenant": t.tenant, "router": "main", "limit": 2})
        assert [len(p) for p in decided] == [2, 2, 1]
        assert [d["id"] for p in decided for d in p] == ids[::-1]  # newest first, each once
        first = decided[-1][-1]
        assert first["tenant"] == t.tenant and first["router"] == "main" and first["model"] in t.arms
        assert set(first["scores"]) == set(t.arms) and first["prompt_chars"] == len("question 0")
        # each listed decision with the reward and cost fed back about it
        assert [(d["reward"], d["cost"]) for p in decided for d in p] == [
            (i / 4, 0.001 * i or 0.0) for i in range(4, -1, -1)
        ]

        chosen = first["model"]
        by_model = await pages(client, "/admin/decisions", {"tenant": t.tenant, "model": chosen, "limit": 50})
        assert by_model[0] and all(d["model"] == chosen for d in by_model[0])

        detail = (await client.get(f"/admin/decisions/{ids[3]}", headers=admin_headers())).json()
        assert detail["id"] == ids[3] and set(detail["scores"]) == set(t.arms)
        assert [(f["reward"], f["cost"], f["kind"]) for f in detail["feedback"]] == [(0.75, 0.003, "bandit")]
        assert (detail["reward"], detail["cost"]) == (0.75, 0.003)
        missing = await client.get("/admin/decisions/feedfacefeedface", headers=admin_headers())
        assert missing.status_code == 404

        events = await pages(client, "/admin/feedback", {"tenant": t.tenant, "router": "main", "limit": 3})
        assert [len(p) for p in events] == [3, 2]
        assert [e["decision_id"] for p in events for e in p] == ids[::-1]
        assert [e["reward"] for p in events for e in p] == [1.0, 0.75, 0.5, 0.25, 0.0]

        # A time range that ends before the first decision finds nothing; one that covers all finds all.
        early = {"tenant": t.tenant, "until": "2000-01-01T00:00:00Z"}
        assert (await client.get("/admin/decisions", params=early, headers=admin_headers())).json()[
            "items"
        ] == []
        wide = {"tenant": t.tenant, "since": "2000-01-01T00:00:00Z", "limit": 100}
        assert (
            len((await client.get("/admin/feedback", params=wide, headers=admin_headers())).json()["items"])
            == 5
        )


async def test_log_validation(stack: Stack) -> None:
    async with running(create_app(stack.settings(admin_page_max=10))) as client:
        t = await make_tenancy(client)
        h = admin_headers()
        for path, params, says in [
            ("/admin/decisions", {"cursor": "not-a-cursor"}, "cursor is not one this API returned"),
            ("/admin/feedback", {"cursor": "eyJ4IjogMX0"}, "cursor is not one this API returned"),
            ("/admin/decisions", {"router": "main"}, "needs tenant as well"),
            ("/admin/feedback", {"limit": 11}, "limit=11 is above the largest page, 10"),
            (
                "/admin/decisions",
                {"since": "2026-02-01", "until": "2026-01-01"},
                "must be earlier than until",
            ),
            ("/admin/feedback", {"until": "soon"}, "until='soon' is not an ISO 8601 time"),
        ]:
            response = await client.get(path, params=params, headers=h)
            assert response.status_code == 422 and says in error_text(response), (path, response.text)
        assert (await client.get("/admin/decisions", headers=bearer(t.key))).status_code == 403
        assert (await client.get("/admin/feedback")).status_code == 401


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format (0 when absent)."""
    for line in text.splitlines():
        if not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.rsplit(" ", 1)[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_metrics(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        t = await make_tenancy(client)
        before = (await client.get("/metrics", headers=admin_headers())).text
        for i in range(3):
            d = (await client.post("/route", json={"prompt": f"m {i}"}, headers=bearer(t.key))).json()
            body = {"decision_id": d["decision_id"], "reward": 1.0}
            await client.post("/feedback", json=body, headers=bearer(t.key))
            await client.post("/feedback", json=body, headers=bearer(t.key))  # a duplicate: not counted
        await client.get("/admin/decisions/nope", headers=admin_headers())
        response = await client.get("/metrics", headers=admin_headers())
        assert response.headers["content-type"].startswith("text/plain")
        after = response.text

        def delta(name: str, **labels: str) -> float:
            return sample(after, name, **labels) - sample(before, name, **labels)

        assert delta("banditgate_decisions_total", tenant=t.tenant, router="main") == 3
        assert delta("banditgate_feedback_total", tenant=t.tenant, router="main", kind="bandit") == 3
        assert delta("banditgate_http_request_duration_seconds_count", method="POST", route="/route") == 3
        assert delta("banditgate_http_request_duration_seconds_count", method="POST", route="/feedback") == 6
        assert delta("banditgate_http_errors_total", route="/admin/decisions/{decision_id}", kind="4xx") == 1
        assert delta("banditgate_embedding_duration_seconds_count") == 3
        assert "/admin/decisions/nope" not in after  # route templates, never raw paths


async def test_metrics_can_be_turned_off(sqlite_stack: Stack) -> None:
    async with running(create_app(sqlite_stack.settings(metrics_enabled=False))) as client:
        assert (await client.get("/metrics")).status_code == 404
        assert (await client.get("/healthz")).status_code == 200


async def test_metrics_need_their_token(sqlite_stack: Stack) -> None:
    """The metrics token when one is set (the admin key is then refused), else the admin key; public only
    when explicitly said; neither configured: 403."""
    token = "metrics-scrape-token"
    async with running(create_app(sqlite_stack.settings(metrics_token=token))) as client:
        missing = await client.get("/metrics")
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert "metrics token" in missing.json()["detail"]
        assert (await client.get("/metrics", headers=bearer("wrong-token"))).status_code == 401
        assert (await client.get("/metrics", headers=admin_headers())).status_code == 401
        good = await client.get("/metrics", headers=bearer(token))
        assert good.status_code == 200 and "banditgate_http_responses_total" in good.text
    async with running(create_app(sqlite_stack.settings())) as client:
        assert (await client.get("/metrics")).status_code == 401
        assert (await client.get("/metrics", headers=bearer(token))).status_code == 401
        assert (await client.get("/metrics", headers=admin_headers())).status_code == 200
    async with running(create_app(sqlite_stack.settings(admin_key=None))) as client:
        assert (await client.get("/metrics")).status_code == 403
    async with running(create_app(sqlite_stack.settings(metrics_public=True))) as client:
        assert (await client.get("/metrics")).status_code == 200


async def test_wrong_metrics_tokens_count_against_the_address(stack: Stack) -> None:
    """/metrics checks a token as every endpoint checks a key: a wrong one is a failed authentication of
    the address, and an address over its limit is refused (429) even with the right token."""
    prefix = unique("bg:test-ratelimit")
    settings = stack.settings(auth_failure_limit=2, auth_failure_window_s=60.0, rate_limit_prefix=prefix)
    async with from_addresses(create_app(settings), "10.7.0.1", "10.7.0.2") as (guesser, scraper):
        assert (await guesser.get("/metrics")).status_code == 401  # no token: not counted
        for _ in range(2):
            assert (await guesser.get("/metrics", headers=bearer("wrong-token"))).status_code == 401
        locked = await guesser.get("/metrics", headers=admin_headers())
        assert locked.status_code == 429 and int(locked.headers["retry-after"]) >= 1, locked.text
        assert locked.json()["detail"].startswith("too many failed authentications from this address")
        assert (await scraper.get("/metrics", headers=admin_headers())).status_code == 200


async def test_metrics_count_the_request_limits_refusals(sqlite_stack: Stack) -> None:
    """RequestMetrics sits outside RequestLimits: a 413 or 431 the limits answer is counted."""
    async with running(create_app(sqlite_stack.settings(max_body_bytes=1024, max_header_count=20))) as client:
        before = (await client.get("/metrics", headers=admin_headers())).text
        big = await client.post("/route", content=b"x" * 2048, headers={"Content-Type": "application/json"})
        assert big.status_code == 413
        many = await client.get("/healthz", headers={f"x-h{i}": "v" for i in range(25)})
        assert many.status_code == 431
        after = (await client.get("/metrics", headers=admin_headers())).text
        # refused before routing: labelled <unmatched>
        labels = {"route": "<unmatched>", "kind": "4xx"}
        errors = "banditgate_http_errors_total"
        assert sample(after, errors, **labels) - sample(before, errors, **labels) == 2
