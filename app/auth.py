"""API keys: tenant keys are random, shown once, stored as SHA-256; the admin key comes from settings."""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "bg_"


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def display_prefix(key: str) -> str:
    """The first characters of a key, safe to list so an operator can tell keys apart."""
    return key[:10]


def matches_secret(presented: str, secret: str | None) -> bool:
    """Whether ``presented`` is ``secret`` (compared in constant time); never when there is no secret."""
    return secret is not None and hmac.compare_digest(presented.encode(), secret.encode())


def is_admin_key(presented: str, admin_key: str | None) -> bool:
    return matches_secret(presented, admin_key)


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
