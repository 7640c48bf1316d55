"""What a limiter enforces and the interface both limiters share.

Per API key: ``rate`` requests per second with bursts of ``burst`` (a token bucket) and at most
``concurrency`` requests in flight; the tenant's own values (``tenants.rate_limit_*``, set through
``PUT /admin/tenants/{tenant}/limits``) or, where NULL, the settings' defaults. Per client address: a
bucket of ``auth_failure_limit`` failed authentications refilled over ``auth_failure_window_s``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.routing.errors import RateLimited
from app.settings import Settings
from app.store.models import Tenant

# An in-flight refusal cannot know when a slot frees: ask for the shortest Retry-After there is.
IN_FLIGHT_RETRY_AFTER_S = 1.0


@dataclass(frozen=True)
class KeyLimits:
    rate: float  # tokens per second
    burst: int  # bucket size
    concurrency: int  # requests in flight

    def over_rate(self, retry_after_s: float) -> RateLimited:
        return RateLimited(
            f"rate limit exceeded for this API key: {self.rate:g} requests per second, bursts of "
            f"{self.burst}; retry in {retry_after_s:.3g} s",
            retry_after_s=retry_after_s,
        )

    def over_concurrency(self) -> RateLimited:
        return RateLimited(
            f"too many requests in flight for this API key: at most {self.concurrency} at once",
            retry_after_s=IN_FLIGHT_RETRY_AFTER_S,
        )


@dataclass(frozen=True)
class AuthFailureLimits:
    rate: float  # failures forgiven per second
    burst: int  # failures in a row before the address is refused

    @staticmethod
    def refusal(retry_after_s: float) -> RateLimited:
        return RateLimited(
            f"too many failed authentications from this address; no key is checked for {retry_after_s:.3g} s",
            retry_after_s=retry_after_s,
        )


@dataclass(frozen=True)
class Slot:
    """An admitted request's in-flight slot; released when the response has been sent."""

    key: str
    token: str


def key_limits(tenant: Tenant, settings: Settings) -> KeyLimits:
    """The limits of each of ``tenant``'s keys: its own where set, the settings' defaults elsewhere."""
    return KeyLimits(
        rate=tenant.rate_limit_rps if tenant.rate_limit_rps is not None else settings.rate_limit_rps,
        burst=tenant.rate_limit_burst if tenant.rate_limit_burst is not None else settings.rate_limit_burst,
        concurrency=tenant.rate_limit_concurrency
        if tenant.rate_limit_concurrency is not None
        else settings.rate_limit_concurrency,
    )


def auth_failure_limits(settings: Settings) -> AuthFailureLimits:
    return AuthFailureLimits(
        rate=settings.auth_failure_limit / settings.auth_failure_window_s, burst=settings.auth_failure_limit
    )


class RateLimiter(Protocol):
    async def admit(self, key: str, limits: KeyLimits) -> Slot:
        """Take a token and an in-flight slot for ``key``; raises ``RateLimited`` (and takes neither)
        when the bucket is empty or every slot is held."""
        ...

    async def admit_from(self, address: str, key: str, limits: KeyLimits) -> Slot:
        """``check_address(address)`` then ``admit(key, limits)`` as one step (one Redis round trip), for
        a key already known to be valid: the order of the address check and the key's lookup matters
        only when the lookup reads the database."""
        ...

    async def release(self, slot: Slot) -> None:
        """Give back an admitted request's slot (never raises); the next admission of its key in this
        process sees it free."""
        ...

    async def close(self) -> None:
        """Give back, before shutdown, the slots released but not yet sent to a shared store."""
        ...

    async def check_address(self, address: str) -> None:
        """Raises ``RateLimited`` while ``address`` is over its failed-auth budget."""
        ...

    async def count_failure(self, address: str) -> None:
        """Count one failed authentication from ``address``."""
        ...
