"""The FastAPI internals app/api/lean.py calls, pinned by signature.

``request_body_to_args``, ``serialize_response`` and ``DefaultPlaceholder`` are not public API: a FastAPI
release may rename, reorder or add a required parameter to them without notice. tests/integration/
test_lean_routes.py proves lean answers equal FastAPI's own; this test names the symbol that moved, so an
upgrade that breaks one fails here first, by name. When it fails, read the new signature, adapt
app/api/lean.py's call and update the pin below.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from fastapi.datastructures import DefaultPlaceholder
from fastapi.dependencies.utils import request_body_to_args
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, serialize_response

P = inspect.Parameter
REQUIRED = P.empty  # marks a parameter without a default below


def shape(function: Callable[..., Any]) -> list[tuple[str, str, bool]]:
    """(name, kind, has a default) of each parameter, in order."""
    return [
        (p.name, p.kind.name, p.default is not REQUIRED)
        for p in inspect.signature(function).parameters.values()
    ]


def test_request_body_to_args_signature() -> None:
    assert inspect.iscoroutinefunction(request_body_to_args)
    assert shape(request_body_to_args) == [
        ("body_fields", "POSITIONAL_OR_KEYWORD", False),
        ("received_body", "POSITIONAL_OR_KEYWORD", False),
        ("embed_body_fields", "POSITIONAL_OR_KEYWORD", False),
    ]


def test_serialize_response_signature() -> None:
    assert inspect.iscoroutinefunction(serialize_response)
    assert shape(serialize_response) == [
        ("field", "KEYWORD_ONLY", True),
        ("response_content", "KEYWORD_ONLY", False),
        ("include", "KEYWORD_ONLY", True),
        ("exclude", "KEYWORD_ONLY", True),
        ("by_alias", "KEYWORD_ONLY", True),
        ("exclude_unset", "KEYWORD_ONLY", True),
        ("exclude_defaults", "KEYWORD_ONLY", True),
        ("exclude_none", "KEYWORD_ONLY", True),
        ("is_coroutine", "KEYWORD_ONLY", True),
        ("endpoint_ctx", "KEYWORD_ONLY", True),
        ("dump_json", "KEYWORD_ONLY", True),
    ]


def test_default_placeholder_signature_and_what_lean_reads_of_it() -> None:
    assert shape(DefaultPlaceholder.__init__) == [
        ("self", "POSITIONAL_OR_KEYWORD", False),
        ("value", "POSITIONAL_OR_KEYWORD", False),
    ]
    assert DefaultPlaceholder(JSONResponse).value is JSONResponse

    async def endpoint() -> None: ...

    # lean tells a route's own response class from FastAPI's default by this placeholder
    route = APIRoute("/x", endpoint)
    assert isinstance(route.response_class, DefaultPlaceholder)
    assert route.response_class.value is JSONResponse
    assert not isinstance(
        APIRoute("/x", endpoint, response_class=JSONResponse).response_class, DefaultPlaceholder
    )
