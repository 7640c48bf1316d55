"""C2MAB-V and the set baselines: decisions, updates, normalisation, variants."""

from dataclasses import replace

import numpy as np
import pytest

from bench.synth_c2mabv import USD_PER_1K_TOKENS
from routers.base import Context, Observation
from routers.combinatorial import C2MABV, confidence_radius
from routers.set_baselines import CUCB, EpsGreedySet, ThompsonSet

ARMS = list(USD_PER_1K_TOKENS)
PRICES = {a: p for a, p in USD_PER_1K_TOKENS.items()}  # USD per call (1k tokens)
X = np.zeros(4, dtype=np.float32)


def _feed(policy, arm, reward, cost, times=1):
    for _ in range(times):
        policy.update(Observation(embedding=X, arm=arm, reward=reward, cost=cost))


def test_radius_matches_lemma_1():
    rad = confidence_radius(np.array([0.0, 4.0]), 10, 9, 1e-4)
    big_l = np.log(2 * np.pi**2 * 9 * 1000 / (3 * 1e-4))
    assert rad[0] == np.inf and rad[1] == pytest.approx(np.sqrt(big_l / 8))


def test_first_round_explores_n_models_in_cascade_order():
    policy = C2MABV(ARMS, seed=0, prices=PRICES)
    decision = policy.select(Context(embedding=X))
    assert decision.mode == "set" and len(decision.arms) == 4  # mubar = 1 everywhere: the tie-break fills N
    info = decision.info
    assert info["reward_model"] == "awc" and info["budget"] == 0.45 and info["cascade"] is True
    assert info["success_threshold"] == 0.5 and info["max_models"] == 4


@pytest.mark.parametrize("reward", ["awc", "suc", "aic"])
def test_set_sizes_and_budget_in_expectation(reward):
    policy = C2MABV(ARMS, seed=1, reward=reward, prices=PRICES, alpha_reward=0.0, alpha_cost=0.0)
    rng = np.random.default_rng(0)
    for arm in ARMS:  # known means: every arm observed, no exploration bonus
        _feed(policy, arm, float(rng.uniform(0.1, 0.5)), PRICES[arm], times=3)
    costs = np.array([PRICES[a] for a in ARMS]) / max(PRICES.values())
    spent = []
    for _ in range(400):
        decision = policy.select(Context(embedding=X))
        if reward == "awc":
            assert len(decision.arms) <= 4
        else:
            assert len(decision.arms) == 4
        spent.append(sum(costs[ARMS.index(a)] for a in decision.arms))
        if reward != "aic":  # (AIC at 0.3 may be infeasible: see the fallback test)
            z = np.array([decision.info["z"][a] for a in ARMS])
            assert costs @ z <= policy.budget + 1e-9
    if reward != "aic":
        # rounding keeps E[cost] = c.z <= rho: the mean over 400 rounds stays within 0.03 of rho
        assert np.mean(spent) <= policy.budget + 0.03


def test_aic_falls_back_to_the_cheapest_models_when_the_lp_is_infeasible():
    policy = C2MABV(ARMS, seed=0, reward="aic", budget=0.1, prices=PRICES, alpha_cost=0.0)
    for arm in ARMS:
        _feed(policy, arm, 0.4, PRICES[arm])
    decision = policy.select(Context(embedding=X))
    assert decision.info["fallback"] is True
    cheapest = sorted(ARMS, key=lambda a: PRICES[a])[:4]
    assert sorted(decision.arms) == sorted(cheapest)


def test_awc_cascade_order_is_cheapest_first_and_configurable():
    policy = C2MABV(ARMS, seed=0, prices=PRICES, budget=2.0, alpha_cost=0.0)
    for arm in ARMS:
        _feed(policy, arm, 0.45 if arm in ("gpt-4", "claude-2") else 0.1, PRICES[arm], times=200)
    decision = policy.select(Context(embedding=X))
    lcb = [decision.scores[a]["cost_lcb"] for a in decision.arms]
    assert lcb == sorted(lcb)
    by_reward = C2MABV.from_state(
        {**policy.state_dict(), "config": {**policy.config, "cascade_order": "reward"}}
    )
    ordered = by_reward.select(Context(embedding=X))
    idx = [ordered.scores[a]["index"] for a in ordered.arms]
    assert idx == sorted(idx, reverse=True)


def test_updates_touch_only_the_called_model_and_costs_are_normalised():
    policy = C2MABV(ARMS, seed=0, prices=PRICES)
    _feed(policy, "gpt-4", 0.5, 0.12)
    _feed(policy, "gpt-3.5", 0.3, 0.01)
    est = policy.estimates(ARMS, policy._scale(Context(embedding=X)))
    assert est["n_mu"].tolist() == [0, 1, 0, 0, 0, 0, 0, 0, 1]
    assert est["c"][ARMS.index("gpt-4")] == pytest.approx(1.0)
    assert est["c"][ARMS.index("gpt-3.5")] == pytest.approx(0.01 / 0.12)


