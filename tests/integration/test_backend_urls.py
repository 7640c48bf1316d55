"""Backend URLs are http or https, with a host, without whitespace or control characters: the admin API
refuses any other with a 422 naming ``base_url``, and a URL stored before that check fails its calls
(a 502 naming the backend), never the request (a 500)."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from app.input_types import url_problem
from app.main import create_app
from app.store.models import Backend
from tests.conftest import Stack, admin_headers, bearer, make_tenancy, running, unique

BAD_URLS = [
    "http://\nfile:///etc/passwd",
    "http://[",
    "ftp://x",
    "http:///nohost",
    "http://a b/v1",
    "http://h:port/",
]


async def test_the_admin_api_refuses_bad_backend_urls_naming_the_field(stack: Stack) -> None:
    async with running(create_app(stack.settings())) as client:
        existing = unique("m")
        created = {"name": existing, "base_url": "http://127.0.0.1:9/v1"}
        assert (
            await client.post("/admin/backends", json=created, headers=admin_headers())
        ).status_code == 201
        for url in BAD_URLS:
            body = {"name": unique("m"), "base_url": url}
            response = await client.post("/admin/backends", json=body, headers=admin_headers())
            assert response.status_code == 422, (url, response.text)
            assert response.json()["detail"][0]["loc"] == ["body", "base_url"], (url, response.text)
            patched = await client.patch(
                f"/admin/backends/{existing}", json={"base_url": url}, headers=admin_headers()
            )
            assert patched.status_code == 422, (url, patched.text)
            assert patched.json()["detail"][0]["loc"] == ["body", "base_url"], (url, patched.text)
        listed = await client.get("/admin/backends", headers=admin_headers())
        assert all(url_problem(b["base_url"]) is None for b in listed.json())


@pytest.mark.parametrize("url", ["http://\nfile:///etc/passwd", "http://["])
async def test_a_bad_stored_url_fails_the_call_not_the_request(sqlite_stack: Stack, url: str) -> None:
    app = create_app(sqlite_stack.settings(forward_max_retries=0, forward_max_fallbacks=0))
    async with running(app) as client:
        t = await make_tenancy(client, n_arms=1)
        async with app.state.ctx.sessionmaker() as session:  # as a row written before the check
            await session.execute(update(Backend).where(Backend.name == t.arms[0]).values(base_url=url))
            await session.commit()
        app.state.ctx.catalog.clear()
        chat = {"model": "router", "messages": [{"role": "user", "content": "hi"}]}
        response = await client.post("/v1/chat/completions", json=chat, headers=bearer(t.key))
        assert response.status_code == 502, response.text
        assert "base_url" in response.json()["error"]["message"]
        routed = {"prompt": "hi", "forward": True, "request": {"messages": chat["messages"]}}
        response = await client.post("/route", json=routed, headers=bearer(t.key))
        assert response.status_code == 502, response.text
        assert "base_url" in response.json()["detail"]


def test_url_problems_name_what_is_wrong() -> None:
    assert url_problem("http://\nfile:///etc/passwd") == "contains whitespace (U+000A) at position 7"
    assert url_problem("http://x\x7f/") == "contains a control character (U+007F) at position 8"
    assert url_problem("http://[") == "is not a valid URL: Invalid IPv6 URL"
    assert url_problem("ftp://x") == "must be an http:// or https:// URL"
    assert url_problem("http:///nohost") == "has no host"
    assert url_problem("https://api.example.com/v1") is None
    assert url_problem("http://[::1]:8000/v1") is None
