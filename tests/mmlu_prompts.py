"""Real sentences for tests: MMLU questions from the committed fixture ``tests/data/routellm/topics``."""

from __future__ import annotations

import csv

from tests.conftest import TEST_DATA

TOPICS = TEST_DATA / "routellm" / "topics"


def mmlu_questions(subjects: list[str], n: int) -> list[str]:
    """The first ``n`` distinct questions (stem only, without the options) over ``subjects``, in turn."""
    per_subject: list[list[str]] = []
    for subject in subjects:
        path = TOPICS / f"mmlu_{subject}.csv"
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
