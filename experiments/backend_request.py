"""What building one backend request costs, the URL and timeout parsed per call against kept:
``python -m experiments.backend_request``.

``BackendClient._request`` builds each backend call's ``httpx.Request``. It used to pass the URL as a
string and a new ``httpx.Timeout``, so httpx parsed the URL on every call; it now passes an
``httpx.URL`` and a ``Timeout`` kept per client (``BackendClient._url``, ``_timeout``). Process CPU
microseconds per ``build_request``, the two ways taking turns, medians of ``--rounds`` rounds.
experiments/ is not packaged and may import app/.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import httpx

from app.backends import CookielessClient

URL = "http://127.0.0.1:8000/v1/chat/completions"
BODY = {"model": "up", "messages": [{"role": "user", "content": "hello there " * 10}]}
HEADERS = {"Accept": "application/json, text/event-stream"}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    client = CookielessClient()
    url, timeout = httpx.URL(URL), httpx.Timeout(30.0)

    def parsed_per_call() -> httpx.Request:
        return client.build_request("POST", URL, json=BODY, headers=HEADERS, timeout=httpx.Timeout(30.0))

    def kept() -> httpx.Request:
        return client.build_request("POST", url, json=BODY, headers=HEADERS, timeout=timeout)

    ways: dict[str, Callable[[], httpx.Request]] = {"parsed per call": parsed_per_call, "kept": kept}
    figures: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, build in ways.items():
            start = time.process_time()
            for _ in range(args.calls):
                build()
            figures[name].append((time.process_time() - start) / args.calls * 1e6)
    for name, values in figures.items():
        spread = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name:16s} {statistics.median(values):6.1f} us per request built (rounds: {spread})")


if __name__ == "__main__":
    main()
