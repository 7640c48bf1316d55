"""Settings from the environment, key handling, and the request schemas' validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from app.api.errors import is_openai_path
from app.auth import bearer_token, display_prefix, hash_key, is_admin_key, new_api_key
from app.events import CatalogChanged, FeedbackMessage, RouterChanged, decode_message, encode_message
from app.jsonable import jsonable
from app.schemas import FeedbackRequest, RouterCreate, RouteRequest, TenantLimits
from app.settings import RATE_LIMIT_MAX, Settings
from app.store.models import Backend
from routers.base import KeyedRng, decision_rng, generator_key
from routers.prices import call_cost


def test_settings_read_env_and_normalise_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BANDITGATE_DATABASE_URL", "postgresql://u@h:5432/db")
    monkeypatch.setenv("BANDITGATE_REDIS_URL", "redis://127.0.0.1:6379/2")
    monkeypatch.setenv("BANDITGATE_MAX_PROMPT_CHARS", "123")
    monkeypatch.setenv("BANDITGATE_ADMIN_KEY", "s3cret")
    s = Settings()
    assert s.database_url == "postgresql+asyncpg://u@h:5432/db"
    assert s.redis_url == "redis://127.0.0.1:6379/2" and s.max_prompt_chars == 123
    assert s.admin_key is not None and s.admin_key.get_secret_value() == "s3cret" and "s3cret" not in repr(s)
    monkeypatch.setenv("BANDITGATE_MAX_PROMPT_CHARS", "0")
    with pytest.raises(ValidationError):
        Settings()


def test_defaults_run_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BANDITGATE_DATABASE_URL", "BANDITGATE_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert s.database_url.startswith("sqlite+aiosqlite:///") and s.redis_url is None


def test_keys() -> None:
    key = new_api_key()
    assert key.startswith("bg_") and len(key) > 40 and new_api_key() != key
    assert hash_key(key) == hash_key(key) and len(hash_key(key)) == 64 and key not in hash_key(key)
    assert display_prefix(key) == key[:10]
    assert is_admin_key("abc", "abc") and not is_admin_key("abc", "abd") and not is_admin_key("abc", None)
    assert bearer_token("Bearer  tok ") == "tok" and bearer_token("bearer tok") == "tok"
    assert (
        bearer_token("Basic tok") is None and bearer_token("Bearer ") is None and bearer_token(None) is None
    )


def test_route_request_text() -> None:
    assert RouteRequest(prompt="hi").text() == "hi"
    msgs = RouteRequest(
        messages=[
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {}}],
            },
        ]
    )  # type: ignore[list-item]
    assert msgs.text() == "be brief\nlook"
    with pytest.raises(ValidationError, match="exactly one"):
        RouteRequest()


@pytest.mark.parametrize("reward", [math.nan, math.inf, -math.inf])
def test_feedback_rejects_non_finite(reward: float) -> None:
    with pytest.raises(ValidationError, match="finite"):
        FeedbackRequest(decision_id="d", reward=reward)


def test_feedback_needs_content_and_router_range_is_ordered() -> None:
    with pytest.raises(ValidationError, match="at least one"):
        FeedbackRequest(decision_id="d")
    assert FeedbackRequest(decision_id="d", cost=0.5).kind == "bandit"
    with pytest.raises(ValidationError, match="lo < hi"):
        RouterCreate(name="r", policy="linucb", arms=["a"], reward_range=[1.0, 1.0])


def test_call_cost_is_tokens_times_prices_plus_per_call() -> None:
    backend = Backend(usd_per_mtok_in=10.0, usd_per_mtok_out=30.0, usd_per_call=0.002)
    # 1000 in x 10/1e6 + 500 out x 30/1e6 + 0.002 = 0.01 + 0.015 + 0.002
    assert call_cost(backend, 1000, 500) == pytest.approx(0.027)


def test_a_decisions_generator_depends_on_seed_and_decision_only() -> None:
    def gateway_rng(seed: int, decision_id: str) -> KeyedRng:  # as app/routing/decide.py builds it
        return KeyedRng(seed, generator_key(decision_id))

    a = gateway_rng(7, "ab" * 16)().random(3)
    assert np.array_equal(a, gateway_rng(7, "ab" * 16)().random(3))
    assert not np.array_equal(a, gateway_rng(8, "ab" * 16)().random(3))
    assert not np.array_equal(a, gateway_rng(7, "cd" * 16)().random(3))
    # the same numbers as the simulator's generator of the same key: the decision id's first 64 bits
    assert np.array_equal(a, decision_rng(7, int("ab" * 8, 16)).random(3))


def test_messages_round_trip() -> None:
    msg = FeedbackMessage(1, 2, "d", "m", "query", 0.5, None, np.arange(4, dtype=np.float32), {"k": [1]})
    back = decode_message(encode_message(msg))
    assert isinstance(back, FeedbackMessage)
    assert (back.event_id, back.model, back.kind, back.reward, back.cost, back.payload) == (
        1,
        "m",
        "query",
        0.5,
        None,
        {"k": [1]},
    )
    assert np.array_equal(back.embedding, msg.embedding)
    assert decode_message(encode_message(RouterChanged(3, 9))) == RouterChanged(3, 9)
    revoked = CatalogChanged("key 4 revoked")
    assert decode_message(encode_message(revoked)) == revoked


def test_jsonable() -> None:
    assert jsonable({"a": np.float32(1.5), "b": [np.inf, np.int64(2)], "c": np.array([1.0, np.nan])}) == {
        "a": 1.5,
        "b": [None, 2],
        "c": [1.0, None],
    }


@pytest.mark.parametrize("field", ["rate_limit_rps", "rate_limit_burst", "rate_limit_concurrency"])
def test_a_tenants_rate_limits_have_the_settings_bounds(field: str) -> None:
    """One bound (RATE_LIMIT_MAX) for the server's defaults and a tenant's own values."""
    assert getattr(TenantLimits(**{field: RATE_LIMIT_MAX}), field) == RATE_LIMIT_MAX
    assert getattr(Settings(**{field: RATE_LIMIT_MAX}), field) == RATE_LIMIT_MAX  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=f"less than or equal to {RATE_LIMIT_MAX}"):
        TenantLimits(**{field: RATE_LIMIT_MAX + 1})
    with pytest.raises(ValidationError, match=f"less than or equal to {RATE_LIMIT_MAX}"):
        Settings(**{field: RATE_LIMIT_MAX + 1})  # type: ignore[arg-type]


def test_openai_paths() -> None:
    assert is_openai_path("/v1") and is_openai_path("/v1/chat/completions")
    assert not is_openai_path("/v10/models") and not is_openai_path("/route")
