"""The built-in judge's prompt and the reading of its reply (app/judge_prompt.py)."""

from __future__ import annotations

import pytest

from app.judge_prompt import TEMPLATE, answer_in, parse_score, render, template_problem


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ('{"score": 0.7}', 0.7),
        ("0.25", 0.25),
        ("1", 1.0),
        ('```json\n{"score": 0.4}\n```', 0.4),
        ('The answer is right. {"score": 0.9}', 0.9),
        ('{"reason": "x"} then {"score": 0.3}', 0.3),
        ("Score: 0.6", 0.6),
        ("score = .5 because", 0.5),
        ('{"score": 1.5}', None),  # outside [0, 1]
        ('{"score": -0.1}', None),
        ('{"score": true}', None),  # a boolean is no number
        ('{"score": "0.5"}', None),
        ("NaN", None),
        ("I cannot grade this.", None),
        ("", None),
        ("[" * 100_000, None),  # deep JSON: no exception
    ],
)
def test_a_reply_is_read_as_a_score_or_none(reply: str, score: float | None) -> None:
    assert parse_score(reply) == (None if score is None else pytest.approx(score))


def test_the_placeholders_are_replaced_once_and_inserted_text_is_not_reread() -> None:
    message = render(TEMPLATE, "say {answer}", "I said {rubric}", "be {prompt} exact")
    assert "say {answer}" in message and "I said {rubric}" in message and "be {prompt} exact" in message
    assert answer_in(message) == "I said {rubric}"
    assert template_problem(TEMPLATE) is None
    assert template_problem("grade {answer} by {rubric}") == "the template must hold {prompt}"
