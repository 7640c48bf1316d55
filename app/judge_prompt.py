"""The prompt a built-in judge sends its backend, and how its reply is read as a score in [0, 1].

A router's ``judge: {"backend", "rubric", "threshold"}`` (docs/guide.md, "Judges") asks one of the
catalog's chat backends to grade an answer. The request is one user message: ``TEMPLATE`` (or the
judge's own ``template``) with ``{prompt}``, ``{answer}`` and ``{rubric}`` replaced by the client's prompt,
the answer to grade and the judge's rubric; each placeholder is replaced once, in one pass, so a prompt or
an answer that itself holds ``{answer}`` is inserted as written. The template asks for a reply of the
fixed form ``{"score": <number in [0, 1]>}``; ``parse_score`` reads, in order: the whole reply as JSON (an
object's ``score``, or a bare number), the last ``{...}`` in it that parses as such an object, a
``score: 0.7`` / ``score = 0.7`` phrase, a reply that is one number. A score outside [0, 1], not finite,
or none found is no score (the verdict fails; the request never does)."""

from __future__ import annotations

import json
import math
import re

PLACEHOLDERS = ("prompt", "answer", "rubric")
MAX_RUBRIC_CHARS = 4000
MAX_TEMPLATE_CHARS = 8000
JUDGE_MAX_TOKENS = 64  # the reply is one short JSON object

TEMPLATE = """You are grading an AI assistant's answer to a user's request.

Grading rubric:
{rubric}

The user's request:
<request>
{prompt}
</request>

The assistant's answer:
<answer>
{answer}
</answer>

Grade how well the answer meets the rubric, as a number from 0 (fails it entirely) to 1 (meets it fully).
Reply with exactly one JSON object and nothing else, of the form {"score": 0.0}."""

_PLACEHOLDER = re.compile(r"\{(prompt|answer|rubric)\}")
_SCORE_PHRASE = re.compile(r"score\"?\s*[:=]\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)", re.IGNORECASE)
_OBJECT = re.compile(r"\{[^{}]*\}")


def template_problem(template: str) -> str | None:
    """Why ``template`` cannot grade (a placeholder missing), or None."""
    missing = [name for name in PLACEHOLDERS if "{" + name + "}" not in template]
    if missing:
        return f"the template must hold {', '.join('{' + m + '}' for m in missing)}"
    return None


def render(template: str, prompt: str, answer: str, rubric: str) -> str:
    """The judge's message: the placeholders replaced in one pass (inserted text is not re-read)."""
    values = {"prompt": prompt, "answer": answer, "rubric": rubric}
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], template)


_RENDERED_ANSWER = re.compile(r"\n<answer>\n(.*)\n</answer>\n", re.DOTALL)


def answer_in(message: str) -> str | None:
    """The answer a message rendered from ``TEMPLATE`` grades (a grader that reads logged grades finds
    it here), or None."""
    found = _RENDERED_ANSWER.search(message)
    return found.group(1) if found else None


def _in_range(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    score = float(value)
    return score if math.isfinite(score) and 0.0 <= score <= 1.0 else None


def _from_json(text: str) -> float | None:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, dict):
        return _in_range(data.get("score"))
    return _in_range(data)


def parse_score(reply: str) -> float | None:
    """The score in a judge's reply (module docstring), or None."""
    text = reply.strip()
    if text.startswith("```"):  # a fenced block: its inside
        text = text.strip("`").removeprefix("json").strip()
    found = _from_json(text)
    if found is not None:
        return found
    for candidate in reversed(_OBJECT.findall(text)):
        found = _from_json(candidate)
        if found is not None:
            return found
    phrases = _SCORE_PHRASE.findall(text)
    if phrases:
        try:
            return _in_range(float(phrases[-1]))
        except ValueError:
            return None
    return None
