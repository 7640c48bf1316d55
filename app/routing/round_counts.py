"""The counts a ``read`` policy sees at select time (``routers.base.CounterUse``; kNN-UCB's round t,
which enters its bonus only as log t): the router's committed counts, read from the ledger at most
once per ``ttl_s``, plus the decisions this process made since that read.

A decision made here counts at once for this process's next one, so sequential decisions see t = 1,
2, 3, ... as if each were read back. Another process's decisions show at this process's next read,
within ``ttl_s``; the ledger's own read never saw decisions still in flight either, so concurrent
decisions may see the same t with or without the cache. ``ttl_s`` 0 reads every time. A reset or an
import of the router's state (``RouterChanged``) forgets the cached counts."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.store.ledger import Counts  # (decisions, query rounds)


@dataclass
class _Read:
    decisions: int
    query_rounds: int
    at: float
    made: int = 0  # decisions this process made since the read
    queried: int = 0  # query rounds among them


class RoundCounts:
    def __init__(
        self,
        read: Callable[[int], Awaitable[Counts]],
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._ttl_s = ttl_s
        self._clock = clock
        self._reads: dict[int, _Read] = {}

    async def before(self, router_id: int) -> Counts:
        """The counts before the decision about to be made."""
        now = self._clock()
        known = self._reads.get(router_id)
        if known is None or now - known.at >= self._ttl_s:
            decisions, query_rounds = await self._read(router_id)
            known = _Read(decisions, query_rounds, now)
            self._reads[router_id] = known
        return known.decisions + known.made, known.query_rounds + known.queried

    def made(self, router_id: int, queried: bool) -> None:
        """Count a decision this process made (its write counts it in the database)."""
        known = self._reads.get(router_id)
        if known is not None:
            known.made += 1
            known.queried += int(queried)

    def forget(self) -> None:
        self._reads.clear()
