"""No secret leaves through an upstream error: a backend that echoes the request headers it got (the
gateway's ``Authorization: Bearer <backend key>`` among them) in its 401 body. The tenant's 502 names the
backend and the status only; the server log and ``attempts.error`` hold a redacted excerpt. Both stacks."""

from __future__ import annotations

import logging
import secrets

import pytest
from sqlalchemy import select

from app.store.models import Attempt
from tests.conftest import ADMIN_KEY, SECRET_KEY, Stack, bearer, running
from tests.fake_backend import FakeBackends
from tests.integration.test_forwarding import PROMPT, add_backend, add_tenant, gateway_app


async def test_an_echoing_backend_leaks_no_key(
    stack: Stack, fake: FakeBackends, caplog: pytest.LogCaptureFixture
) -> None:
    backend_key = "sk-live-" + secrets.token_urlsafe(24)
    app = gateway_app(stack)
    caplog.set_level(logging.INFO)
    async with running(app) as client:
        echo = await add_backend(client, fake, "echoheaders-401", api_key=backend_key)
        key = await add_tenant(client, [echo])
        chat = {"model": "router", "messages": [{"role": "user", "content": PROMPT}]}
        via_openai = await client.post("/v1/chat/completions", json=chat, headers=bearer(key))
        routed = {"forward": True, "request": {"messages": [{"role": "user", "content": PROMPT}]}}
        via_route = await client.post("/route", json=routed, headers=bearer(key))
        decisions = [r.headers["x-banditgate-decision-id"] for r in (via_openai, via_route)]
        async with app.state.ctx.sessionmaker() as session:
            query = select(Attempt.error).where(Attempt.decision_id.in_(decisions))
            stored = list((await session.scalars(query)).all())
    # the backend did get the key, and echoed it
    assert [s.headers["authorization"] for s in fake.seen("echoheaders-401")] == [f"Bearer {backend_key}"] * 2
    message = via_openai.json()["error"]["message"]
    assert via_openai.status_code == 502 and message.startswith(f"backend '{echo}' answered 401 Unauthorized")
    detail = via_route.json()["detail"]
    assert via_route.status_code == 502 and detail.startswith(f"backend '{echo}' answered 401 Unauthorized")
    for answered in (via_openai.text, via_route.text):
        assert backend_key not in answered and "Bearer" not in answered and "rejected" not in answered
    # the log and the attempts table: a redacted excerpt of what the backend said
    assert len(stored) == 2 and all(
        "upstream:" in e and "[REDACTED]" in e and "rejected" in e for e in stored
    )
    logged = caplog.text
    assert "Bearer [REDACTED]" in logged and "rejected" in logged
    for kept in (*stored, logged):
        assert backend_key not in kept and ADMIN_KEY not in kept and SECRET_KEY not in kept
