"""``banditgate worker snapshot``: fold the event log into periodic policy snapshots in the database.

Every ``snapshot_interval_s``, for each router: find its settled watermark W (the largest event id
created at least ``snapshot_lag_s`` ago: no event with a smaller id can still commit, see
``settled_event_id``), load the router's starting snapshot, fold every event with id <= W, and store a
``periodic`` snapshot at W. A gateway starting up (or loading the router) then replays only the events
after W, and gateways compact their folded-id sets up to W.

A snapshot is written only if the router's version did not change while it was folded (the router row
is locked in the writing transaction; reset and import bump the version), so a periodic snapshot never
hides a reset. Only the newest ``snapshot_keep`` periodic snapshots of a router are kept.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.settings import Settings
from app.state import load_runtime
from app.store.db import DbPool, make_engine, make_sessionmaker
from app.store.eventlog import settled_event_id, snapshot_row, starting_snapshot
from app.store.models import Router, Snapshot
from routers.base import encode_state

log = logging.getLogger("banditgate.snapshotter")


@dataclass(frozen=True)
class SnapshotTaken:
    router_id: int
    watermark: int
    events_folded: int


async def snapshot_router(
    sessionmaker: async_sessionmaker[AsyncSession], router_id: int, lag_s: float, keep: int
) -> SnapshotTaken | None:
    """One periodic snapshot of one router, or None when there is nothing new to claim."""
    cutoff = datetime.now(UTC) - timedelta(seconds=lag_s)
    async with sessionmaker() as session:
        router = await session.scalar(select(Router).where(Router.id == router_id))
        if router is None:
            return None
        settled = await settled_event_id(session, router.id, cutoff)
        start = await starting_snapshot(session, router)
        if settled <= (0 if start is None else start.watermark):
            return None
        runtime = await load_runtime(session, router, up_to=settled)
        state = encode_state(runtime.policy.state_dict())
    async with sessionmaker() as session:
        # FOR UPDATE on Postgres; SQLAlchemy's SQLite compiler leaves it out (SQLite locks the database)
        current = await session.scalar(select(Router).where(Router.id == router_id).with_for_update())
        if current is None or current.version != runtime.version:
            return None  # reset, import or reconfigured meanwhile: the next round starts from that
        session.add(snapshot_row(current, "periodic", settled, runtime.events_folded, state))
        await session.flush()
        stale = (
            await session.scalars(
                select(Snapshot.id)
                .where(Snapshot.router_id == router_id, Snapshot.kind == "periodic")
                .order_by(Snapshot.id.desc())
                .offset(keep)
            )
        ).all()
        if stale:
            await session.execute(delete(Snapshot).where(Snapshot.id.in_(stale)))
        await session.commit()
    return SnapshotTaken(router_id, settled, runtime.events_folded)


async def snapshot_all(
    sessionmaker: async_sessionmaker[AsyncSession], lag_s: float, keep: int
) -> list[SnapshotTaken]:
    async with sessionmaker() as session:
        router_ids = list((await session.scalars(select(Router.id).order_by(Router.id))).all())
    taken: list[SnapshotTaken] = []
    for router_id in router_ids:
        try:
            done = await snapshot_router(sessionmaker, router_id, lag_s, keep)
        except Exception:  # one router's failure must not stop the others
            log.exception("snapshot of router %s failed", router_id)
            continue
        if done is not None:
            taken.append(done)
    return taken


async def run(settings: Settings, once: bool) -> None:
    engine = make_engine(settings.database_url, DbPool.of(settings))
    sessionmaker = make_sessionmaker(engine)
    try:
        while True:
            taken = await snapshot_all(sessionmaker, settings.snapshot_lag_s, settings.snapshot_keep)
            for t in taken:
                log.info(
                    "router %s: periodic snapshot at watermark %s (%s events)",
                    t.router_id,
                    t.watermark,
                    t.events_folded,
                )
            if once:
                return
            await asyncio.sleep(settings.snapshot_interval_s)
    finally:
        await engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="banditgate worker snapshot",
        description="Fold each router's event log into periodic policy snapshots in the database (needs "
        "Postgres), so a starting gateway replays only the events since the last snapshot. Runs every "
        "BANDITGATE_SNAPSHOT_INTERVAL_S seconds and keeps BANDITGATE_SNAPSHOT_KEEP snapshots per router.",
    )
    parser.add_argument("--once", action="store_true", help="take one round of snapshots and exit")
    args = parser.parse_args(argv)
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(run(settings, args.once))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
