"""Run with the pre-change code (cwd = a checkout before typed hyperparameters): writes one state per policy."""

import sys
from pathlib import Path

import numpy as np

from routers.base import Context, Observation, encode_state
from routers.registry import POLICIES, build_policy

HYPER = {
    "always": {"model": "a"},
    "linucb": {"alpha": 0.5, "cost_target": 0.01, "incumbent": "a", "max_loss": 0.1},
    "knn-ucb": {"k_max": 8, "cost_weight": 2.0},
    "balrog": {"budget": 0.5, "k_max": 8},
    "pak-ucb": {"retry": True, "max_calls": 2, "window": 16},
    "c2mab-v": {"prices": {"a": 0.01, "b": 0.002, "c": 0.005}, "cost_target": 0.008},
    "promptwise": {"prices": {"a": 0.01, "b": 0.002, "c": 0.005}},
    "mixture-greedy": {"init_pulls": 1},
}
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
arms = ["a", "b", "c"]
costs = {"a": 0.01, "b": 0.002, "c": 0.005}
for name in sorted(POLICIES):
    policy = build_policy(name, arms, seed=3, hyperparameters=HYPER.get(name, {}))
    rng = np.random.default_rng(0)
    for t in range(12):
        x = rng.normal(size=4).astype(np.float32)
        x /= np.linalg.norm(x)
        decision = policy.select(
            Context(embedding=x, costs=costs, rng=np.random.default_rng(t), decision_key=str(t))
        )
        for arm in decision.arms[:2] or ["a"]:
            policy.update(
                Observation(
                    embedding=x,
                    arm=arm,
                    reward=float(rng.random() < 0.6),
                    cost=costs[arm],
                    output_embedding=rng.normal(size=4),
                    decision_key=str(t),
                )
            )
    (out / f"{name}.json").write_bytes(encode_state(policy.state_dict()))
