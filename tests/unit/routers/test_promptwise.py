"""PromptWise: the cascade protocol, exploration, stopping rules, costs, and learning on Table 1."""

import numpy as np
import pytest

from bench.synth_promptwise import ARMS, EYE, PRICES, run_cascades
from routers.base import Context, Observation, PolicyConfigError, decode_state, encode_state
from routers.cascade_baselines import GreedyTillSucceed, HighestCost, LowestCost, RandomTillSucceed
from routers.logistic_ucb import PromptWise

X = EYE[0]


def test_exploration_calls_each_new_arm_once_one_per_step():
    policy = PromptWise(ARMS, seed=0, prices=PRICES)
    seen = []
    for _ in range(3):
        decision = policy.select(Context(embedding=X))
        assert decision.info["phase"] == "explore" and decision.adaptive and decision.mode == "cascade"
        arm = decision.arms[0]
        seen.append(arm)
        policy.update(Observation(embedding=X, arm=arm, reward=0.0, kind="cascade-step"))
        assert policy.select(Context(embedding=X, tried=(arm,))).arms == []  # one pull, then move on
    assert sorted(seen) == sorted(ARMS)
    assert policy.select(Context(embedding=X)).info["phase"] == "exploit"
    policy.add_arm("new-model")  # a model added later is explored first
    assert policy.select(Context(embedding=X, costs={**PRICES, "new-model": 1.0})).arms == ["new-model"]


def _explored(**kwargs) -> PromptWise:
    policy = PromptWise(ARMS, seed=0, prices=PRICES, **kwargs)
    for arm in ARMS:
        policy.update(Observation(embedding=X, arm=arm, reward=1.0))
    return policy


def test_picks_argmin_cost_per_success_and_escalates_after_a_failure():
    policy = _explored()
    first = policy.select(Context(embedding=X))
    scores = first.scores
    ratio = {a: scores[a]["cost"] / scores[a]["q"] for a in ARMS}
    assert first.arms == [min(ratio, key=ratio.__getitem__)]
    q_before = scores[first.arms[0]]["q"]
    policy.update(Observation(embedding=X, arm=first.arms[0], reward=0.0, kind="cascade-step"))
    second = policy.select(Context(embedding=X, tried=tuple(first.arms)))
    assert second.arms and second.arms[0] != first.arms[0]
    # the inner-step update lowered the failed arm's optimistic success probability at this prompt
    after = policy.explain(first.arms[0], X.astype(np.float64), PRICES[first.arms[0]])
    assert after["q"] < q_before


def test_without_a_cost_weight_the_cheapest_model_per_expected_success_goes_first():
    """lambda = 0 makes 1 - lambda c / q equal to 1 for every arm; the paper's rule argmin c / q still
    orders the arms (Prop. 1), so the cheapest per expected success is called first, whatever the draw."""
    policy = _explored(cost_weight=0.0)  # every arm saw one success at X: equal q, so c / q orders by price
    for seed in range(20):
        decision = policy.select(Context(embedding=X, rng=np.random.default_rng(seed)))
        assert decision.arms == ["gpt-4o-mini"]
        assert {s["index"] for s in decision.scores.values()} == {1.0}  # the reported score, unchanged


def test_ties_in_cost_per_success_go_to_the_larger_success_probability():
    policy = _explored(cost_weight=0.05)
    policy.update(Observation(embedding=X, arm="o3-mini", reward=0.0))  # o3-mini's q falls below the others'
    policy.update(Observation(embedding=X, arm="deepseek-chat", reward=1.0))  # and deepseek's moves
    free = {arm: 0.0 for arm in ARMS}  # c / q = 0 for every arm
    q = {a: s["q"] for a, s in policy.select(Context(embedding=X, costs=free)).scores.items()}
    assert len(set(q.values())) == 3  # distinct: the tie on c / q is broken by q alone
    for seed in range(20):
        decision = policy.select(Context(embedding=X, costs=free, rng=np.random.default_rng(seed)))
        assert decision.arms == [max(q, key=q.__getitem__)]


def test_respects_max_calls_from_constraints_and_hyperparameter():
    policy = _explored(max_calls=2)
    assert policy.select(Context(embedding=X, tried=("gpt-4o-mini", "o3-mini"))).arms == []
    one = Context(embedding=X, tried=("gpt-4o-mini",), constraints={"max_calls": 1})
    assert policy.select(one).info["reason"] == "max_calls"


