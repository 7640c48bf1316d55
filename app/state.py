"""Per-router policy objects held in memory, kept current by folding the event log.

A router's runtime is loaded on first use: the starting snapshot (if any), then every later event from
the database, in id order. From then on the process folds what the bus delivers. Each runtime remembers
which event ids it folded after its watermark, so an event that arrives twice (from the replay and from
the stream, or again after a resync) is learned once. Events that arrive while a runtime is loading are
buffered and applied after the replay. ``compact`` keeps that set bounded: it moves the watermark up to
the newest periodic snapshot's (below which nothing can still commit) and forgets the ids under it.

All policy calls happen on the event loop thread and never await, so a policy is never used by two
coroutines at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.events import CatalogChanged, FeedbackMessage, Message, RouterChanged
from app.store.eventlog import (
    config_hash,
    event_ids_between,
    events_after,
    newest_snapshot,
    payload_embedding,
    snapshot_state,
    starting_snapshot,
)
from app.store.models import Router
from routers.base import OBSERVATION_KINDS, Observation, Policy, decode_state
from routers.registry import build_policy, restore_policy

log = logging.getLogger(__name__)


@dataclass
class RouterRuntime:
    router_id: int
    version: int
    config_hash: str
    policy: Policy
    watermark: int
    folded: set[int] = field(default_factory=set)
    events_folded: int = 0
    fold_errors: int = 0

    @property
    def last_event_id(self) -> int:
        return max(self.folded, default=self.watermark)


def fresh_policy(router: Router) -> Policy:
    return build_policy(router.policy, list(router.arms), router.seed, router.hyperparameters)


SNAPSHOT_READS = 5  # a snapshot deleted between finding and reading it: look again, at most this often


def reconcile_arms(policy: Policy, arms: list[str]) -> None:
    """Make the policy's arms equal the router's: arms added or removed since the state was taken."""
    for arm in policy.arms:
        if arm not in arms:
            policy.remove_arm(arm)
    for arm in arms:
        if arm not in policy.arms:
            policy.add_arm(arm)


async def load_runtime(session: AsyncSession, router: Router, up_to: int | None = None) -> RouterRuntime:
    """The router's starting snapshot with every later event folded in id order (only ids <= ``up_to``
    when given: the snapshotter folds up to its safe watermark)."""
    current = config_hash(router)
    for _ in range(SNAPSHOT_READS):
        snapshot = await starting_snapshot(session, router)
        if snapshot is None:
            policy, watermark, folded_before = fresh_policy(router), 0, 0
            break
        watermark, folded_before = snapshot.watermark, snapshot.events_folded
        if snapshot.config_hash != current:  # configuration changed since: relearn from the log after it
            policy = fresh_policy(router)
            break
        state = await snapshot_state(session, snapshot)
        if state is not None:
            policy = restore_policy(decode_state(state))
            break
        # deleted since it was found (a reset or the router's deletion): start again from the newest
    else:
        raise RuntimeError(
            f"router {router.id}'s snapshots were deleted under {SNAPSHOT_READS} reads in a row"
        )
    reconcile_arms(policy, list(router.arms))
    runtime = RouterRuntime(router.id, router.version, current, policy, watermark)
    runtime.events_folded = folded_before
    for message in await events_after(session, router.id, watermark, up_to=up_to):
        fold(runtime, message)
    return runtime


def fold(runtime: RouterRuntime, message: FeedbackMessage) -> None:
    """Learn one event, once: ids at or below the watermark, or already folded, are skipped. The
    observation carries the event's decision id as ``decision_key`` (per-decision policy state)."""
    if message.event_id <= runtime.watermark or message.event_id in runtime.folded:
        return
    runtime.folded.add(message.event_id)
    runtime.events_folded += 1
    kind = message.kind if message.kind in OBSERVATION_KINDS else "bandit"
    observation = Observation(
        embedding=message.embedding,
        arm=message.model,
        reward=message.reward,
        cost=message.cost,
        kind=kind,  # type: ignore[arg-type]
        output_embedding=payload_embedding(message.payload),
        extra=message.payload,
        decision_key=message.decision_id,
    )
    try:
        runtime.policy.update(observation)
    except Exception:  # a bad event must not stop the fold; it is counted and logged
        runtime.fold_errors += 1
        log.exception("policy update failed for event %s of router %s", message.event_id, runtime.router_id)


def advance_watermark(runtime: RouterRuntime, new_watermark: int, committed: Iterable[int]) -> None:
    """Move the watermark up to ``new_watermark`` and forget the folded ids at or below it.

    ``committed`` must be every event id of the router in (watermark, new_watermark] that will ever
    commit (a snapshot watermark guarantees that no later commit lands below it); the caller folds any
    of them that are missing first, so nothing is lost and nothing is learned twice.
    """
    if new_watermark <= runtime.watermark:
        return
    missing = set(committed) - runtime.folded
    if missing:
        raise ValueError(f"events {sorted(missing)[:5]} are not folded yet")
    runtime.folded = {i for i in runtime.folded if i > new_watermark}
    runtime.watermark = new_watermark


