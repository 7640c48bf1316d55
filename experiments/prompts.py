"""Real prompts for the service benchmarks: MMLU questions from the shared RouteLLM data (read in place,
never copied), or numbered synthetic sentences when the data is not there."""

from __future__ import annotations

import csv
from pathlib import Path

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def mmlu_prompts(data: Path, n: int) -> list[str]:
    """The first ``n`` MMLU prompts, subject files in name order; synthetic ones if the files are absent."""
    out: list[str] = []
    for path in sorted((data / "routellm" / "mmlu").glob("mmlu_*.csv")):
        with path.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                out.append(row["prompt"])
                if len(out) == n:
                    return out
    words = [
        "routing",
        "bandit",
        "prompt",
        "model",
        "cost",
        "reward",
        "latency",
        "cache",
        "embedding",
        "replica",
    ]
    while len(out) < n:
        i = len(out)
        out.append(f"synthetic question {i}: " + " ".join(words[(i + k) % len(words)] for k in range(40)))
    return out
