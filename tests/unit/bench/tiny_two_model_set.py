"""A 6-prompt, 2-model set whose reference points are computed by hand (``bench frontier`` and
``bench references`` tests): A costs 0.001 USD a call, B 0.004; rewards per prompt ``REWARDS``."""

from __future__ import annotations

from pathlib import Path

from replay_dataset.files import write_dataset

# per prompt: (reward of A, reward of B)
REWARDS = [(1.0, 1.0), (0.0, 1.0), (0.0, 0.0), (1.0, 0.0), (0.5, 1.0), (0.0, 1.0)]
CONTEXTS = [[1, 0], [0.9, 0.1], [0.5, 0.5], [0.1, 0.9], [0, 1], [0.7, 0.3]]


def write_tiny_set(folder: Path) -> Path:
    models = [
        {"name": name, "usd_per_call": price, "default_tokens_out": 0}
        for name, price in (("A", 0.001), ("B", 0.004))
    ]
    rows = [
        {"id": f"p{i}", "prompt": f"prompt {i}", "rewards": {"A": a, "B": b}, "context": CONTEXTS[i]}
        for i, (a, b) in enumerate(REWARDS)
    ]
    return write_dataset(folder, models, rows, (0.0, 1.0), "tiny frontier set")
