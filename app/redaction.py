"""Redaction of secrets from text that is logged or stored (an upstream backend's error body, a
connection error's message), before it is cut to an excerpt.

Two passes, both pure:

1. every configured secret (backend API keys, the admin key, the secret key, the metrics token, the
   replay backends' key) is replaced wherever it occurs, also in its JSON-escaped and URL-encoded forms;
   secrets shorter than ``MIN_SECRET_CHARS`` are skipped (replacing every ``a`` would hide the text and
   protect nothing);
2. anything shaped like a credential is replaced whether or not it is configured: ``Bearer``/``Basic``
   credentials, ``key=value`` pairs whose name says key, token, secret, password or authorization,
   ``user:password@`` in URLs, OpenAI-style ``sk-...`` keys and this gateway's ``bg_...`` tenant keys,
   and long hexadecimal or base64-like runs (32 characters or more with letters and digits mixed).

Redaction runs before truncation, so no secret can survive by being cut in half.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from urllib.parse import quote

PLACEHOLDER = "[REDACTED]"
MIN_SECRET_CHARS = 4

_SECRET_NAME = (
    r"(?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|token|secret|password|passwd|authorization)"
)
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # "Authorization: Bearer x", "bearer=x": keep the scheme, hide the credential
    (re.compile(r"(?i)\b(bearer|basic)(\s+|=)[A-Za-z0-9._~+/=-]+"), rf"\1\2{PLACEHOLDER}"),
    # "api_key": "x", token=x, "authorization": "x y": keep the name, hide the value
    (
        re.compile(
            rf"""(?i)(["']?\b[\w-]*{_SECRET_NAME}["']?\s*[:=]\s*["']?)(?!{re.escape(PLACEHOLDER)}|(?:bearer|basic)\s)([^\s"',;&}}]+)"""
        ),
        rf"\1{PLACEHOLDER}",
    ),
    (re.compile(r"(?i)(://)[^/\s:@]+:[^/\s@]+@"), rf"\1{PLACEHOLDER}@"),  # credentials in a URL
    (re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}"), PLACEHOLDER),  # OpenAI-style keys
    (re.compile(r"\b(?:bg|adm)_[A-Za-z0-9_-]{16,}"), PLACEHOLDER),  # this gateway's tenant and admin keys
    (re.compile(r"\b[A-Fa-f0-9]{32,}\b"), PLACEHOLDER),  # hex digests and keys
    # base64-like runs with digits and letters of both cases (a long word or a path is not one)
    (
        re.compile(
            r"(?<![A-Za-z0-9+/_=-])(?=[A-Za-z0-9+/_=-]*\d)(?=[A-Za-z0-9+/_=-]*[a-z])"
            r"(?=[A-Za-z0-9+/_=-]*[A-Z])[A-Za-z0-9+/_-]{32,}={0,2}"
        ),
        PLACEHOLDER,
    ),
)


def _forms(secret: str) -> set[str]:
    """The ways a secret may appear in a body: as is, JSON-escaped, URL-encoded."""
    return {secret, json.dumps(secret)[1:-1], quote(secret, safe="")}


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every configured secret and every credential-shaped token replaced by
    ``PLACEHOLDER``."""
    forms = {form for secret in secrets if len(secret) >= MIN_SECRET_CHARS for form in _forms(secret)}
    for form in sorted(forms, key=len, reverse=True):  # longest first: a secret containing another
        text = text.replace(form, PLACEHOLDER)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redacted_excerpt(text: str, limit: int, secrets: Iterable[str] = ()) -> str:
    """``text`` redacted, its whitespace collapsed, cut to ``limit`` characters (``...`` when cut)."""
    text = " ".join(redact(text, secrets).split())
    return text if len(text) <= limit else text[:limit] + "..."
