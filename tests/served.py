"""An ASGI app under a real uvicorn server on 127.0.0.1 (a free port): on the test's event loop
(``served``: real sockets, so disconnects are real), or on its own loop in a thread (``served_in_thread``:
for a synchronous client such as schemathesis')."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from bench.local_server import free_port, serving

served = serving


@contextmanager
def served_in_thread(app: Any, start_timeout_s: float = 60.0) -> Iterator[str]:
    """``app`` (lifespan included) under uvicorn in a thread with its own event loop; yields its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(server.serve())
        except BaseException as exc:  # reported to the test below
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"gateway-{port}", daemon=True)
    thread.start()
    waited = 0.0
    while not server.started:
        if failure or not thread.is_alive():
            raise RuntimeError(f"the gateway on port {port} stopped before it started") from (
                failure[0] if failure else None
            )
        if waited > start_timeout_s:
            raise RuntimeError(f"the gateway on port {port} did not start in {start_timeout_s} s")
        threading.Event().wait(0.05)
        waited += 0.05
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


__all__ = ["free_port", "served", "served_in_thread"]