def test_declines_when_no_arm_is_worth_its_cost():
    policy = _explored(cost_weight=1.0)  # lambda c >= 0.75 for every arm: q <= 1 cannot beat the cheapest
    for arm in ARMS:  # make every arm look bad at X
        for _ in range(30):
            policy.update(Observation(embedding=X, arm=arm, reward=0.0))
    decision = policy.select(Context(embedding=X))
    assert decision.arms == [] and decision.info["reason"] == "no arm worth its cost"


def test_context_costs_override_prices_and_missing_costs_are_an_error():
    policy = _explored()
    cheap_o3 = {**PRICES, "o3-mini": 0.01}
    assert policy.select(Context(embedding=X, costs=cheap_o3)).arms == ["o3-mini"]
    bare = PromptWise(ARMS, seed=0, tau_exp=0)
    with pytest.raises(PolicyConfigError, match="no cost for arm"):
        bare.select(Context(embedding=X))


def test_repeats_only_when_allowed():
    policy = _explored(allow_repeat=True)
    decision = policy.select(Context(embedding=X, tried=("gpt-4o-mini",) * 3))
    assert decision.arms  # tried arms stay candidates
    plain = _explored()
    assert plain.select(Context(embedding=X, tried=tuple(ARMS))).arms == []


def test_per_step_update_defers_the_observations_to_the_end_of_the_step():
    policy = _explored(per_step_update=True, allow_repeat=True)
    first = policy.select(Context(embedding=X)).arms[0]
    n_before = policy.explain(first, X.astype(np.float64), 1.0)["n"]
    policy.update(Observation(embedding=X, arm=first, reward=0.0, kind="cascade-step"))
    assert policy.explain(first, X.astype(np.float64), 1.0)["n"] == n_before  # frozen inside the step
    assert policy.select(Context(embedding=X, tried=(first,))).arms == [first]  # Alg. 2 repeats the arm
    policy.select(Context(embedding=EYE[1]))  # the next step starts: the pending failure is folded
    assert policy.explain(first, X.astype(np.float64), 1.0)["n"] == n_before + 1


def test_promptwise_beats_random_till_succeed_on_table_1():
    """300 prompts x 3 seeds, lambda = 0.05, tau_max = 5, no repeats. Measured: PromptWise 0.70, RtS 0.66
    (oracle 0.72); required margin 0.02 in mean utility."""
    seeds = (100, 101, 102)
    pw = np.mean([run_cascades(PromptWise(ARMS, seed=s, prices=PRICES), 300, s)["utility"] for s in seeds])
    rts = np.mean([run_cascades(RandomTillSucceed(ARMS, seed=s), 300, s)["utility"] for s in seeds])
    assert pw - rts > 0.02


def test_rbf_variant_learns_and_bounds_its_window():
    policy = PromptWise(ARMS, seed=1, prices=PRICES, kernel="rbf", max_points=40)
    utility = run_cascades(policy, 150, 1)["utility"]
    assert utility > 0.6  # Table 1 oracle without repeats: 0.72; random-till-succeed about 0.66
    assert all(m.x.shape[0] <= 40 for m in policy._models.values())


def test_cascade_baselines_follow_their_rules():
    low, high = LowestCost(ARMS, seed=0, prices=PRICES), HighestCost(ARMS, seed=0, prices=PRICES)
    assert low.select(Context(embedding=X)).arms == ["gpt-4o-mini"]
    assert high.select(Context(embedding=X)).arms == ["o3-mini"]
    assert low.select(Context(embedding=X, tried=("gpt-4o-mini",))).arms == []
    greedy = GreedyTillSucceed(ARMS, seed=0, prices=PRICES)
    first = [greedy.select(Context(embedding=X)).arms[0]]
    greedy.update(Observation(embedding=X, arm=first[0], reward=0.0))
    second = greedy.select(Context(embedding=X, tried=tuple(first))).arms[0]
    assert second != first[0]  # unvisited arms (+inf) come first
    rts = RandomTillSucceed(ARMS, seed=0, max_calls=2)
    assert rts.select(Context(embedding=X, tried=("a", "b"))).arms == []


def _step(policy: PromptWise, x, key: str, tried=(), seed: int = 0):
    return policy.select(
        Context(embedding=x, tried=tuple(tried), decision_key=key, rng=np.random.default_rng(seed))
    )


def _report(policy: PromptWise, x, key: str, arm: str, reward: float) -> None:
    policy.update(Observation(embedding=x, arm=arm, reward=reward, kind="cascade-step", decision_key=key))


