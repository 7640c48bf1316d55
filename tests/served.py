"""An ASGI app under a real uvicorn server on 127.0.0.1 (a free port), on the test's event loop
(real sockets, so disconnects are real)."""

from __future__ import annotations

from bench.local_server import free_port, serving

served = serving

__all__ = ["free_port", "served"]
