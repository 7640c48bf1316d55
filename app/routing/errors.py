"""The request path's domain errors. Domain code raises these and knows nothing of HTTP; the one
handler in app/api/errors.py answers each with its status (and OpenAI's error shape under /v1)."""

from __future__ import annotations


class GatewayError(Exception):
    """A request the gateway refuses or cannot serve. ``param`` names the offending request field,
    ``decision_id`` the logged decision it concerns (sent back in ``x-banditgate-decision-id``)."""

    def __init__(self, message: str, *, param: str | None = None, decision_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.decision_id = decision_id


class NotFound(GatewayError):
    """A router, decision or backend that does not exist for this tenant (404)."""


class Invalid(GatewayError):
    """A request that cannot be served as it is (422; 400 under /v1)."""


class Conflict(GatewayError):
    """A tenant, backend, router or key that already exists, or a backend still in use (409)."""


class TooLarge(GatewayError):
    """A prompt, output text or batch above its configured limit (413)."""


class Declined(GatewayError):
    """The router's policy chose no model (503)."""


class BackendsFailed(GatewayError):
    """Every backend tried gave up (504 when all of them timed out, else 502)."""

    def __init__(self, message: str, *, decision_id: str, timed_out: bool) -> None:
        super().__init__(message, decision_id=decision_id)
        self.timed_out = timed_out


class RateLimited(GatewayError):
    """A key over its request rate or in-flight limit, or a client address over its failed-auth limit
    (429 with ``Retry-After``: ``retry_after_s`` rounded up to whole seconds)."""

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