def test_scale_from_context_costs_is_the_largest_running_mean_expected_cost():
    policy = C2MABV(ARMS, seed=0)
    policy.select(Context(embedding=X, costs={"gpt-4": 0.2, "llama-2-7b": 0.01}))
    policy.select(Context(embedding=X, costs={"gpt-4": 0.1, "llama-2-7b": 0.01}))
    assert policy.select(Context(embedding=X)).info["cost_scale"] == pytest.approx(0.15)


def test_price_scale_counts_the_current_arms_only():
    policy = C2MABV(ARMS, seed=0, prices=PRICES)
    assert policy.select(Context(embedding=X)).info["cost_scale"] == pytest.approx(0.12)  # gpt-4
    policy.remove_arm("gpt-4")
    assert policy.select(Context(embedding=X)).info["cost_scale"] == pytest.approx(0.08)  # claude-2
    policy.add_arm("gpt-4")
    assert policy.select(Context(embedding=X)).info["cost_scale"] == pytest.approx(0.12)


def test_removing_and_re_adding_the_priciest_arm_leaves_scale_and_decision_unchanged():
    arms = ["small", "medium", "large"]
    costs = {"small": 0.01, "medium": 0.04, "large": 0.2}
    without_large = {a: c for a, c in costs.items() if a != "large"}

    def trained() -> C2MABV:
        policy = C2MABV(
            arms,
            seed=0,
            reward="suc",
            max_models=1,
            budget=0.25,
            alpha_reward=0.0,
            alpha_cost=0.0,
            direct=True,
        )
        for arm, reward in (("small", 0.3), ("medium", 0.8), ("large", 0.9)):
            _feed(policy, arm, reward, costs[arm], times=20)
        for _ in range(3):
            policy.select(Context(embedding=X, costs=costs))
        return policy

    policy, twin = trained(), trained()
    assert policy.select(Context(embedding=X, costs=costs)).info["cost_scale"] == pytest.approx(0.2)
    twin.select(Context(embedding=X, costs=costs))
    policy.remove_arm("large")
    # the scale follows the current arms: the priciest left is "medium"
    assert policy.select(Context(embedding=X, costs=without_large)).info["cost_scale"] == pytest.approx(0.04)
    twin.select(Context(embedding=X, costs=costs, arms=["small", "medium"]))
    for _ in range(10):
        policy.select(Context(embedding=X, costs=without_large))
        twin.select(Context(embedding=X, costs=costs, arms=["small", "medium"]))
    policy.add_arm("large")
    same = Context(embedding=X, costs=costs, arms=["small", "medium"])
    decisions = [p.select(replace(same, rng=np.random.default_rng(7))) for p in (policy, twin)]
    assert [d.info["cost_scale"] for d in decisions] == pytest.approx([0.2, 0.2])
    # "medium" (the better arm) costs 0.04 / 0.2 = 0.2 <= rho = 0.25 under the restored scale
    assert decisions[0].arms == decisions[1].arms == ["medium"]
    assert decisions[0].info["z"] == decisions[1].info["z"]


def test_batched_variant_reuses_z_for_b_rounds():
    policy = C2MABV(ARMS, seed=0, prices=PRICES, batch_size=5)
    zs = []
    for i in range(10):
        decision = policy.select(Context(embedding=X))
        zs.append(tuple(decision.info["z"].values()))
        for arm in decision.arms:
            _feed(policy, arm, 0.5 if i % 2 else 0.0, PRICES[arm])
    assert len(set(zs[:5])) == 1 and len(set(zs[5:])) == 1


def test_direct_variant_is_feasible_under_the_cost_lcb_every_round():
    policy = C2MABV(ARMS, seed=0, prices=PRICES, reward="suc", direct=True, alpha_cost=0.0)
    for arm in ARMS:
        _feed(policy, arm, 0.3, PRICES[arm], times=2)
    for _ in range(20):
        decision = policy.select(Context(embedding=X))
        assert len(decision.arms) == 4
        assert sum(decision.scores[a]["cost_lcb"] for a in decision.arms) <= policy.budget + 1e-9


def test_set_baselines():
    cucb = CUCB(ARMS, seed=0, prices=PRICES)
    for arm in ARMS:
        _feed(cucb, arm, 0.5 if arm == "gpt-4" else 0.0, PRICES[arm], times=500)
    assert "gpt-4" in cucb.select(Context(embedding=X)).arms  # cost is ignored
    eps = EpsGreedySet(ARMS, seed=0, prices=PRICES, reward="suc")
    first = eps.select(Context(embedding=X))
    assert first.info["epsilon"] == 1.0 and len(first.arms) == 4  # eps_1 = min(1, 2 sqrt(9)) = 1
    ts = ThompsonSet(ARMS, seed=0, prices=PRICES, reward="suc", costs="ignore")
    for arm in ARMS:
        _feed(ts, arm, 1.0 if arm in ARMS[:4] else 0.0, PRICES[arm], times=100)
    assert sorted(ts.select(Context(embedding=X)).arms) == sorted(ARMS[:4])
