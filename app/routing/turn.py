"""A request's turn through routing (``Turn``): built once where the request enters routing (its router
resolved then, or none for a direct call) and handed down the path instead of its parts; and its
decision's row (``MadeDecision``), kept for the turn whether written yet or not.

A turn with a body to forward is checked as it is built: a request none of whose reachable backends
serves its path (a chat router called for images, or the reverse) is refused (422) before any
decision, instead of being routed to a backend that cannot answer it (a 502)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.backends import AttemptRecord
from app.context import AppContext
from app.routing.answers import IMAGE_PATH, path_for
from app.routing.errors import Invalid, NotFound
from app.schemas import RouteRequest, RouteResponse
from app.store.ledger import LedgerWrite
from app.store.models import DecisionRow, Router, Tenant


@dataclass(frozen=True)
class MadeDecision:
    """A decision's row values (``DecisionRow`` attribute names), as made; ``router_name`` labels it in
    the metrics, ``queried``: it asks for a query round (its router's counter counts one)."""

    values: dict[str, Any]
    router_name: str
    queried: bool = False

    def row(self) -> DecisionRow:
        """The row as an unsaved ORM object (for the code that reads a decision's fields)."""
        return DecisionRow(**self.values)

    def write(self) -> LedgerWrite:
        """The decision as a ledger write, with its router counter's increment (none for a direct
        call)."""
        router_id = self.values["router_id"]
        count = None if router_id is None else (router_id, 1, 1 if self.queried else 0)
        return LedgerWrite(decision=self.values, count=count)


@dataclass
class Turn:
    """One request on its way through routing: who asks (``tenant``), what (``request``, and ``body``,
    the JSON to forward when there is one), through which ``router`` (None: a direct call of a named
    backend), and what came of it so far: the decision (``route``, the answer's view of it, and
    ``made``, its row; ``written`` once committed) and the attempts of the call that answers it.
    ``shadow``: the models the policy asked the gateway to call as well, off the client's path
    (``Decision.shadow``; never shown to the client). ``session`` is the request's database session."""

    ctx: AppContext
    session: AsyncSession
    tenant: Tenant
    request: RouteRequest
    body: dict[str, Any] | None = None
    router: Router | None = None
    route: RouteResponse | None = None
    made: MadeDecision | None = None
    written: bool = False
    attempts: list[AttemptRecord] = field(default_factory=list)
    shadow: list[str] = field(default_factory=list)

    @property
    def decided(self) -> RouteResponse:
        """The decision; the turn's steps after the decision only run once it is made."""
        assert self.route is not None, "no decision yet"
        return self.route

    @property
    def decision(self) -> MadeDecision:
        """The decision's row; made with ``route``."""
        assert self.made is not None, "no decision yet"
        return self.made

    def unwritten(self) -> LedgerWrite:
        """A ledger write holding the turn's decision (with its counter's increment) while it is not
        written, else an empty one: what any write about the decision starts from, so the decision is
        written by the first and only by the first (``wrote``)."""
        return LedgerWrite() if self.written else self.decision.write()

    def wrote(self) -> bool:
        """The write ``unwritten`` began is committed: the decision is written. Whether it was written
        by that write (the caller counts it in the metrics then)."""
        if self.written:
            return False
        self.written = True
        return True


async def resolve_router(ctx: AppContext, tenant: Tenant, name: str | None) -> Router:
    """The tenant's router ``name`` (its default when None), from the catalog cache: a detached row,
    read-only."""
    router = await ctx.catalog.router(tenant.id, name)
    if router is None:
        what = "no default router is set for this tenant" if name is None else f"router {name!r} not found"
        raise NotFound(what)
    return router


async def routed_turn(
    ctx: AppContext,
    session: AsyncSession,
    tenant: Tenant,
    request: RouteRequest,
    body: dict[str, Any] | None = None,
) -> Turn:
    """The turn of a request its router decides: the router resolved (404 when there is none), and a
    ``body`` to forward checked against its arms (``check_serves``)."""
    router = await resolve_router(ctx, tenant, request.router)
    turn = Turn(ctx, session, tenant, request, body, router)
    if body is not None:
        await check_serves(turn, path_for(body))
    return turn


async def direct_turn(
    ctx: AppContext,
    session: AsyncSession,
    tenant: Tenant,
    request: RouteRequest,
    body: dict[str, Any],
    backend: str,
    path: str,
) -> Turn:
    """The turn of a direct call of ``backend``: no router; refused unless ``backend`` serves
    ``path``."""
    turn = Turn(ctx, session, tenant, request, body)
    await check_serves(turn, path, backend=backend)
    return turn


WHAT = {
    "chat": "chat completions (POST /v1/chat/completions)",
    "image": "image generations (POST /v1/images/generations)",
}


def kind_for(path: str) -> str:
    """The backend kind that serves ``path``."""
    return "image" if path == IMAGE_PATH else "chat"


async def check_serves(turn: Turn, path: str, backend: str | None = None) -> None:
    """Invalid unless ``backend`` (a direct call) or at least one arm the turn's request may reach (its
    router's arms, narrowed to ``candidates``) is of the kind ``path`` needs."""
    needed = kind_for(path)
    if backend is not None:
        what, names = f"backend {backend!r}", [backend]
    else:
        router = turn.router
        assert router is not None, "a routed turn has its router"
        what, names = f"router {router.name!r}", list(turn.request.candidates or router.arms)
    kinds = {b.kind for b in await turn.ctx.catalog.backends(names)}
    if not kinds or needed in kinds:
        return
    has = " and ".join(sorted(kinds))
    raise Invalid(
        f"{what} routes {has} backends, which cannot serve {WHAT[needed]}: send this request to "
        f"{' or '.join(WHAT[k] for k in sorted(kinds))}, or use a router whose arms are {needed} backends",
        param="model",
    )
