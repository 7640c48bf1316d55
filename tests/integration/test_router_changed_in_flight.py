"""A request that read its router before an arm change, decided by a policy state of after it."""

from __future__ import annotations

from sqlalchemy import select

from app.routing.decide import choose
from app.routing.turn import Turn
from app.schemas import RouteRequest
from app.store.models import Router, Tenant
from tests.conftest import Stack, admin_headers, running, unique
from tests.fake_backend import FakeBackends
from tests.integration.test_forwarding import PROMPT, add_backend, add_tenant, gateway_app


async def test_a_policy_state_newer_than_the_router_read_chooses_among_the_priced_arms(
    sqlite_stack: Stack, fake: FakeBackends
) -> None:
    """PromptWise needs every arm's price: an arm added after the request read its router is priced
    too (the policy's arms with the router's), so the newer state decides among all its arms."""
    app = gateway_app(sqlite_stack)
    async with running(app) as client:
        a, b, c = [await add_backend(client, fake, "ok") for _ in range(3)]
        tenant = unique("t")
        await add_tenant(client, [a, b], tenant=tenant, policy="promptwise", hyperparameters={"tau_exp": 0})
        ctx = app.state.ctx
        async with ctx.sessionmaker() as session:
            owner = await session.scalar(select(Tenant).where(Tenant.name == tenant))
            read_before = await session.scalar(select(Router).where(Router.tenant_id == owner.id))
        assert read_before is not None and owner is not None and list(read_before.arms) == [a, b]
        patch = {"arms": [a, b, c]}
        changed = await client.patch(
            f"/admin/tenants/{tenant}/routers/main", json=patch, headers=admin_headers()
        )
        assert changed.status_code == 200, changed.text
        async with ctx.sessionmaker() as session:
            now = await session.get(Router, read_before.id)
            assert now is not None and list(now.arms) == [a, b, c]
            runtime = await ctx.states.get(now)  # another request loaded the state of after the change
            assert list(runtime.policy.arms) == [a, b, c]
            for n in range(20):
                turn = Turn(ctx, session, owner, RouteRequest(prompt=f"{PROMPT} {n}"), router=read_before)
                route = await choose(turn)
                assert route.model in (a, b, c)
            with_candidates = Turn(
                ctx, session, owner, RouteRequest(prompt=PROMPT, candidates=[b]), router=read_before
            )
            assert (await choose(with_candidates)).model == b
