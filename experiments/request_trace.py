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
- returns: the calls from one module into another of those that the body had been in and left
  before (``forward`` calling ``decide`` again after ``kinds`` called it, say). Returning to one's
  caller is not one: a straight line down and back counts none.

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
    """The modules the request was in, event by event (repeats collapsed: ``path``), and the calls
    from one module into another (``calls``: caller, callee)."""

    path: list[str] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    _modules: dict[str, str | None] = field(default_factory=dict)

    def module(self, frame: FrameType | None) -> str | None:
        if frame is None:
            return None
        filename = frame.f_code.co_filename
        if filename not in self._modules:
            self._modules[filename] = module_of(filename)
        return self._modules[filename]

    def enter(self, module: str | None) -> None:
        if module is not None and (not self.path or self.path[-1] != module):
            self.path.append(module)

    def profile(self, frame: FrameType, event: str, _: Any) -> None:
        if event not in ("call", "return") or not in_request(frame):
            return
        callee, caller = self.module(frame), self.module(frame.f_back)
        if frame.f_code is ENTRY:
            if event == "call":
                self.enter(callee)
            return
        if event == "call":
            self.enter(callee)
            if callee is not None and caller is not None and callee != caller:
                self.calls.append((caller, callee))
        else:
            self.enter(caller)

    @property
    def modules(self) -> list[str]:
        """The modules passed through, in the order first entered."""
        through = {self.path[0]} if self.path else set()
        for before, module, after in zip(self.path, self.path[1:], self.path[2:], strict=False):
            if after != before:
                through.add(module)
        return [m for m in dict.fromkeys(self.path) if m in through]

    def returns(self) -> list[tuple[str, str]]:
        """The calls (caller, callee) into a module passed through that the body had left before."""
        through = set(self.modules)
        seen = set(self.path[:1])
        back: list[tuple[str, str]] = []
        for caller, callee in self.calls:
            if callee in through and callee in seen:
                back.append((caller, callee))
            seen.add(callee)
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
