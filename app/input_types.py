"""Types of untrusted input: text, names and URLs, free-form JSON, and the integers that reach the database.

Every string a client sends is ``Text``: valid Unicode without NUL. A lone UTF-16 surrogate (``"\\ud800"``
in JSON) cannot be encoded as UTF-8, so it cannot be stored in Postgres, hashed, forwarded or answered; a
NUL is refused by Postgres text columns. Names and URLs also carry the length of their column
(app/store/models.py), so an over-long one is a 422 that names the field on every database, never a 500
(Postgres) nor a silent store (SQLite does not enforce ``VARCHAR(n)``).

Free-form JSON (``metadata``, forwarded request bodies, router state imports) is checked by ``check_json``
before anything stores or forwards it: nesting depth, finite numbers only (Python's JSON parser accepts
``NaN`` and ``Infinity``, which no JSON reader does), every string and key ``Text`` (all 422s), and the
compact JSON size of a ``metadata`` value (a 413, like every size refusal). The limits are settings
(``JsonLimits.of``); the request limits middleware (app/api/http_limits.py) puts the app's own into
``current_limits()`` for each request, so a model's validator reads the configured limits without a
request object; outside a request the settings' defaults apply.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, StringConstraints

from app.routing.errors import TooLarge
from app.settings import SettingsView
from routers.hyperparameters import MAX_NAME

BIGINT_MAX = 2**63 - 1  # the largest id, seed or cursor a BIGINT column holds (Postgres and SQLite)

# Column widths of app/store/models.py that client input lands in.
TENANT_NAME_CHARS = 100
ROUTER_NAME_CHARS = 100
BACKEND_NAME_CHARS = MAX_NAME  # a backend is an arm: routers/hyperparameters.py bounds its name
KEY_NAME_CHARS = 100
POLICY_CHARS = 100
MODEL_CHARS = MAX_NAME  # feedback.model, attempts.model, probes.model: a backend name
ROW_ID_CHARS = MAX_NAME  # feedback.row_id: an uploaded warm-start row's id
DECISION_ID_BOUND = 64  # ids are 32 characters; a longer bound keeps an unknown one a 404
URL_CHARS = 2000  # Text columns; a bound on what a client may configure
SECRET_CHARS = 4096  # a backend API key (stored encrypted in a Text column)
ROLE_CHARS = 50


def text_problem(value: str) -> str | None:
    """Why ``value`` is not acceptable text (None when it is)."""
    if "\x00" in value:
        return f"contains a NUL character (U+0000) at position {value.index(chr(0))}"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"contains a lone UTF-16 surrogate (U+{ord(value[exc.start]):04X}) at position {exc.start}: "
            "not valid Unicode"
        )
    return None


def check_text(value: str) -> str:
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


Text = Annotated[str, AfterValidator(check_text)]
"""Any client string: valid Unicode (no lone surrogates) without NUL."""


def _text(max_length: int, min_length: int = 0, pattern: str | None = None) -> StringConstraints:
    return StringConstraints(min_length=min_length, max_length=max_length, pattern=pattern)


_TEXT = AfterValidator(check_text)
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"
URL_PATTERN = r"^https?://"
TenantName = Annotated[str, _text(TENANT_NAME_CHARS, 1, NAME_PATTERN), _TEXT]
RouterName = Annotated[str, _text(ROUTER_NAME_CHARS, 1, NAME_PATTERN), _TEXT]
BackendName = Annotated[str, _text(BACKEND_NAME_CHARS, 1, NAME_PATTERN), _TEXT]
ModelName = Annotated[str, _text(MODEL_CHARS, 1), _TEXT]
"""A backend a client names (feedback, candidates): what the columns of a model name hold."""
UpstreamModel = Annotated[str, _text(BACKEND_NAME_CHARS), _TEXT]
PolicyName = Annotated[str, _text(POLICY_CHARS, 1), _TEXT]
KeyName = Annotated[str, _text(KEY_NAME_CHARS), _TEXT]
DecisionId = Annotated[str, _text(DECISION_ID_BOUND, 1), _TEXT]
URL_SCHEMES = ("http", "https")


def url_problem(value: str) -> str | None:
    """Why ``value`` is not a URL the gateway may call (None when it is): every character printable
    (no whitespace, no control character: a newline would let one URL smuggle another), a scheme of
    ``URL_SCHEMES``, a host, and a well-formed authority (an IPv6 literal closed, a numeric port)."""
    for position, char in enumerate(value):
        if ord(char) <= 0x20 or 0x7F <= ord(char) <= 0x9F:
            kind = "whitespace" if char.isspace() else "a control character"
            return f"contains {kind} (U+{ord(char):04X}) at position {position}"
    try:
        parts = urlsplit(value)
        _ = parts.port  # a port that is not a number raises here
    except ValueError as exc:
        return f"is not a valid URL: {exc}"
    if parts.scheme.lower() not in URL_SCHEMES:
        return "must be an http:// or https:// URL"
    if not parts.hostname:
        return "has no host"
    return None


def check_url(value: str) -> str:
    problem = url_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


HttpUrl = Annotated[str, _text(URL_CHARS, 1, URL_PATTERN), _TEXT, AfterValidator(check_url)]
"""A URL the gateway calls (a backend's, a judge's): http or https, with a host (``url_problem``)."""
Secret = Annotated[str, _text(SECRET_CHARS, 1), _TEXT]
Role = Annotated[str, _text(ROLE_CHARS, 1), _TEXT]

DbInt = Annotated[int, Field(ge=0, le=BIGINT_MAX)]
"""A non-negative integer that fits a BIGINT column (ids, seeds, cursors)."""


# --- free-form JSON -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class JsonLimits(SettingsView):
    """How deep any free-form JSON may be, and how large a ``metadata`` value (compact UTF-8 JSON bytes).
    A forwarded body or a state import has no size limit of its own: the request body's (app/api/
    http_limits.py) bounds it."""

    json_max_depth: int
    metadata_max_bytes: int


DEFAULT_LIMITS = JsonLimits.of()
_current: ContextVar[JsonLimits | None] = ContextVar("banditgate_json_limits", default=None)


def current_limits() -> JsonLimits:
    """The limits of the app serving this request (the settings' defaults outside one)."""
    return _current.get() or DEFAULT_LIMITS


@contextmanager
def limits_in_force(limits: JsonLimits) -> Iterator[None]:
    """``current_limits()`` is ``limits`` inside (the request limits middleware enters it per request)."""
    token = _current.set(limits)
    try:
        yield
    finally:
        _current.reset(token)


class JsonTooLarge(TooLarge):
    """A JSON value over its size limit: a 413, like every size refusal (pydantic passes it through)."""


def _where(path: list[str | int]) -> str:
    """``at a.b[2]: `` for a place inside a value, nothing for the value itself."""
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return f"at {where}: " if where else ""


def check_json(value: Any, max_depth: int, max_bytes: int | None = None, setting: str = "") -> None:
    """Raise ValueError naming the first problem: nested deeper than ``max_depth`` (a scalar at the top
    is depth 0, ``{"a": 1}`` depth 1), a non-finite number, a key or string that is not ``Text``, or a
    value that is not JSON; then ``JsonTooLarge`` when ``max_bytes`` is given and the value has more
    compact JSON than that (``setting`` is the environment variable to name)."""
    stack: list[tuple[Any, int, list[str | int]]] = [(value, 0, [])]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, dict | list):
            if depth + 1 > max_depth:
                raise ValueError(
                    f"{_where(path)}nested deeper than {max_depth} levels "
                    "(the limit is BANDITGATE_JSON_MAX_DEPTH)"
                )
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise ValueError(f"{_where(path)}key {key!r} is not a string")
                    problem = text_problem(key)
                    if problem is not None:
                        raise ValueError(f"{_where(path)}a key {problem}")
                    stack.append((child, depth + 1, [*path, key]))
            else:
                stack.extend((child, depth + 1, [*path, i]) for i, child in enumerate(item))
        elif isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                raise ValueError(f"{_where(path)}{problem}")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(f"{_where(path)}{item}: only finite numbers are JSON (no NaN or Infinity)")
        elif not (item is None or isinstance(item, bool | int)):
            raise ValueError(f"{_where(path)}a {type(item).__name__} is not a JSON value")
    if max_bytes is None:
        return
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    if size > max_bytes:
        raise JsonTooLarge(f"{size} bytes of JSON; the limit is {max_bytes} ({setting})")


def _metadata(value: Any) -> Any:
    limits = current_limits()
    check_json(value, limits.json_max_depth, limits.metadata_max_bytes, "BANDITGATE_METADATA_MAX_BYTES")
    return value


def check_forwarded(value: Any) -> Any:
    """``value`` (a body to forward or import, or part of one) when it is JSON within the depth limit;
    its size is bounded by the request body's limit."""
    check_json(value, current_limits().json_max_depth)
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_metadata)]
"""Client metadata stored with a decision or feedback event."""

ForwardBody = Annotated[dict[str, Any], AfterValidator(check_forwarded)]
"""An OpenAI-style request body forwarded to a backend."""

StateUpload = Annotated[dict[str, Any], AfterValidator(check_forwarded)]
"""A router state import (a bulk upload: its body's own, larger limit)."""

HyperparameterValues = Annotated[dict[str, Any], AfterValidator(check_forwarded)]
"""A router's hyperparameters as a client sends them: JSON within the depth limit, checked before the
policy's own validation walks it (recursively)."""
