"""Time windows of the admin views: ``since``/``until`` query parameters and a bucket width.

Times are ISO 8601; one without a zone is taken as UTC, and each must lie in [``EARLIEST``, ``LATEST``]
(the range every database and the epoch arithmetic of the stats handle). A bucket width is a number of
seconds or a number with a unit: ``30s``, ``5m``, ``1h``, ``1d``, at most ``stats_max_bucket_s``. Every
mistake is a 422 that names the parameter. ``UtcTime`` is how every response states a time: with its
zone (UTC), on SQLite (which stores times without one) as on Postgres.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator, WithJsonSchema

from app.routing.errors import Invalid

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DEFAULT_SPAN = timedelta(hours=24)
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 1, 1, tzinfo=UTC)
_BUCKET = re.compile(r"^\s*(\d{1,12})\s*([smhd]?)\s*$")


def unprocessable(message: str, param: str | None = None) -> Invalid:
    return Invalid(message, param=param)


def as_utc(moment: datetime) -> datetime:
    """A zone-less time is UTC; an aware one is converted to UTC (SQLite stores UTC without a zone)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


ZONED_TIME = r"(Z|[+-][0-9]{2}:[0-9]{2})$"  # an ISO 8601 time that ends with its zone

UtcTime = Annotated[
    datetime,
    AfterValidator(as_utc),
    # The document says so, so a client (and the contract fuzz) can rely on the zone being there.
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": ZONED_TIME}),
]


def parse_time(name: str, value: str | None) -> datetime | None:
    """An ISO 8601 time in UTC; a 422 naming ``name`` when it is not one or lies outside the range."""
    if value is None or value == "":
        return None
    try:
        moment = as_utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except (ValueError, OverflowError) as exc:
        raise unprocessable(
            f"{name}={value!r} is not an ISO 8601 time (e.g. 2026-01-31T12:00:00Z)", name
        ) from exc
    return in_range(name, moment)


def in_range(name: str, moment: datetime) -> datetime:
    if not EARLIEST <= moment <= LATEST:
        raise unprocessable(
            f"{name}={moment.isoformat()} is outside {EARLIEST.isoformat()} .. {LATEST.isoformat()}", name
        )
    return moment


def parse_bucket(value: str, max_seconds: int) -> int:
    """Bucket width in whole seconds, from one second to ``max_seconds``."""
    match = _BUCKET.match(value)
    if match is None:
        raise unprocessable(
            f"bucket={value!r} must be seconds or a number with a unit s, m, h or d (e.g. 5m)", "bucket"
        )
    seconds = int(match.group(1)) * UNITS[match.group(2) or "s"]
    if seconds <= 0:
        raise unprocessable(f"bucket={value!r} must be at least one second", "bucket")
    if seconds > max_seconds:
        raise unprocessable(
            f"bucket={value!r} is {seconds} s; the widest is {max_seconds} s (BANDITGATE_STATS_MAX_BUCKET_S)",
            "bucket",
        )
    return seconds


@dataclass(frozen=True)
class Window:
    """``[since, until)`` in UTC."""

    since: datetime
    until: datetime


def parse_window(since: str | None, until: str | None, default_span: timedelta = DEFAULT_SPAN) -> Window:
    """``until`` defaults to now and ``since`` to ``until - default_span``; ``since`` must be earlier."""
    end = parse_time("until", until) or datetime.now(UTC)
    start = parse_time("since", since) or end - default_span
    if not start < end:
        raise unprocessable(
            f"since ({start.isoformat()}) must be earlier than until ({end.isoformat()})", "since"
        )
    return Window(start, end)


def optional_window(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    """Filters of the logs: either bound may be absent, but when both are given since < until."""
    start, end = parse_time("since", since), parse_time("until", until)
    if start is not None and end is not None and not start < end:
        raise unprocessable(
            f"since ({start.isoformat()}) must be earlier than until ({end.isoformat()})", "since"
        )
    return start, end


def bucket_starts(window: Window, bucket_s: int, max_buckets: int) -> list[int]:
    """Epoch seconds of every bucket that overlaps the window; buckets are aligned to the Unix epoch."""
    first = int(window.since.timestamp()) // bucket_s * bucket_s
    last = (int(window.until.timestamp() - 1e-6) // bucket_s) * bucket_s
    count = (last - first) // bucket_s + 1
    if count > max_buckets:
        raise unprocessable(
            f"{count} buckets of {bucket_s} s between since and until; the limit is {max_buckets}: "
            "use a wider bucket or a shorter range",
            "bucket",
        )
    return list(range(first, last + 1, bucket_s))
