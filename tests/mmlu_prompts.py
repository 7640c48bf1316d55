"""Real sentences for tests: MMLU questions from the committed fixture ``tests/data/routellm/topics``."""

from __future__ import annotations

from bench import mmlu_questions as questions
from tests.conftest import TEST_DATA

TOPICS = TEST_DATA / "routellm" / "topics"


def mmlu_questions(subjects: list[str], n: int) -> list[str]:
    """The first ``n`` distinct questions (stem only) over ``subjects``, in turn (``bench.mmlu_questions``)."""
    return questions.mmlu_questions(TOPICS, subjects, n)
