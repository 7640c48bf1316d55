"""Wall time of named parts of a forwarded request, in situ: inside ``experiments.forward_cpu``'s
requests (the app in this process on a fresh SQLite file, its backend a mock transport), each part
wrapped in a timer; medians per call.

    PYTHONPATH=. python experiments/request_parts.py --requests 2000
    PYTHONPATH=/tmp/before python experiments/request_parts.py   # the parts as an older tree has them

Parts (each where the tree has it): the decision's generator (``app.routing.decide.decision_rng``), the
request session's close (``AsyncSession.close``), the SQLite ledger's transaction in its thread
(``SqliteLedger._transaction``); and, from ``--stages``'s timers, the ledger write as the request
awaits it and the request itself.

``--inline-ledger`` is an experiment, not how the gateway runs: the SQLite ledger's items are served on
the event loop (the thread's code, under a lock) instead of being handed to its thread, to show what
the hand-off costs (docs/benchmarks.md, "Results, pass 11"). It ignores SQLite's write lock held by
another connection (it would block the loop for the busy timeout), so it is safe only here.

experiments/ is not packaged and may import app/.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

import app.routing.decide as decide
import app.store.ledger_sqlite as ledger_sqlite
from experiments.forward_cpu import Stages, one_run, timed

Timings = Stages


def timed_sync(timings: Timings, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def part(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            timings[name].append((time.perf_counter() - start) * 1000)

    return part


def serve_inline() -> None:
    """The SQLite ledger's ``_submit`` serving its item on the calling loop (the experiment)."""
    lock = threading.Lock()
    serve = ledger_sqlite.SqliteLedger._serve

    async def submit(self: ledger_sqlite.SqliteLedger, item: Any) -> Any:
        with lock:
            outcome = serve(self, [item])[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    ledger_sqlite.SqliteLedger._submit = submit  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--policy", default="always")
    parser.add_argument("--inline-ledger", action="store_true")
    args = parser.parse_args()

    timings: Timings = defaultdict(list)
    decide.decision_rng = timed_sync(timings, "decision_rng", decide.decision_rng)  # type: ignore[assignment]
    AsyncSession.close = timed(timings, "session close", AsyncSession.close)  # type: ignore[method-assign,assignment]
    ledger_sqlite.SqliteLedger._transaction = timed_sync(  # type: ignore[method-assign]
        timings, "ledger transaction (thread)", ledger_sqlite.SqliteLedger._transaction
    )
    if args.inline_ledger:
        serve_inline()
    stages: Stages = defaultdict(list)
    url = f"sqlite+aiosqlite:///{tempfile.mkdtemp()}/banditgate.db"
    cpu = asyncio.run(one_run(url, args.policy, "minilm", args.requests, stages=stages))
    print(
        f"process CPU per request {cpu:.3f} ms ({args.policy}{', inline ledger' if args.inline_ledger else ''})"
    )
    for name, times in [
        *timings.items(),
        ("ledger.write", stages["ledger.write"]),
        ("request", stages["request"]),
    ]:
        recent = times[-args.requests :]  # the measured requests (the set-up and warm-up come first)
        print(f"  {name:30s} {statistics.median(recent):7.3f} ms median  x{len(times)}")


if __name__ == "__main__":
    main()