def test_interleaved_exploration_steps_each_stop_after_their_one_call():
    """Two decisions explore at once (A on EYE[0], B on EYE[1]); each one's re-select stops after its
    single exploration pull, whatever the other did in between."""
    policy = PromptWise(ARMS, seed=0, prices=PRICES)
    a, b = _step(policy, EYE[0], "a"), _step(policy, EYE[1], "b", seed=1)
    assert a.info["phase"] == b.info["phase"] == "explore"
    _report(policy, EYE[0], "a", a.arms[0], 0.0)
    _report(policy, EYE[1], "b", b.arms[0], 0.0)
    for x, key, first in ((EYE[0], "a", a), (EYE[1], "b", b)):
        again = _step(policy, x, key, tried=first.arms)
        assert again.arms == [] and again.info["reason"] == "exploration step done"


def test_interleaved_algorithm_2_steps_keep_their_own_pending_observations():
    """Alg. 2: decision A's failure stays pending (A's estimates frozen) while decision B starts, runs and
    ends; B's observation is folded when B ends, A's when A ends."""
    policy = _explored(per_step_update=True)

    def n(arm: str) -> float:
        return policy.explain(arm, X.astype(np.float64), 1.0)["n"]

    assert _step(policy, X, "a").arms == ["gpt-4o-mini"]  # equal q after one success each: the cheapest
    _report(policy, X, "a", "gpt-4o-mini", 0.0)
    assert _step(policy, EYE[1], "b").arms == ["gpt-4o-mini"]  # another client's prompt: A is still open
    assert n("gpt-4o-mini") == 1  # A's failure is pending
    _report(policy, EYE[1], "b", "gpt-4o-mini", 1.0)  # B succeeds: its step ends and is folded
    assert n("gpt-4o-mini") == 2
    second = _step(policy, X, "a", tried=("gpt-4o-mini",)).arms
    assert second and second != ["gpt-4o-mini"]
    _report(policy, X, "a", second[0], 1.0)  # A ends: its failure and its success are folded
    assert (n("gpt-4o-mini"), n(second[0])) == (3, 2)
    assert policy.state_dict()["learned"]["steps"] == []


def test_state_is_bounded_by_the_lru_cap_and_a_success_ends_a_decision():
    policy = _explored(per_step_update=True, max_open_decisions=2)
    for key in ("a", "b", "c"):
        _report(policy, EYE[1], key, "o3-mini", 0.0)
    assert [item["key"] for item in policy.state_dict()["learned"]["steps"]] == ["b", "c"]
    # "a" was the least recently updated: evicted, its failure folded
    assert policy.explain("o3-mini", EYE[1].astype(np.float64), 1.0)["n"] == 2
    _report(policy, EYE[1], "b", "gpt-4o-mini", 1.0)
    assert [item["key"] for item in policy.state_dict()["learned"]["steps"]] == ["c"]
    assert policy.explain("o3-mini", EYE[1].astype(np.float64), 1.0)["n"] == 3


def test_a_policy_rebuilt_mid_cascade_continues_identically():
    """Two open decisions (one exploring, one Alg. 2 step with a pending failure) survive
    state_dict -> bytes -> from_state: the copy makes the same choices and ends in the same state."""
    policy = PromptWise(
        [*ARMS, "new-model"], seed=0, prices={**PRICES, "new-model": 2.0}, per_step_update=True
    )
    for arm in ARMS:
        policy.update(Observation(embedding=X, arm=arm, reward=1.0))
    assert _step(policy, EYE[1], "e").arms == ["new-model"]
    _report(policy, EYE[1], "e", "new-model", 0.0)
    first = _step(policy, X, "p").arms  # "new-model" is explored now: an exploit step
    _report(policy, X, "p", first[0], 0.0)
    copy = PromptWise.from_state(decode_state(encode_state(policy.state_dict())))
    assert [s["key"] for s in copy.state_dict()["learned"]["steps"]] == ["e", "p"]
    for p in (policy, copy):
        assert _step(p, EYE[1], "e", tried=("new-model",)).arms == []
    nxt = [_step(p, X, "p", tried=first).arms for p in (policy, copy)]
    assert nxt[0] == nxt[1] and nxt[0]
    for p in (policy, copy):
        _report(p, X, "p", nxt[0][0], 1.0)
    assert encode_state(policy.state_dict()) == encode_state(copy.state_dict())


