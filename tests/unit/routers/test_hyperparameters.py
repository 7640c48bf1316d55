"""Typed hyperparameters: every bad value is a PolicyConfigError naming its key, every registered policy
builds with its defaults and round-trips its state, and states saved before the change still load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.policy_spec import check_specs, parse_spec
from routers.base import Context, Observation, PolicyConfigError, decode_state, encode_state
from routers.conservative import EVIDENCE_K
from routers.hyperparameters import MAX_DIM, Hyperparameters, combine
from routers.knn_ucb import KnnUCB
from routers.linear import LinUCB
from routers.registry import (
    POLICIES,
    build_policy,
    check_router,
    hyperparameter_defaults,
    hyperparameter_model,
    hyperparameter_schema,
    policy_dim,
    restore_policy,
)
from routers.simple import Always

ARMS = ["a", "b", "c"]
COSTS = {"a": 0.01, "b": 0.002, "c": 0.005}
LEGACY = Path(__file__).resolve().parents[2] / "data" / "policy_states"
REQUIRED: dict[str, dict[str, Any]] = {"always": {"model": "a"}}

BAD: list[tuple[str, dict[str, Any], str]] = [
    ("linucb", {"alpha": [1, 2]}, "hyperparameter alpha: Input should be a valid number, got [1, 2]"),
    ("linucb", {"alpha": float("nan")}, "hyperparameter alpha: Input should be a finite number"),
    ("linucb", {"alpha": True}, "hyperparameter alpha: Input should be a valid number, got True"),
    ("linucb", {"dim": 2147483648}, f"hyperparameter dim: Input should be less than or equal to {MAX_DIM}"),
    ("linucb", {"dim": 0}, "hyperparameter dim: Input should be greater than or equal to 1"),
    ("knn-ucb", {"dim": 2147483648}, "hyperparameter dim"),
    ("promptwise", {"dim": 8.0}, "hyperparameter dim: Input should be a valid integer"),
    ("pak-ucb", {"dim": -3}, "hyperparameter dim"),
    ("knn-ucb", {"k_max": 0}, "hyperparameter k_max: Input should be greater than or equal to 1"),
    ("knn-ucb", {"hnsw_m": 2**40}, "hyperparameter hnsw_m"),
    ("knn-ucb", {"theta": "1"}, "hyperparameter theta: Input should be a valid number, got '1'"),
    ("knn-ucb", {"preset": "fast"}, "hyperparameter preset: Input should be 'scale-free' or 'paper'"),
    ("balrog", {"budget": 1.5}, "hyperparameter budget"),
    ("balrog", {"trigger": "warm"}, "trigger 'warm' needs horizon or max_queries"),
    (
        "promptwise",
        {"prices": {"a": -1}},
        "hyperparameter prices['a']: Input should be greater than or equal to 0",
    ),
    ("promptwise", {"delta": 1}, "hyperparameter delta"),
    ("lowest-cost", {"max_calls": 0}, "hyperparameter max_calls"),
    ("c2mab-v", {"reward": "max"}, "hyperparameter reward"),
    ("c2mab-v", {"cost_target": 0}, "hyperparameter cost_target: Input should be greater than 0"),
    ("cucb", {"delta": 0}, "hyperparameter delta"),
    ("thompson-set", {"costs": "median"}, "hyperparameter costs"),
    ("mixture-ucb-cab", {"reference": [[1.0, 2.0], [3.0]]}, "reference rows must all have the same length"),
    ("mixture-greedy", {"alpha_floor": 1.0}, "hyperparameter alpha_floor"),
    ("vanilla-ucb", {"rff_dim": 2147483648}, "hyperparameter rff_dim"),
    ("pak-ucb", {"retry": 1}, "hyperparameter retry: Input should be a valid boolean"),
    ("pak-ucb", {"retry": True, "max_calls": 0}, "hyperparameter max_calls"),
    ("always", {}, "hyperparameter model: Field required"),
    ("always", {"model": ""}, "hyperparameter model: String should have at least 1 character"),
    # an arm name is as long as a backend's name column, String(200)
    ("always", {"model": "m" * 201}, "hyperparameter model: String should have at most 200 characters"),
    ("eps-greedy", {"eps": 2}, "hyperparameter eps: Input should be less than or equal to 1"),
    ("thompson", {"prior": "poisson"}, "hyperparameter prior"),
    # the wrappers' keys
    (
        "knn-ucb",
        {"cost_weight": -1},
        "hyperparameter cost_weight: Input should be greater than or equal to 0",
    ),
    ("knn-ucb", {"cost_target": 0}, "hyperparameter cost_target: Input should be greater than 0"),
    ("linucb", {"pacing_rate": float("inf")}, "hyperparameter pacing_rate: Input should be a finite number"),
    ("greedy", {"cost_confidence": -1}, "hyperparameter cost_confidence"),
    ("greedy", {"incumbent": 3}, "hyperparameter incumbent: Input should be a valid string"),
    ("greedy", {"incumbent": ""}, "hyperparameter incumbent"),
    ("greedy", {"max_loss": 1.0}, "hyperparameter max_loss: Input should be less than 1"),
    ("greedy", {"max_loss": -0.1}, "hyperparameter max_loss"),
    ("greedy", {"delta": 0}, "hyperparameter delta"),
    ("greedy", {"reward_min": 1, "reward_max": 0}, "reward_min must be < reward_max"),
]


@pytest.mark.parametrize(("name", "hyper", "message"), BAD)
def test_a_bad_value_is_refused_with_a_message_naming_its_key(
    name: str, hyper: dict[str, Any], message: str
) -> None:
    with pytest.raises(PolicyConfigError) as caught:
        build_policy(name, ARMS, 0, hyper)
    assert message in str(caught.value)
    with pytest.raises(PolicyConfigError):
        check_router(name, ARMS, hyper)  # the same answer before anything is built


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_an_unknown_key_is_named_with_every_known_one(name: str) -> None:
    with pytest.raises(PolicyConfigError) as caught:
        build_policy(name, ARMS, 0, {**REQUIRED.get(name, {}), "gamma_typo": 1})
    known = list(hyperparameter_model(name).model_fields)
    assert str(caught.value) == f"unknown hyperparameter 'gamma_typo'; known: {', '.join(known)}"


def test_the_wrappers_keys_are_known_to_every_single_choice_policy() -> None:
    for name in (
        "linucb",
        "knn-ucb",
        "balrog",
        "pak-ucb",
        "random",
        "always",
        "greedy",
        "eps-greedy",
        "thompson",
    ):
        fields = hyperparameter_model(name).model_fields
        assert {"cost_weight", "cost_target", "pacing_rate", "incumbent", "max_loss"} <= set(fields), name
    assert {"retry", "max_calls"} <= set(hyperparameter_model("pak-ucb").model_fields)
    assert "cost_target" in hyperparameter_model("c2mab-v").model_fields
    assert "incumbent" not in hyperparameter_model("promptwise").model_fields


def test_direct_construction_validates_too() -> None:
    with pytest.raises(PolicyConfigError, match="hyperparameter k_max"):
        KnnUCB(ARMS, 0, k_max=0)
    with pytest.raises(PolicyConfigError, match="unknown hyperparameter 'ridg'"):
        LinUCB(ARMS, 0, ridg=1.0)
    # numpy numbers and arrays are the numbers and lists they hold
    policy = LinUCB(ARMS, 0, alpha=np.float64(0.5), dim=np.int64(4))
    assert policy.config == {"alpha": 0.5, "ridge": 1.0, "dim": 4, "shared": False}


def test_arm_references_and_the_dimension_are_checked_at_router_creation_only() -> None:
    with pytest.raises(PolicyConfigError, match=r"hyperparameter model: 'z' is not one of the router's arms"):
        check_router("always", ARMS, {"model": "z"})
    with pytest.raises(PolicyConfigError, match="hyperparameter incumbent: 'z'"):
        check_router("knn-ucb", ARMS, {"incumbent": "z", "max_loss": 0.1})
    with pytest.raises(PolicyConfigError, match=r"hyperparameter dim: 7 is not the dimension .* \(384\)"):
        check_router("linucb", ARMS, {"dim": 7}, embedding_dim=384)
    check_router("linucb", ARMS, {"dim": 384}, embedding_dim=384)
    check_router("always", ARMS, {"model": "z"}, arm_references=False)  # a PATCH that only moves arms
    # built later (a restart, a restore) with the arm gone: the documented fallback, no error
    policy = build_policy("always", ["b", "c"], 0, {"model": "a"})
    decision = policy.select(Context(embedding=np.ones(2, np.float32), rng=np.random.default_rng(0)))
    assert decision.arms[0] in ("b", "c") and decision.info == {"fallback": True}
    always = build_policy("always", ARMS, 0, {"model": "a"})
    always.remove_arm("a")
    restored = restore_policy(decode_state(encode_state(always.state_dict())))
    assert isinstance(restored, Always) and restored.model == "a" and restored.arms == ["b", "c"]


def test_bench_specs_go_through_the_same_checks() -> None:
    with pytest.raises(
        PolicyConfigError, match="hyperparameter alpha: Input should be a valid number, got 'x'"
    ):
        check_specs([parse_spec("linucb:alpha=x")], ARMS, None)
    with pytest.raises(PolicyConfigError, match="hyperparameter model: 'gpt-9' is not one of"):
        check_specs([parse_spec("always:model=gpt-9")], ARMS, None)
    with pytest.raises(PolicyConfigError, match="unknown hyperparameter 'kmax'; known: preset"):
        check_specs([parse_spec("knn-ucb:kmax=8")], ARMS, None)
    check_specs([parse_spec("always:model=b"), parse_spec("knn-ucb:k_max=8,incumbent=a")], ARMS, 0.5)


def _play(policy: Any, rounds: int = 8) -> None:
    rng = np.random.default_rng(0)
    for t in range(rounds):
        x = rng.normal(size=4).astype(np.float32)
        x /= np.linalg.norm(x)
        context = Context(embedding=x, costs=COSTS, rng=np.random.default_rng(t), decision_key=str(t))
        for arm in policy.select(context).arms[:2] or ["a"]:
            reward = float(rng.random() < 0.6)
            output = rng.normal(size=4)
            policy.update(
                Observation(x, arm, reward, COSTS[arm], output_embedding=output, decision_key=str(t))
            )


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_builds_with_its_defaults_and_round_trips_its_state(name: str) -> None:
    policy = build_policy(name, ARMS, 5, REQUIRED.get(name, {}))
    fresh = encode_state(policy.state_dict())
    assert encode_state(restore_policy(decode_state(fresh)).state_dict()) == fresh
    _play(policy)
    state = encode_state(policy.state_dict())
    restored = restore_policy(decode_state(state))
    assert encode_state(restored.state_dict()) == state

    def probe() -> Context:
        return Context(embedding=np.full(4, 0.5, np.float32), costs=COSTS, rng=np.random.default_rng(9))

    assert restored.select(probe()).arms == policy.select(probe()).arms
    # the state's config rebuilds the same policy through the registry (an import sets it as the
    # router's hyperparameters)
    config = decode_state(state).get("config")
    if config is not None:
        rebuilt = build_policy(name, ARMS, 5, config)
        assert rebuilt.state_dict()["config"] == decode_state(state)["config"]


def _as_written_now(state: Any) -> Any:
    """A legacy state in the format the current code writes, with the changes made on purpose since it
    was saved: the cost pacer remembers its ``recent`` decision keys (one request per decision), a retry
    cascade is a ``PolicyWrapper`` (``config`` and ``seed`` at the top), a kNN policy's config names its
    vectors' ``precision`` (float32 for a state saved without it), the conservative wrapper's config
    names its ``incumbent_by`` and ``objective`` (price, reward: what a state saved without them did) and
    its ``evidence_k`` (the default), and its state holds the per-context ``charged`` sums (none), and
    PromptWise's config names its judge's rates ``judge_tpr`` / ``judge_tnr`` (1.0, trust the verdict,
    without them)."""
    if isinstance(state, list):
        return [_as_written_now(item) for item in state]
    if not isinstance(state, dict):
        return state
    state = {key: _as_written_now(value) for key, value in state.items()}
    if state.get("policy") in ("knn-ucb", "balrog") and "precision" not in state["config"]:
        state["config"]["precision"] = "float32"
    if state.get("policy") in ("promptwise", "promptwise-rbf") and "judge_tpr" not in state["config"]:
        state["config"] = {**state["config"], "judge_tpr": 1.0, "judge_tnr": 1.0}
    if "multiplier" in state and "spent" in state and "recent" not in state:
        state["recent"] = []
    conservative = state.get("conservative")
    if isinstance(conservative, dict) and "charged" not in conservative:
        added = {"incumbent_by": "price", "objective": "reward"}
        conservative["config"] = {**conservative["config"], **added}
        conservative["charged"] = [0.0, 0.0]
        state["config"] = {**state["config"], **added}
    if isinstance(conservative, dict) and "evidence_k" not in conservative["config"]:
        conservative["config"] = {**conservative["config"], "evidence_k": EVIDENCE_K}
        state["config"] = {**state["config"], "evidence_k": EVIDENCE_K}
    retry = state.get("retry")
    if isinstance(retry, dict) and "config" not in retry:
        settings = {"retry": True, "max_calls": retry["max_calls"]}
        state["retry"] = {"config": settings}
        state["config"] = {**state["inner"]["config"], **settings}
        state["seed"] = state["inner"]["seed"]
    return state


@pytest.mark.parametrize("path", sorted(LEGACY.glob("*.json")), ids=lambda p: p.stem)
def test_a_state_saved_before_typed_hyperparameters_still_loads(path: Path) -> None:
    saved = path.read_bytes()
    restored = restore_policy(decode_state(saved))
    again = encode_state(restored.state_dict())
    assert json.loads(again) == _as_written_now(json.loads(saved))
    _play(restored, rounds=2)  # and it still plays


def test_the_published_schema_and_defaults() -> None:
    # every policy but `default`, whose states name the concrete policy it resolves to
    assert len(list(LEGACY.glob("*.json"))) == len(POLICIES) - 1
    for name in POLICIES:
        schema = hyperparameter_schema(name)
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(schema["properties"]) == set(hyperparameter_model(name).model_fields)
        json.dumps(hyperparameter_defaults(name), allow_nan=False)
    assert hyperparameter_schema("promptwise-rbf")["properties"]["kernel"]["default"] == "rbf"
    assert hyperparameter_defaults("promptwise-rbf")["kernel"] == "rbf"
    assert hyperparameter_defaults("promptwise")["kernel"] == "linear"
    assert hyperparameter_defaults("default") == hyperparameter_defaults("knn-ucb")  # plain: no own value
    assert hyperparameter_defaults("promptwise")["cost_target"] is None  # paced cascades take a target
    dim = hyperparameter_schema("linucb")["properties"]["dim"]["anyOf"][0]
    assert dim == {"type": "integer", "minimum": 1, "maximum": MAX_DIM}
    assert "model" in hyperparameter_schema("always")["required"]


def test_policy_dim_sees_through_wrappers_and_retry() -> None:
    assert policy_dim(build_policy("knn-ucb", ARMS, 0, {"dim": 4, "cost_weight": 1.0, "incumbent": "a"})) == 4
    assert policy_dim(build_policy("pak-ucb", ARMS, 0, {"dim": 6, "retry": True})) == 6
    assert policy_dim(build_policy("linucb", ARMS, 0, {})) is None


def test_combined_models_refuse_a_key_declared_twice() -> None:
    class One(Hyperparameters):
        x: int = 1

    class Two(Hyperparameters):
        x: int = 2

    with pytest.raises(PolicyConfigError, match=r"\['x'\] are declared twice"):
        combine("Both", One, Two)
