"""The gateway-vs-bench comparison's verdict (``bench.e2e.Comparison.summary``)."""

from __future__ import annotations

from bench.e2e import Comparison


def comparison(offline_cost: float, service_cost: float, service_reward: float = 0.8) -> Comparison:
    return Comparison(
        policy="promptwise",
        seeds=[0],
        offline_reward=[0.8],
        offline_cost=[offline_cost],
        service_reward=[service_reward],
        service_cost=[service_cost],
        service_calls=[1.0],
        service_wall_s=1.0,
        rounds_differing=0,
        declined=0,
        models={},
        horizon=10,
    )


def test_one_seed_allows_the_cost_its_whole_token_rounding_and_nothing_more() -> None:
    # one seed: the offline interval has width 0; whole-token rounding may move the cost by up to 0.1%
    assert comparison(0.003000, 0.0030015).summary()["cost"]["within"]  # +0.05%
    assert not comparison(0.003000, 0.0030040).summary()["cost"]["within"]  # +0.13%
    # the reward gets no such allowance
    summary = comparison(0.003, 0.003, service_reward=0.8001).summary()
    assert summary["cost"]["within"] and not summary["reward"]["within"]
