"""An ASGI app under uvicorn on 127.0.0.1 (a free port) on the running event loop: the judge of
``bench e2e`` and the tests' local servers."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn


class ServerError(RuntimeError):
    """The local server did not start."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def serving(app: Any, **options: Any) -> AsyncIterator[str]:
    """An ASGI app under uvicorn on 127.0.0.1 (a free port) on this event loop; yields its base URL.
    ``options`` go to ``uvicorn.Config`` (``banditgate serve``'s, say)."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        **{"log_level": "warning", "timeout_graceful_shutdown": 5, **options},
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 60
    while not server.started:
        if task.done():
            task.result()  # it failed to start: raise why
            raise ServerError(f"the server on port {port} stopped before it started")
        if time.monotonic() > deadline:
            task.cancel()
            raise ServerError(f"the server on port {port} did not start in 60 s")
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
