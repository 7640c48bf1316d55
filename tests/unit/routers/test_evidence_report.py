"""``routers.trusted_report.evidence_report``: per model, the rewards of every kind the floor folded,
their mean and Hoeffding lower bound; None for a policy without a floor."""

from __future__ import annotations

import math

import numpy as np

from routers.base import Observation, ObservationKind, Policy
from routers.registry import build_policy
from routers.trusted_report import evidence_report

X = np.ones(4, dtype=np.float32) / 2.0


def observe(policy: Policy, arm: str, reward: float, kind: ObservationKind) -> None:
    policy.update(Observation(embedding=X, arm=arm, reward=reward, kind=kind))


def test_evidence_counts_every_kind_with_its_hoeffding_lower_bound() -> None:
    policy = build_policy("greedy", ["a", "b", "c"], 0, {"incumbent": "a", "max_loss": 0.05, "delta": 0.05})
    observe(policy, "a", 1.0, "bandit")
    observe(policy, "b", 0.5, "shadow")
    observe(policy, "b", 1.0, "query")
    report = evidence_report(policy)
    assert report is not None
    width = math.sqrt(math.log(1 / 0.05) / (2 * 2))  # n = 2, range [0, 1]
    assert (report["b"].n, report["b"].mean) == (2, 0.75)
    assert math.isclose(report["b"].lcb or 0.0, max(0.0, 0.75 - width))
    assert (report["a"].n, report["a"].mean) == (1, 1.0)
    assert (report["c"].n, report["c"].mean, report["c"].lcb) == (0, None, None)


def test_no_floor_no_evidence_report() -> None:
    assert evidence_report(build_policy("greedy", ["a", "b"], 0, {})) is None
