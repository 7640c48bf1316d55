"""Real sentences for tests: MMLU questions read from ../shared/data (never copied into the repo)."""

from __future__ import annotations

import csv
from pathlib import Path

from tests.conftest import SHARED_DATA

MMLU = SHARED_DATA / "routellm" / "mmlu"


def mmlu_questions(subjects: list[str], n: int) -> list[str]:
    """The first ``n`` distinct questions (stem only, without the options) over ``subjects``, in turn."""
    per_subject: list[list[str]] = []
    for subject in subjects:
        path = Path(MMLU / f"mmlu_{subject}.csv")
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: the tests read the shared RouteLLM data")
        with path.open(newline="", encoding="utf-8") as handle:
            per_subject.append([row["prompt"].split("\nA.")[0].strip() for row in csv.DictReader(handle)])
    out: list[str] = []
    seen: set[str] = set()
    for i in range(max(len(p) for p in per_subject)):
        for questions in per_subject:
            if i < len(questions) and questions[i] not in seen:
                seen.add(questions[i])
                out.append(questions[i])
            if len(out) == n:
                return out
    raise ValueError(f"only {len(out)} distinct questions in {subjects}")
