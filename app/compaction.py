"""A background task in each gateway process that keeps the folded-id sets bounded.

Every ``compact_interval_s`` it calls ``PolicyStates.compact``, which moves each loaded router's
watermark up to the newest periodic snapshot's (without a snapshotter running it finds nothing to do),
then ``PolicyStates.maintain``, which rebuilds the kNN policies' neighbour indexes whose evicted points
outnumber the live ones, in a worker thread (``KnnUCB.compaction_jobs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.state import PolicyStates
from app.store.availability import DatabaseUnavailable

log = logging.getLogger(__name__)


class CompactionLoop:
    def __init__(self, states: PolicyStates, interval_s: float) -> None:
        self.states = states
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.interval_s > 0:
            self._task = asyncio.create_task(self._run(), name="folded-id-compaction")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                forgotten = await self.states.compact()
                if forgotten:
                    log.debug("compaction forgot %s folded ids", forgotten)
                rebuilt = await self.states.maintain()
                if rebuilt:
                    log.debug("compaction rebuilt %s neighbour indexes", rebuilt)
            except asyncio.CancelledError:
                raise
            except DatabaseUnavailable as exc:  # try again next round, without a traceback per round
                log.warning("compaction skipped: %s", exc.message)
            except Exception:
                log.exception("compaction failed")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