def test_a_state_saved_before_decision_keys_loads_its_single_slot_as_the_unkeyed_record():
    policy = _explored(per_step_update=True)
    state = policy.state_dict()
    learned = {k: v for k, v in state["learned"].items() if k != "steps"}
    learned["pending"] = [{"arm": "o3-mini", "x": X.astype(np.float64), "r": 0.0}]
    learned["exploring"] = None
    old = PromptWise.from_state({**state, "learned": learned})
    (step,) = old.state_dict()["learned"]["steps"]
    assert (step["key"], step["calls"], step["explored"], step["arms"]) == (None, 1, False, ["o3-mini"])
    np.testing.assert_array_equal(step["pending"][0]["x"], X)
    old.select(Context(embedding=EYE[1]))  # an unkeyed new prompt ends that step: its failure is folded
    assert old.explain("o3-mini", X.astype(np.float64), 1.0)["n"] == 2


def test_an_offline_log_row_is_folded_at_once_and_opens_no_decision():
    policy = _explored(per_step_update=True)
    n_before = policy.explain("o3-mini", EYE[1].astype(np.float64), 1.0)["n"]
    policy.update(
        Observation(embedding=EYE[1], arm="o3-mini", reward=0.0, kind="offline", decision_key="row-7/o3-mini")
    )
    # no pending Alg. 2 step: the row is in the arm's model now, and no record is kept for its key
    assert policy.explain("o3-mini", EYE[1].astype(np.float64), 1.0)["n"] == n_before + 1
    assert policy.state_dict()["learned"]["steps"] == []


def test_judged_success_is_bayes_rule_on_the_verdict():
    from routers.logistic_ucb import judged_success

    # p = 0.3, TPR 0.8, TNR 0.9: pass -> 0.24 / (0.24 + 0.1 * 0.7) = 0.24 / 0.31;
    # fail -> 0.2 * 0.3 / (0.06 + 0.9 * 0.7) = 0.06 / 0.69
    assert judged_success(0.3, 1.0, 0.8, 0.9) == pytest.approx(0.24 / 0.31)
    assert judged_success(0.3, 0.0, 0.8, 0.9) == pytest.approx(0.06 / 0.69)
    # a graded verdict mixes the two posteriors
    assert judged_success(0.3, 0.25, 0.8, 0.9) == pytest.approx(0.25 * 0.24 / 0.31 + 0.75 * 0.06 / 0.69)
    # a trusted judge: the posterior is the verdict; a pass from a judge that never passes says nothing
    assert judged_success(0.3, 1.0, 1.0, 1.0) == 1.0 and judged_success(0.3, 0.0, 1.0, 1.0) == 0.0
    assert judged_success(0.3, 1.0, 0.0, 1.0) == 0.3


def test_a_verdict_is_folded_as_its_posterior_success_probability():
    from routers.logistic_fit import LinearLogisticArm

    policy = PromptWise(["a"], seed=0, prices={"a": 0.001}, judge_tpr=0.6, judge_tnr=0.95, dim=2)
    x = np.array([1.0, 0.0])
    policy.update(Observation(embedding=x, arm="a", reward=0.0))
    # a fresh arm's estimate is sigma(0) = 0.5: P(success | fail) = 0.4 * 0.5 / (0.4 * 0.5 + 0.95 * 0.5)
    reference = LinearLogisticArm(2, 1.0, False, 1.5, 20000)
    reference.observe(x, 0.2 / 0.675)
    np.testing.assert_allclose(policy._models["a"].theta, reference.theta)
    trusted = PromptWise(["a"], seed=0, prices={"a": 0.001}, dim=2)
    trusted.update(Observation(embedding=x, arm="a", reward=0.0))
    assert trusted._models["a"].theta[0] < policy._models["a"].theta[0] < 0


def test_correcting_for_the_judge_changes_where_the_cascade_stops():
    """Six fail verdicts of the strong model at X: trusted, its q falls below lambda c = 0.3 and the cascade
    stops after the cheap model failed; a judge of TPR 0.6 fails right answers often, so the same verdicts
    leave q above 0.3 and the cascade calls the strong model."""
    stops = {}
    for tpr in (1.0, 0.6):
        policy = PromptWise(
            ["cheap", "strong"],
            seed=0,
            prices={"cheap": 0.001, "strong": 0.01},
            cost_weight=30.0,
            tau_exp=0,
            alpha=0.5,
            judge_tpr=tpr,
            judge_tnr=0.95,
        )
        for _ in range(6):
            policy.update(Observation(embedding=np.array([1.0, 0.0]), arm="strong", reward=0.0))
        decision = policy.select(Context(embedding=np.array([1.0, 0.0]), tried=("cheap",), decision_key="k"))
        stops[tpr] = (decision.arms, decision.scores["strong"]["q"])
    assert stops[1.0][0] == [] and stops[1.0][1] < 0.3
    assert stops[0.6][0] == ["strong"] and stops[0.6][1] > 0.3
