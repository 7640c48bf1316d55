"""Wall time of named parts of a forwarded request, in situ: inside ``experiments.forward_cpu``'s
requests (the app in this process on a fresh SQLite file, its backend a mock transport), each part
wrapped in a timer; medians per call.

    PYTHONPATH=. python experiments/request_parts.py --requests 2000
    PYTHONPATH=/tmp/before python experiments/request_parts.py   # the parts as an older tree has them

Parts: the build of a decision's generator (``routers.base.decision_rng``, called only when a policy
draws: none for most decisions), the request session's close (``AsyncSession.close``), the SQLite
ledger's transaction (``SqliteLedger._transaction``: on the event loop where the ledger's inline path
takes the write, in its thread otherwise); and, from ``--stages``'s timers, the ledger write as the
request awaits it and the request itself.

``--thread-ledger`` turns the ledger's inline path off (``BANDITGATE_LEDGER_INLINE=false``), so every
write goes through its thread: what the hand-off costs.

experiments/ is not packaged and may import app/.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from collections import defaultdict

from sqlalchemy.ext.asyncio import AsyncSession

import app.store.ledger_sqlite as ledger_sqlite
import routers.base
from experiments.forward_cpu import Stages, one_run, timed, timed_sync


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--policy", default="always")
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--thread-ledger", action="store_true", help="every ledger write through its thread")
    args = parser.parse_args()

    timings: Stages = defaultdict(list)
    routers.base.decision_rng = timed_sync(timings, "decision's generator built", routers.base.decision_rng)
    AsyncSession.close = timed(timings, "session close", AsyncSession.close)  # type: ignore[method-assign,assignment]
    ledger_sqlite.SqliteLedger._transaction = timed_sync(  # type: ignore[method-assign]
        timings, "ledger transaction", ledger_sqlite.SqliteLedger._transaction
    )
    if args.thread_ledger:
        os.environ["BANDITGATE_LEDGER_INLINE"] = "false"  # read by the app's Settings
    stages: Stages = defaultdict(list)
    url = f"sqlite+aiosqlite:///{tempfile.mkdtemp()}/banditgate.db"
    cpu = asyncio.run(one_run(url, args.policy, args.embedder, args.requests, stages=stages))
    print(
        f"process CPU per request {cpu:.3f} ms ({args.policy}{', thread ledger' if args.thread_ledger else ''})"
    )
    for name, times in [
        *timings.items(),
        ("ledger.write", stages["ledger.write"]),
        ("request", stages["request"]),
    ]:
        recent = times[-args.requests :]  # the measured requests (the set-up and warm-up come first)
        median = f"{statistics.median(recent):7.3f} ms median" if recent else "    not called"
        print(f"  {name:30s} {median}  x{len(times)}")


if __name__ == "__main__":
    main()
