"""Backend API keys, encrypted at rest with Fernet (AES-128-CBC + HMAC-SHA256, from ``cryptography``).

The Fernet key is derived from ``BANDITGATE_SECRET_KEY``: a Fernet key itself (44 url-safe base64
characters) is used as is, any other string is hashed with SHA-256 into one. Without the setting the
gateway refuses to store backend keys (it never stores them in clear). Keys are decrypted only to build
the upstream ``Authorization`` header; they are never returned by the API nor logged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from pydantic import SecretStr


class SecretKeyMissing(RuntimeError):
    """Raised when a backend key must be stored or read but BANDITGATE_SECRET_KEY is not set."""


def fernet_for(secret: SecretStr | None) -> Fernet | None:
    if secret is None or not secret.get_secret_value():
        return None
    raw = secret.get_secret_value().encode("utf-8")
    try:
        if len(base64.urlsafe_b64decode(raw)) == 32 and len(raw) == 44:
            return Fernet(raw)
    except (binascii.Error, ValueError):
        pass
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(raw).digest()))


def encrypt_key(fernet: Fernet | None, api_key: str) -> str:
    if fernet is None:
        raise SecretKeyMissing("set BANDITGATE_SECRET_KEY to store backend API keys (they are encrypted)")
    return fernet.encrypt(api_key.encode("utf-8")).decode("ascii")


def decrypt_key(fernet: Fernet | None, token: str | None) -> str | None:
    """The clear key, or None when the backend has none. Raises SecretKeyMissing when a key is stored but
    cannot be decrypted (no secret key, or a different one): the call must not go out unauthenticated."""
    if token is None:
        return None
    if fernet is None:
        raise SecretKeyMissing("a backend API key is stored but BANDITGATE_SECRET_KEY is not set")
    try:
        return fernet.decrypt(token.encode("ascii")).decode("utf-8")
    except InvalidToken as exc:
        raise SecretKeyMissing(
            "a stored backend API key does not decrypt with BANDITGATE_SECRET_KEY"
        ) from exc
