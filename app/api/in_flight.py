"""How many HTTP requests this process is serving now: a pure ASGI middleware counts them.

The SQLite ledger's inline path asks (app/store/ledger_sqlite.py): a write is committed on the event
loop only while this process serves at most the request that makes it. Under concurrent load the
writer's thread keeps the group commit and runs SQLite off the loop (measured with bench gateway,
docs/benchmarks.md).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class RequestsInFlight:
    """The count, shared by the middleware that keeps it and whoever asks."""

    def __init__(self) -> None:
        self.count = 0

    def more_than_one(self) -> bool:
        return self.count > 1


class CountInFlight:
    """Counts each HTTP request from its arrival until its response is sent (or it fails)."""

    def __init__(self, app: ASGIApp, in_flight: RequestsInFlight) -> None:
        self.app = app
        self.in_flight = in_flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.in_flight.count += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight.count -= 1
