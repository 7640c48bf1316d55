"""The modules one chat request's body passes through, and how often it comes back to one it had
left: ``python -m experiments.request_trace``.

The app runs in this process on a fresh SQLite database with the hashing embedder; its backend
client answers from an ``httpx.MockTransport`` with a fixed completion. After a few warm-up requests
(caches filled), one ``POST /v1/chat/completions`` is traced with ``sys.setprofile``: every call and
return of a function of this project (app/, routers/, embeddings/) on the request's own stack, from
``app.api.openai.chat_completions`` down (the dependencies resolved before it, background tasks and
the ledger's thread are not its body). The path is the sequence of modules the request is in, event
by event (a call enters the callee's module, a return goes back to the caller's), repeats collapsed.

- modules: the modules the body passes through: those it goes on from to a module other than the one
  it came from (a helper it calls and that returns to its caller, a leaf, is visited, not passed
  through);
- returns: the calls into a module the body had been in and left before, through which it passes
  again (``costs`` calling into ``decide`` for the pending decision's write after ``forward`` left
  ``decide``, say). Returning to one's caller is not one, nor is a call of a helper that returns at
  once: a straight line down and back counts none.

``--path`` prints the path itself, one module a line. experiments/ is not packaged and may import app/.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from app.api import openai
from app.backends import CookielessClient
from app.main import create_app
from app.settings import Settings
from app.store.migrate import upgrade
from experiments.forward_cpu import ADMIN, upstream

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("app", "routers", "embeddings")
BODY = {"model": "router", "messages": [{"role": "user", "content": "What is the capital of France?"}]}
ENTRY = openai.chat_completions.__code__


def module_of(filename: str) -> str | None:
    """``app.routing.decide`` for a file of this project's packages, else None."""
    try:
        relative = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if relative.parts[0] not in PROJECT:
        return None
    return ".".join(relative.with_suffix("").parts).removesuffix(".__init__")


@dataclass
class Trace:
    """The modules the request was in, event by event, repeats collapsed (``path``), and whether a
    call entered each (``by_call``; else a return to the caller's module)."""

    path: list[str] = field(default_factory=list)
    by_call: list[bool] = field(default_factory=list)
    _modules: dict[str, str | None] = field(default_factory=dict)

    def module(self, frame: FrameType | None) -> str | None:
        if frame is None:
            return None
        filename = frame.f_code.co_filename
        if filename not in self._modules:
            self._modules[filename] = module_of(filename)
        return self._modules[filename]

    def enter(self, module: str | None, by_call: bool) -> None:
        if module is not None and (not self.path or self.path[-1] != module):
            self.path.append(module)
            self.by_call.append(by_call)

    def profile(self, frame: FrameType, event: str, _: Any) -> None:
        if event == "call" and in_request(frame):
            self.enter(self.module(frame), by_call=True)
        elif event == "return" and frame.f_code is not ENTRY and in_request(frame):
            self.enter(self.caller(frame), by_call=False)

    def caller(self, frame: FrameType) -> str | None:
        """The module of the project's nearest frame below ``frame`` on the stack: a function that a
        library (pydantic, SQLAlchemy) called returns, through the library, to the project's code
        that called the library."""
        current = frame.f_back
        while current is not None:
            module = self.module(current)
            if module is not None:
                return module
            current = current.f_back
        return None

    def passes_through(self, i: int) -> bool:
        """Whether the body, at its ``i``-th step, goes on to a module other than the one it came from
        (the first step, the endpoint's, always does)."""
        if i == 0:
            return True
        return i + 1 < len(self.path) and self.path[i + 1] != self.path[i - 1]

    @property
    def modules(self) -> list[str]:
        """The modules passed through, in the order first entered."""
        through = {m for i, m in enumerate(self.path) if self.passes_through(i)}
        return [m for m in dict.fromkeys(self.path) if m in through]

    def returns(self) -> list[tuple[str, str]]:
        """The steps (from, into) that call into a module the body had been in before and pass
        through it again."""
        back: list[tuple[str, str]] = []
        for i, module in enumerate(self.path):
            if self.by_call[i] and module in self.path[:i] and self.passes_through(i):
                back.append((self.path[i - 1], module))
        return back


def in_request(frame: FrameType) -> bool:
    """Whether ``frame`` runs for the traced request (the endpoint is on its stack)."""
    current: FrameType | None = frame
    while current is not None:
        if current.f_code is ENTRY:
            return True
        current = current.f_back
    return False


async def traced_request(database_url: str, policy: str, warmup: int) -> Trace:
    """One chat completion, traced, after ``warmup`` untraced ones."""
    settings = Settings(database_url=database_url, admin_key=ADMIN, embedder="hashing")
    await asyncio.to_thread(upgrade, database_url)
    app = create_app(settings)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    trace = Trace()
    async with app.router.lifespan_context(app):
        app.state.ctx.backends.http = CookielessClient(transport=httpx.MockTransport(upstream))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            tenant = f"t{time.monotonic_ns()}"
            backend = {"name": f"up-{tenant}", "base_url": "http://upstream/v1", "usd_per_mtok_in": 1.0}
            (await client.post("/admin/backends", json=backend, headers=admin)).raise_for_status()
            (await client.post("/admin/tenants", json={"name": tenant}, headers=admin)).raise_for_status()
            key = (await client.post(f"/admin/tenants/{tenant}/keys", json={}, headers=admin)).json()["key"]
            given: dict[str, Any] = {"model": backend["name"]} if policy == "always" else {}
            router = {
                "name": "main",
                "policy": policy,
                "hyperparameters": given,
                "arms": [backend["name"]],
                "is_default": True,
            }
            made = await client.post(f"/admin/tenants/{tenant}/routers", json=router, headers=admin)
            made.raise_for_status()
            headers = {"Authorization": f"Bearer {key}"}
            for _ in range(warmup):
                (await client.post("/v1/chat/completions", json=BODY, headers=headers)).raise_for_status()
            sys.setprofile(trace.profile)
            try:
                answered = await client.post("/v1/chat/completions", json=BODY, headers=headers)
            finally:
                sys.setprofile(None)
            answered.raise_for_status()
    return trace


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m experiments.request_trace", description=__doc__)
    parser.add_argument("--policy", default="always", help="the router's policy (default: always)")
    parser.add_argument("--warmup", type=int, default=3, help="untraced requests first (default: 3)")
    parser.add_argument("--database-url", help="default: a fresh SQLite file in a temporary folder")
    parser.add_argument("--path", action="store_true", help="also print the path, one module a line")
    args = parser.parse_args(argv)
    url = args.database_url or f"sqlite+aiosqlite:///{tempfile.mkdtemp()}/banditgate.db"
    trace = asyncio.run(traced_request(url, args.policy, args.warmup))
    if args.path:
        print("\n".join(trace.path))
    back = trace.returns()
    print(f"modules: {len(trace.modules)} ({', '.join(trace.modules)})")
    print(f"returns: {len(back)} ({', '.join(f'{a} -> {b}' for a, b in back)})")


if __name__ == "__main__":
    main()
