"""thompson-set learns the same from the same feedback wherever it is folded (replica-safe updates)."""

import numpy as np

from bench.synth_promptwise import ARMS, PRICES
from routers.base import Context, Observation, decision_rng
from routers.set_baselines import ThompsonSet

X = np.eye(3, dtype=np.float32)[0]


def _feed(policy: ThompsonSet, t: int) -> None:
    for arm, reward in zip(ARMS, (0.3, 0.6, 0.9), strict=True):
        policy.update(Observation(embedding=X, arm=arm, reward=reward, cost=PRICES[arm], decision_key=str(t)))


def test_two_copies_fed_the_same_feedback_learn_the_same_whatever_they_served():
    """Replica B serves extra selects (drawing from its own generator) between the same observations:
    the Bernoulli trick's draws are keyed by the decision, so both end with the same posteriors."""
    a, b = ThompsonSet(ARMS, seed=3, prices=PRICES), ThompsonSet(ARMS, seed=3, prices=PRICES)
    for t in range(40):
        for _ in range(t % 3):
            b.select(Context(embedding=X, costs=PRICES))
        _feed(a, t)
        _feed(b, t)
    learned_a, learned_b = a.state_dict()["learned"], b.state_dict()["learned"]
    assert learned_a["beta"] == learned_b["beta"]
    assert learned_a["stats"] == learned_b["stats"]
    assert 0 < learned_a["beta"]["deepseek-chat"][0] < 40  # a reward of 0.9 is not always a success


def test_the_draw_is_the_decisions_keyed_generator():
    """s = 1[u < X] with u the first number of decision_rng(seed, '["<key>", "<arm>", "<kind>"]')."""
    policy = ThompsonSet(ARMS, seed=3, prices=PRICES)
    expected = [0.0, 0.0]
    for t in range(30):
        policy.update(Observation(embedding=X, arm="o3-mini", reward=0.5, decision_key=f"d{t}"))
        s = float(float(decision_rng(3, f'["d{t}", "o3-mini", "bandit"]').random()) < 0.5)
        expected = [expected[0] + s, expected[1] + 1.0 - s]
    assert policy.state_dict()["learned"]["beta"]["o3-mini"] == expected
