"""Share of pulls on the worse of two prompt-independent arms (Bernoulli 0.80 vs 0.72) under five caps
on kNN-UCB's k: k_max 32 (the first default), k <= N_g up to 256 (k over an arm's whole history), k <=
max(32, ceil(sqrt N_g)), k <= max(32, ceil(N_g / 4)) and k <= max(32, ceil(N_g / 2)) (the default),
each at most k_max = 256.
16-d random unit prompts, T = 8000 rounds. With ``--topic-split``, the same caps on the embed-text
test's set instead (tests/integration/test_embed_text.py: 200 prompts behind a 1,500-piece shared
prefix, arm a right on maths, b on history/religion, each prompt played once): mean reward over rounds
100-199 per seed.

    nice -n 10 python -m experiments.knn_cap --seeds 0,1,2
    nice -n 10 python -m experiments.knn_cap --seeds 0,1,2,3,4 --topic-split
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.embedding_cache import embed_prompts
from bench.mmlu_questions import few_shot_prefix, mmlu_questions
from embeddings.prompt_text import EmbedText
from routers.base import Context, Observation
from routers.knn_ucb import KnnUCB

TOPICS = Path(__file__).resolve().parents[1] / "tests" / "data" / "routellm" / "topics"  # committed data
MATH = ["elementary_mathematics", "high_school_mathematics"]
HUMANITIES = ["prehistory", "world_religions"]
PREFIX_PIECES = 1500


class SqrtCapKnnUCB(KnnUCB):
    """k <= min(N_g, k_max, max(32, ceil(sqrt N_g)))."""

    def k_cap(self, n: int) -> int:
        return min(self.k_max, max(32, math.ceil(math.sqrt(n))))


class QuarterCapKnnUCB(KnnUCB):
    """k <= min(N_g, k_max, max(32, ceil(N_g / 4)))."""

    def k_cap(self, n: int) -> int:
        return min(self.k_max, max(32, math.ceil(n / 4)))


class HistoryCapKnnUCB(KnnUCB):
    """k <= min(N_g, k_max): eq. 5's range under the work cap."""

    def k_cap(self, n: int) -> int:
        return self.k_max


def share_of_worse(policy: KnnUCB, seed: int, rounds: int) -> tuple[float, int]:
    rng = np.random.default_rng(seed)
    means = {"good": 0.80, "bad": 0.72}
    worse = 0
    k = 0
    for _ in range(rounds):
        x = rng.normal(size=16).astype(np.float32)
        x /= np.linalg.norm(x)
        decision = policy.select(Context(embedding=x))
        arm = decision.arms[0]
        worse += arm == "bad"
        k = int(decision.scores["good"]["k"])
        policy.update(Observation(embedding=x, arm=arm, reward=float(rng.random() < means[arm])))
    return worse / rounds, k


def topic_split_reward(policy: KnnUCB, seed: int, vectors: np.ndarray, topics: np.ndarray) -> float:
    """The embed-text test's loop: mean reward over rounds 100-199 of one seed."""
    arms = ["a", "b"]
    rewards = []
    for t, i in enumerate(np.random.default_rng(seed).permutation(len(topics))):
        decision = policy.select(Context(embedding=vectors[i], rng=np.random.default_rng([seed, t])))
        reward = float(decision.arms[0] == arms[topics[i]])
        policy.update(Observation(embedding=vectors[i], arm=decision.arms[0], reward=reward))
        rewards.append(reward)
    return float(np.mean(rewards[100:]))


def topic_split_set(topics_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """The embed-text test's 200 prompts (tests/integration/test_embed_text.py: a 1,500-piece biology
    prefix, then 100 maths and 100 history/religion questions from ``topics_dir``), embedded with
    MiniLM under the default rule, and their topics."""
    prefix = few_shot_prefix(topics_dir, "high_school_biology", "biology", PREFIX_PIECES)
    questions = mmlu_questions(topics_dir, MATH, 100) + mmlu_questions(topics_dir, HUMANITIES, 100)
    vectors = embed_prompts([prefix + q for q in questions], "minilm", progress=False, rule=EmbedText())
    return vectors, np.array([0] * 100 + [1] * 100)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--rounds", type=int, default=8000)
    parser.add_argument("--topic-split", action="store_true", help="the embed-text test's set instead")
    parser.add_argument(
        "--topics", type=Path, default=TOPICS, help="the MMLU csv folder of --topic-split's questions"
    )
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = ["a", "b"] if args.topic_split else ["good", "bad"]
    variants = {
        "k_max 32": lambda s: KnnUCB(arms, seed=s, k_max=32),
        "k <= N_g, <= 256": lambda s: HistoryCapKnnUCB(arms, seed=s, k_max=256),
        "max(32, ceil(sqrt N_g)), <= 256": lambda s: SqrtCapKnnUCB(arms, seed=s, k_max=256),
        "max(32, ceil(N_g / 4)), <= 256": lambda s: QuarterCapKnnUCB(arms, seed=s),
        "max(32, ceil(N_g / 2)), <= 256 (default)": lambda s: KnnUCB(arms, seed=s),
    }
    if args.topic_split:
        vectors, topics = topic_split_set(args.topics)
        print("| cap on k | mean reward, rounds 100-199, per seed | min |")
        print("|---|---|---|")
        for name, make in variants.items():
            got = [topic_split_reward(make(s), s, vectors, topics) for s in seeds]
            print(f"| {name} | {', '.join(f'{v:.2f}' for v in got)} | {min(got):.2f} |", flush=True)
        return
    print("| cap on k | share on the worse arm per seed | mean | good arm's k at the end |")
    print("|---|---|---|---|")
    for name, make in variants.items():
        runs = [share_of_worse(make(s), s, args.rounds) for s in seeds]
        shares = ", ".join(f"{v:.3f}" for v, _ in runs)
        ks = ", ".join(str(k) for _, k in runs)
        print(f"| {name} | {shares} | {np.mean([v for v, _ in runs]):.3f} | {ks} |", flush=True)


if __name__ == "__main__":
    main()
