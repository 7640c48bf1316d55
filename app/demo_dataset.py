"""The demo's synthetic replay dataset: two topics where different demo models are best.

Three rows in five are everyday writing, two are maths. Maths prompts are answered correctly by
``demo-large`` with probability 0.9 and by ``demo-small`` with 0.3; everyday writing prompts by
``demo-small`` with 0.95 and by ``demo-large`` with 0.6 (long-winded answers that users rate down). Each
row logs five Bernoulli reward samples per model, so replayed feedback is noisy, and answers of
``TOKENS_OUT`` tokens, which the replay backends bill. ``demo-large`` is the
better single model (0.72 against 0.69 on average) and costs about 30 times more per token: the
incumbent a team would call for everything. The router starts knowing nothing and should learn to keep
maths on the large model and move the writing, most of the traffic, to the small one, saving its cost
without falling below the incumbent's quality. Generated from templates with a fixed seed, never
downloaded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from replay_dataset.files import write_dataset

SAMPLES = 5
TOKENS_OUT = 200  # every logged answer's length: what each call is billed, and each model's estimate
MODELS = [
    {
        "name": "demo-small",
        "usd_per_mtok_in": 0.6,
        "usd_per_mtok_out": 0.6,
        "usd_per_call": 0.0,
        "default_tokens_out": TOKENS_OUT,
    },
    {
        "name": "demo-large",
        "usd_per_mtok_in": 10.0,
        "usd_per_mtok_out": 30.0,
        "usd_per_call": 0.0,
        "default_tokens_out": TOKENS_OUT,
    },
]
TOPICS: dict[str, tuple[dict[str, float], list[str]]] = {
    "maths": (
        {"demo-small": 0.3, "demo-large": 0.9},
        [
            "Prove that the square root of {p} is irrational.",
            "Compute the derivative of x^{k} times sin(x) and simplify it.",
            "Solve the equation {a}x + {b} = {c} for x and check the solution.",
            "How many prime numbers are there below {n}? Explain the counting argument.",
            "Evaluate the integral of x^{k} e^x from 0 to 1 exactly.",
            "Find all integer solutions of x^2 - {p}y^2 = 1 with y below {n}.",
        ],
    ),
    "writing": (
        {"demo-small": 0.95, "demo-large": 0.6},
        [
            "Write a friendly greeting card message for a {occasion}.",
            "Suggest three fun names for a new {pet}.",
            "Rewrite this sentence more politely: 'send me the {thing} now'.",
            "Translate 'good morning, dear {person}' into French.",
            "Write a short thank-you note to my {person} for the {thing}.",
            "Give me a catchy title for a blog post about my {pet}.",
        ],
    ),
}
# the topic of row i is MIX[i % len(MIX)]: three rows in five are everyday writing
MIX = ("writing", "maths", "writing", "maths", "writing")
FILLERS = {
    "p": ["2", "3", "5", "7", "11", "13"],
    "k": ["2", "3", "4", "5"],
    "a": ["2", "3", "7"],
    "b": ["4", "9", "12"],
    "c": ["10", "30", "41"],
    "n": ["100", "500", "1000"],
    "occasion": ["birthday", "wedding", "graduation", "retirement"],
    "pet": ["cat", "puppy", "parrot", "goldfish"],
    "thing": ["report", "flowers", "invoice", "book"],
    "person": ["neighbour", "teacher", "colleague", "aunt"],
}


def demo_rows(n: int, seed: int = 0) -> list[dict[str, object]]:
    """``n`` rows, the topics in the order of ``MIX``; a prompt may repeat (its rows then differ only in
    samples)."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, object]] = []
    for i in range(n):
        topic = MIX[i % len(MIX)]
        probabilities, templates = TOPICS[topic]
        template = templates[int(rng.integers(len(templates)))]
        fills = {key: values[int(rng.integers(len(values)))] for key, values in FILLERS.items()}
        prompt = template.format(**fills)
        rewards = {m: [float(v) for v in rng.random(SAMPLES) < p] for m, p in probabilities.items()}
        responses = {m: f"({m}) an answer about {topic}" for m in probabilities}
        rows.append(
            {
                "id": f"demo-{len(rows)}",
                "topic": topic,
                "prompt": prompt,
                "rewards": rewards,
                "responses": responses,
                "tokens_out": {m: TOKENS_OUT for m in probabilities},
            }
        )
    return rows


def write_demo_dataset(directory: str | Path, n: int = 240, seed: int = 0) -> Path:
    """Write ``models.json`` and ``rows.jsonl`` into ``directory`` (created if needed)."""
    description = "banditgate demo: maths prompts need demo-large, everyday writing is best on demo-small"
    return write_dataset(directory, MODELS, demo_rows(n, seed), (0.0, 1.0), description)
