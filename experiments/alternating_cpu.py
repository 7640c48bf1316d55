"""What the CPU experiments share (publish_cpu.py, admission_cpu.py, lean_routes.py,
backend_request.py): ways of doing the same work, measured as process CPU per operation, the ways
alternating round by round, medians over rounds; and their command line (the operations per round,
``--rounds``; for the Redis ones also ``--redis-url``, ``--concurrency``, ``--gap-ms``).

experiments/ is not packaged and may import app/.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence

Round = Callable[[str], Awaitable[float]]  # one round done the named way: its CPU us per operation


async def cpu_us_per_op(work: Awaitable[object], operations: int) -> float:
    """The process CPU ``work`` took, in microseconds per operation."""
    start = time.process_time()
    await work
    return (time.process_time() - start) / operations * 1e6


async def alternate(ways: Sequence[str], one_round: Round, rounds: int) -> dict[str, float]:
    """Median CPU us per operation of each way, the ways taking turns within every round."""
    figures: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name in ways:
            figures[name].append(await one_round(name))
    return {name: statistics.median(values) for name, values in figures.items()}


def counted_parser(
    description: str, operations: str, help_text: str, default: int, rounds: int
) -> argparse.ArgumentParser:
    """A command line with ``--<operations>`` (the count per round, read back as ``operations``) and
    ``--rounds``."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        f"--{operations}", dest="operations", metavar="N", type=int, default=default, help=help_text
    )
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser


def arguments(description: str, operations: str, help_text: str) -> argparse.Namespace:
    """The Redis experiments' command line; ``--<operations>`` is the count per sender per round
    (default 200)."""
    parser = counted_parser(description, operations, help_text, default=200, rounds=6)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/5")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--gap-ms", type=float, default=0.0)
    return parser.parse_args()


def report(figures: dict[str, float], unit: str, rounds: int) -> None:
    for name, micros in figures.items():
        print(f"{name}: {micros:.1f} us of CPU per {unit} (median of {rounds} rounds)")
