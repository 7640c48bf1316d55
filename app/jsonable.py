"""Turn policy output (numpy scalars and arrays, infinities) into plain JSON values."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np


def jsonable(value: Any) -> Any:
    """numpy -> Python, non-finite floats -> None (JSON has no infinity), recursively."""
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")
DEEPER = "…"  # what ``readable`` shows in place of a container nested deeper than it may show


def readable_text(value: str) -> str:
    """``value`` with each lone UTF-16 surrogate replaced by U+FFFD, so it can be encoded as UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", value)
    return value


def readable(value: Any, max_depth: int, max_items: int | None = None, max_chars: int | None = None) -> Any:
    """A JSON value made safe to answer with, whatever was stored before input was checked or a client
    sent: lone surrogates replaced (``readable_text``), non-finite numbers as null, containers nested
    deeper than ``max_depth`` shown as ``DEEPER``, anything that is not JSON as its text; optionally
    only the first ``max_items`` of each container and ``max_chars`` of each string."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping | list | tuple):
        if max_depth <= 0:
            return DEEPER
        if isinstance(value, Mapping):
            pairs = list(value.items())[:max_items]
            return {
                readable(str(k), 0, max_items, max_chars): readable(v, max_depth - 1, max_items, max_chars)
                for k, v in pairs
            }
        return [readable(v, max_depth - 1, max_items, max_chars) for v in list(value)[:max_items]]
    text = readable_text(str(value))
    return text if max_chars is None or len(text) <= max_chars else text[:max_chars] + DEEPER
