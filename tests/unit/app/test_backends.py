"""BackendClient on its own against the local fake backend server; backend key encryption; cost arithmetic."""

from __future__ import annotations

import base64
import time
from dataclasses import replace

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from app.backend_keys import SecretKeyMissing, decrypt_key, encrypt_key, fernet_for
from app.backends import PARSED_URLS, AttemptRecord, BackendClient, BackendFailure, Target
from app.routing.costs import usage_tokens
from app.settings import Settings
from tests.fake_backend import FakeBackends


def target(fake: FakeBackends, behaviour: str, timeout_s: float = 1.0) -> Target:
    return Target(behaviour, "chat", fake.url(behaviour), "up-model", "sk-1", timeout_s, 2.0, 8.0, 0.5)


async def test_retries_back_off_with_jitter_and_stop_on_client_errors(fake: FakeBackends) -> None:
    client = BackendClient(Settings(forward_max_retries=2, forward_backoff_s=0.1))
    try:
        attempts: list[AttemptRecord] = []
        start = time.perf_counter()
        with pytest.raises(BackendFailure) as failed:
            await client.call_json(
                target(fake, "status-503"), "/chat/completions", {"messages": []}, attempts
            )
        elapsed = time.perf_counter() - start
        # 3 tries; the waits are 0.1 * U(0.5, 1.5) and 0.2 * U(0.5, 1.5): at least 0.15 s, at most 0.45 s.
        assert fake.counts["status-503"] == 3 and [a.http_status for a in attempts] == [503, 503, 503]
        assert 0.15 <= elapsed < 0.45 + 1.0
        assert failed.value.outcome == "http_error" and "answered 503" in str(failed.value)

        attempts = []
        with pytest.raises(BackendFailure) as refused:
            await client.call_json(
                target(fake, "status-401"), "/chat/completions", {"messages": []}, attempts
            )
        assert fake.counts["status-401"] == 1 and not refused.value.retryable

        attempts = []
        with pytest.raises(BackendFailure) as slow:
            await client.call_json(target(fake, "hang", 0.2), "/chat/completions", {"messages": []}, attempts)
        assert slow.value.outcome == "timeout" and [a.outcome for a in attempts] == ["timeout"] * 3

        attempts = []
        answer = await client.call_json(
            target(fake, "ok"), "/chat/completions", {"model": "x", "n": 1}, attempts
        )
        seen = fake.seen("ok")[-1]
        assert answer["choices"][0]["message"]["content"] == "answer from ok"
        assert seen.body == {"model": "up-model", "n": 1} and seen.headers["authorization"] == "Bearer sk-1"
        assert [(a.outcome, a.http_status) for a in attempts] == [("ok", 200)]
    finally:
        await client.aclose()


def test_cost_and_usage_tokens() -> None:
    t = Target("m", "chat", "http://x", "m", None, 1.0, 2.0, 8.0, 0.5)
    assert t.cost(1_000_000, 500_000) == pytest.approx(2.0 + 4.0 + 0.5)
    assert usage_tokens({"prompt_tokens": 7, "completion_tokens": 3}, 999, 999) == (7, 3)
    assert usage_tokens({"input_tokens": 5, "output_tokens": 0}, 999, 999) == (5, 0)
    assert usage_tokens(None, 9, 8) == (3, 2)  # ceil(chars / 4)
    assert usage_tokens({"prompt_tokens": "7"}, 4, 0) == (1, 0)


def test_backend_keys_are_encrypted_and_need_the_same_secret() -> None:
    passphrase = fernet_for(SecretStr("correct horse battery staple"))
    token = encrypt_key(passphrase, "sk-live-123")
    assert "sk-live" not in token and decrypt_key(passphrase, token) == "sk-live-123"
    assert decrypt_key(passphrase, None) is None
    with pytest.raises(SecretKeyMissing):
        decrypt_key(fernet_for(SecretStr("another secret")), token)
    with pytest.raises(SecretKeyMissing):
        decrypt_key(None, token)
    with pytest.raises(SecretKeyMissing):
        encrypt_key(fernet_for(None), "sk-live-123")
    # A Fernet key given as the secret is used as is: tokens made with it directly decrypt.
    key = Fernet.generate_key()
    assert len(base64.urlsafe_b64decode(key)) == 32
    assert decrypt_key(fernet_for(SecretStr(key.decode())), Fernet(key).encrypt(b"sk-9").decode()) == "sk-9"


async def test_retry_after_is_honoured_up_to_a_limit(fake: FakeBackends) -> None:
    client = BackendClient(
        Settings(forward_max_retries=2, forward_backoff_s=0.01, forward_max_retry_after_s=5)
    )
    try:
        attempts: list[AttemptRecord] = []
        start = time.perf_counter()
        await client.call_json(target(fake, "retryafter-0.4"), "/chat/completions", {}, attempts)
        assert time.perf_counter() - start >= 0.4 and [a.http_status for a in attempts] == [429, 200]
        # Asked to wait longer than forward_max_retry_after_s: no retry, the gateway falls back at once.
        attempts = []
        with pytest.raises(BackendFailure) as failed:
            await client.call_json(target(fake, "retryafter-60"), "/chat/completions", {}, attempts)
        assert failed.value.retry_after == 60 and fake.counts["retryafter-60"] == 1
    finally:
        await client.aclose()


async def test_each_call_goes_to_its_own_backend_url_with_its_own_timeout(fake: FakeBackends) -> None:
    """Parsed URLs and timeouts are kept per client (``BackendClient._url``, ``_timeout``): two backends, called in
    turns, each get their own path and read timeout, and the store stays bounded."""
    client = BackendClient(Settings(forward_max_retries=0))
    try:
        ok, echo = target(fake, "ok", timeout_s=1.5), target(fake, "echo", timeout_s=2.5)
        for _ in range(2):
            for t in (ok, echo):
                await client.call_json(t, "/chat/completions", {"messages": []}, [])
        assert [s.path for s in fake.seen("ok")] == ["/ok/v1/chat/completions"] * 2
        assert [s.path for s in fake.seen("echo")] == ["/echo/v1/chat/completions"] * 2
        built = client._request(echo, "/images/generations", {})
        assert str(built.url) == fake.url("echo") + "/images/generations"
        assert built.extensions["timeout"] == {"connect": 2.5, "read": 2.5, "write": 2.5, "pool": 2.5}
        for i in range(PARSED_URLS + 5):
            client._request(replace(ok, base_url=f"http://127.0.0.1:9/b{i}/v1"), "/chat/completions", {})
        assert 0 < client._url.cache_info().currsize <= PARSED_URLS
    finally:
        await client.aclose()
