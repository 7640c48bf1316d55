"""What building one backend request costs, the URL and timeout parsed per call against kept:
``python -m experiments.backend_request``.

``BackendClient._request`` builds each backend call's ``httpx.Request``. It used to pass the URL as a
string and a new ``httpx.Timeout``, so httpx parsed the URL on every call (``parsed per call``, emulated
here on the client's own ``httpx`` client); it now passes the ``httpx.URL`` and ``Timeout`` its
least-recently-used caches keep (``kept``: the client's ``_request`` itself). Process CPU microseconds
per request built, the two ways taking turns, medians of ``--rounds`` rounds
(experiments/alternating_cpu.py). experiments/ is not packaged and may import app/.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from app.backends import BackendClient, Target
from app.settings import Settings
from experiments.alternating_cpu import alternate, counted_parser, cpu_us_per_op, report

TARGET = Target("up", "chat", "http://127.0.0.1:8000/v1", "up-model", None, 30.0, 1.0, 1.0, 0.0)
PATH = "/chat/completions"
BODY = {"messages": [{"role": "user", "content": "hello there " * 10}]}
HEADERS = {"Accept": "application/json, text/event-stream"}


async def measure(calls: int, rounds: int) -> dict[str, float]:
    client = BackendClient(Settings())

    def parsed_per_call() -> httpx.Request:
        return client.http.build_request(
            "POST",
            f"{TARGET.base_url}{PATH}",
            json={**BODY, "model": TARGET.upstream_model},
            headers=HEADERS,
            timeout=httpx.Timeout(TARGET.timeout_s),
        )

    def kept() -> httpx.Request:
        return client._request(TARGET, PATH, BODY)

    ways: dict[str, Callable[[], httpx.Request]] = {"parsed per call": parsed_per_call, "kept": kept}

    async def builds(name: str) -> None:
        build = ways[name]
        for _ in range(calls):
            build()

    async def one_round(name: str) -> float:
        return await cpu_us_per_op(builds(name), calls)

    try:
        return await alternate(list(ways), one_round, rounds)
    finally:
        await client.aclose()


def main() -> None:
    args = counted_parser(
        __doc__ or "", "calls", "requests built per way per round", default=20_000, rounds=5
    )
    options = args.parse_args()
    report(asyncio.run(measure(options.operations, options.rounds)), "request built", options.rounds)


if __name__ == "__main__":
    main()