class PolicyStates:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self._sessionmaker = sessionmaker
        self._runtimes: dict[int, RouterRuntime] = {}
        self._loading: dict[int, asyncio.Future[RouterRuntime]] = {}
        self._pending: dict[int, list[FeedbackMessage]] = {}
        self._waiters: dict[int, asyncio.Future[None]] = {}  # read-your-writes, by event id

    def loaded(self, router_id: int) -> RouterRuntime | None:
        return self._runtimes.get(router_id)

    async def get(self, router: Router) -> RouterRuntime:
        runtime = self._runtimes.get(router.id)
        if runtime is not None and runtime.version >= router.version:
            return runtime
        loading = self._loading.get(router.id)
        if loading is not None:
            return await asyncio.shield(loading)
        future: asyncio.Future[RouterRuntime] = asyncio.get_running_loop().create_future()
        self._loading[router.id] = future
        self._pending[router.id] = []
        try:
            runtime = await self._load(router)
            for message in self._pending.pop(router.id, []):
                self._apply(runtime, message)
            self._runtimes[router.id] = runtime
            future.set_result(runtime)
            return runtime
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            self._loading.pop(router.id, None)
            self._pending.pop(router.id, None)

    async def _load(self, router: Router) -> RouterRuntime:
        async with self._sessionmaker() as session:
            runtime = await load_runtime(session, router)
        log.info(
            "loaded router %s v%s: %s events folded, watermark %s",
            router.id,
            router.version,
            runtime.events_folded,
            runtime.watermark,
        )
        return runtime

    def _apply(self, runtime: RouterRuntime, message: FeedbackMessage) -> None:
        fold(runtime, message)

    async def handle(self, message: Message) -> None:
        """The bus handler: fold feedback, drop runtimes whose router changed."""
        if isinstance(message, CatalogChanged):
            return
        if isinstance(message, RouterChanged):
            runtime = self._runtimes.get(message.router_id)
            if runtime is not None and runtime.version < message.version:
                del self._runtimes[message.router_id]
            return
        if message.router_id in self._pending:
            self._pending[message.router_id].append(message)
        runtime = self._runtimes.get(message.router_id)
        if runtime is not None:
            self._apply(runtime, message)
        self._wake(message.event_id)

    async def wait_folded(self, router_id: int, event_id: int, timeout: float) -> bool:
        """Read-your-writes: wait until this process has folded ``event_id`` (if it holds the router)."""
        runtime = self._runtimes.get(router_id)
        if runtime is None or event_id <= runtime.watermark or event_id in runtime.folded:
            return True
        waiter = self._waiters.get(event_id)
        if waiter is None or waiter.done():
            waiter = self._waiters[event_id] = asyncio.get_running_loop().create_future()
        try:
            # a bare future, not an Event: wait_for then needs no task of its own (Python 3.11)
            await asyncio.wait_for(waiter, timeout)
            return True
        except TimeoutError:
            self._waiters.pop(event_id, None)
            return False

    def _wake(self, event_id: int) -> None:
        """Release the request waiting for ``event_id``'s fold, if one is."""
        waiter = self._waiters.pop(event_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def resync(self) -> None:
        """Fold, from the database, every event a loaded runtime has missed (after a bus outage)."""
        for router_id, runtime in list(self._runtimes.items()):
            async with self._sessionmaker() as session:
                router = await session.scalar(select(Router).where(Router.id == router_id))
                if router is None or router.version != runtime.version:
                    self._runtimes.pop(router_id, None)
                    continue
                missed = await events_after(session, router_id, runtime.watermark, skip=runtime.folded)
            for message in missed:
                self._apply(runtime, message)
                self._wake(message.event_id)

    async def compact(self) -> int:
        """Bound every loaded runtime's ``folded`` set: move its watermark up to the newest periodic
        snapshot's watermark (below which no event can still commit), folding first any event below it
        that this process missed. Returns how many folded ids were forgotten."""
        forgotten = 0
        for router_id, runtime in list(self._runtimes.items()):
            async with self._sessionmaker() as session:
                periodic = await newest_snapshot(session, router_id, ("periodic",))
                target = 0 if periodic is None else int(periodic.watermark)
                if target <= runtime.watermark:
                    continue
                committed = await event_ids_between(session, router_id, runtime.watermark, target)
                missed = await events_after(
                    session, router_id, runtime.watermark, skip=set(runtime.folded), up_to=target
                )
            if self._runtimes.get(router_id) is not runtime:
                continue  # replaced while we read (router changed): the new runtime starts bounded
            for message in missed:
                self._apply(runtime, message)
                self._wake(message.event_id)
            before = len(runtime.folded)
            advance_watermark(runtime, target, committed)
            forgotten += before - len(runtime.folded)
        return forgotten

    async def maintain(self) -> int:
        """Index maintenance of the loaded policies that have any (kNN stores' compactions, see
        ``KnnUCB.compaction_jobs``): each rebuild runs in a worker thread while the old index keeps
        serving, then is swapped in here. Returns how many indexes were rebuilt."""
        rebuilt = 0
        for runtime in list(self._runtimes.values()):
            jobs = getattr(runtime.policy, "compaction_jobs", None)
            for job in jobs() if callable(jobs) else []:
                await asyncio.to_thread(job.build)
                rebuilt += bool(job.finish())
        return rebuilt

    def drop(self, router_id: int) -> None:
        self._runtimes.pop(router_id, None)
