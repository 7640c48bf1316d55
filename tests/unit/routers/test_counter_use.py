"""``counter_use``: how a policy reads the gateway's select-time counts decides whether a forwarded
decision is counted (and committed) before its call or with its write after it."""

from __future__ import annotations

from typing import Any

import pytest

from routers.base import counter_use
from routers.registry import build_policy

ARMS = ["a", "b"]


@pytest.mark.parametrize(
    ("name", "hyperparameters", "use"),
    [
        ("linucb", {}, "none"),
        ("always", {"model": "a"}, "none"),
        ("knn-ucb", {}, "read"),
        ("knn-ucb", {"max_loss": 0.01}, "read"),  # wrapped (routers.trusted): the inner policy's
        ("pak-ucb", {"retry": True}, "none"),  # a retry cascade around it: the inner policy's
        ("default", {}, "read"),
        ("balrog", {}, "exact"),
        ("balrog", {"max_loss": 0.01}, "exact"),
    ],
)
def test_each_policy_declares_how_it_reads_the_counts(
    name: str, hyperparameters: dict[str, Any], use: str
) -> None:
    assert counter_use(build_policy(name, ARMS, hyperparameters=hyperparameters)) == use


def test_a_policy_that_declares_nothing_or_nonsense_gets_exact_counts() -> None:
    class Plain:
        pass

    class Odd:
        counter_use = "sometimes"

    assert counter_use(Plain()) == "exact"  # type: ignore[arg-type]
    assert counter_use(Odd()) == "exact"  # type: ignore[arg-type]
