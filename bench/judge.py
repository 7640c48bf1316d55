"""A simulated judge for replay: a cascade's "did this answer succeed?" from a grader that can be wrong.

In the replay a cascade stops on the logged label (reward >= the success threshold). In production that
signal is a judge's verdict: an LLM grading the answer, which costs a call and is wrong some of the time.
``bench run --judge SPEC`` (and ``bench frontier --judge SPEC``, repeatable) replaces the label by a
judge's grade in every round whose plan stops on success: an ``adaptive`` or fixed ``cascade`` and a
``set`` with the ``awc`` reward model (C2MAB-V's AWC). The policy is shown the grade as the call's reward
and the cascade stops on it; the user gets the true reward of the answer delivered. Single-choice rounds,
``suc`` / ``aic`` sets, ``query`` calls and ``shadow`` calls (answers the user never gets) read no
success signal and are not judged: the policy is shown their logged reward.

SPEC, in the syntax of a policy spec (``bench.policy_spec``), ``kind[:key=value,...]``:

- ``verdict[:tpr=T,tnr=N]``: the true verdict is reward >= the round's success threshold; the judge
  reports it flipped with probability 1 - T on true successes and 1 - N on true failures (T, N in [0, 1],
  default 1), as the reward range's high / low end;
- ``score[:sigma=S]``: for graded rewards, reward + S z (z standard normal), clipped to the reward range
  (S >= 0, default 0); the round's success is that score >= the threshold.

Both take ``model=NAME`` (whose prices the judge calls are paid at; default the model of the set with the
cheapest judge calls), ``overhead_tokens`` (150: the rubric and instructions) and ``tokens_out`` (16: the
grade). The price of one judged answer of prompt p by model k, counted in the round's cost:

    tokens_in  = (len(prompt_p) + answer characters of (p, k)) / 4 + overhead_tokens
    usd        = tokens_in * usd_per_mtok_in / 1e6 + tokens_out * usd_per_mtok_out / 1e6 + usd_per_call

The answer characters are the logged response's length; where the dataset holds no response, its output
token count (given, or estimated by the loader) times 4, the loader's own characters-per-token rule, and
the report counts those estimates.

Noise is common to every judge of a run: u(seed, prompt, model) in (0, 1) is the first 8 bytes of
BLAKE2b("seed/prompt id/model name") scaled to (0, 1), so a verdict depends on nothing but the seed, the
prompt and the model (not on the order of play, the policy or the other calls). A verdict flips when
u < 1 - TPR (a true success) or u < 1 - TNR (a true failure), so a worse judge errs on a superset of the
answers a better one errs on; a score judge's z is the normal quantile of u.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy.special import ndtri

from bench.dataset import Dataset
from bench.policy_spec import parse_spec
from routers.prices import CHARS_PER_TOKEN

JudgeKind = Literal["verdict", "score"]
KINDS: tuple[JudgeKind, ...] = ("verdict", "score")
COMMON_KEYS = ("model", "overhead_tokens", "tokens_out")
KIND_KEYS: dict[str, tuple[str, ...]] = {"verdict": ("tpr", "tnr"), "score": ("sigma",)}
DEFAULT_OVERHEAD_TOKENS = 150.0
DEFAULT_TOKENS_OUT = 16.0
RESPONSE_TEXT = "answer characters from the logged response"
ESTIMATED_TEXT = "answer characters estimated as output tokens x 4 (no response logged)"


@dataclass(frozen=True)
class JudgeSpec:
    """A parsed judge spec; ``text`` is echoed verbatim in reports; ``model`` None: the cheapest."""

    text: str
    kind: JudgeKind
    tpr: float = 1.0
    tnr: float = 1.0
    sigma: float = 0.0
    model: str | None = None
    overhead_tokens: float = DEFAULT_OVERHEAD_TOKENS
    tokens_out: float = DEFAULT_TOKENS_OUT


def _number(spec: str, key: str, value: Any, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"judge spec {spec!r}: {key} must be a number, got {value!r}")
    number = float(value)
    if not low <= number <= (np.inf if high is None else high):
        bound = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}"
        raise ValueError(f"judge spec {spec!r}: {key} must be {bound}, got {value!r}")
    return number


def parse_judge(text: str) -> JudgeSpec:
    """``verdict:tpr=0.85,tnr=0.85`` -> JudgeSpec('verdict', tpr=0.85, tnr=0.85); ValueError naming the
    key on an unknown kind, an unknown key or a value out of range."""
    parsed = parse_spec(text, what="judge")
    if parsed.name not in KINDS:
        raise ValueError(f"judge spec {text!r}: unknown kind {parsed.name!r}; known: {', '.join(KINDS)}")
    allowed = KIND_KEYS[parsed.name] + COMMON_KEYS
    unknown = sorted(set(parsed.params) - set(allowed))
    if unknown:
        raise ValueError(
            f"judge spec {text!r}: unknown key {unknown[0]!r} for a {parsed.name} judge; known: "
            f"{', '.join(allowed)}"
        )
    p = parsed.params
    model = p.get("model")
    values: dict[str, Any] = {
        "model": None if model is None else str(model),
        "overhead_tokens": _number(
            text, "overhead_tokens", p.get("overhead_tokens", DEFAULT_OVERHEAD_TOKENS), 0
        ),
        "tokens_out": _number(text, "tokens_out", p.get("tokens_out", DEFAULT_TOKENS_OUT), 0),
    }
    if parsed.name == "verdict":
        values["tpr"] = _number(text, "tpr", p.get("tpr", 1.0), 0.0, 1.0)
        values["tnr"] = _number(text, "tnr", p.get("tnr", 1.0), 0.0, 1.0)
        return JudgeSpec(text=text, kind="verdict", **values)
    return JudgeSpec(
        text=text, kind="score", sigma=_number(text, "sigma", p.get("sigma", 0.0), 0.0), **values
    )


def judge_uniform(seed: int, prompt_id: str, model: str) -> float:
    """u(seed, prompt, model) in (0, 1): BLAKE2b of "seed/prompt id/model" (module doc)."""
    digest = hashlib.blake2b(f"{seed}/{prompt_id}/{model}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0**64


def answer_characters(dataset: Dataset) -> tuple[np.ndarray, dict[str, int]]:
    """(P, K) characters of each logged answer, and how many (prompt, model) pairs came from which source:
    the response's length, else the output token count x ``CHARS_PER_TOKEN``."""
    chars = dataset.tokens_out * CHARS_PER_TOKEN
    sources: Counter[str] = Counter()
    for p, responses in enumerate(dataset.responses):
        for k, name in enumerate(dataset.model_names):
            text = responses.get(name)
            if text is None:
                sources[ESTIMATED_TEXT] += 1
            else:
                chars[p, k] = len(text)
                sources[RESPONSE_TEXT] += 1
    return chars, dict(sources)


def judge_tokens_in(prompt_chars: np.ndarray, answer_chars: np.ndarray, overhead: float) -> np.ndarray:
    """tokens_in = (prompt + answer characters) / 4 + overhead (module doc)."""
    return (prompt_chars + answer_chars) / CHARS_PER_TOKEN + overhead


class Judge:
    """A judge spec bound to a dataset: the price of each judged answer and the grade of each call."""

    def __init__(self, spec: JudgeSpec, dataset: Dataset) -> None:
        self.spec = spec
        self.dataset = dataset
        self.low, self.high = dataset.reward_range
        answer_chars, self.answer_sources = answer_characters(dataset)
        prompt_chars = np.array([len(p) for p in dataset.prompts], dtype=np.float64)
        self.tokens_in = judge_tokens_in(prompt_chars[:, None], answer_chars, spec.overhead_tokens)
        names = dataset.model_names
        if spec.model is not None and spec.model not in names:
            raise ValueError(
                f"judge spec {spec.text!r}: model {spec.model!r} is not in the dataset ({', '.join(names)})"
            )
        by_model = [self._costs(k) for k in range(len(names))]
        self.model_index = (
            names.index(spec.model)
            if spec.model is not None
            else int(np.argmin([float(c.mean()) for c in by_model]))
        )
        self.model = names[self.model_index]
        # (P, K): USD of judging model k's answer to prompt p
        self.cost = by_model[self.model_index]

    def _costs(self, k: int) -> np.ndarray:
        price = self.dataset.models[k]
        return (
            self.tokens_in * price.usd_per_mtok_in / 1e6
            + self.spec.tokens_out * price.usd_per_mtok_out / 1e6
            + price.usd_per_call
        )

    def grade(self, seed: int, prompt: int, model: int, reward: float, threshold: float) -> float:
        """The judge's reward for a call whose true reward is ``reward`` (module doc)."""
        u = judge_uniform(seed, self.dataset.ids[prompt], self.dataset.model_names[model])
        spec = self.spec
        if spec.kind == "verdict":
            truth = reward >= threshold
            flipped = u < (1.0 - spec.tpr if truth else 1.0 - spec.tnr)
            return self.high if truth != flipped else self.low
        return float(np.clip(reward + spec.sigma * float(ndtri(u)), self.low, self.high))

    def report(self) -> dict[str, Any]:
        """What the JSON report records about the judge: its spec, parameters, price and answer lengths."""
        price = self.dataset.models[self.model_index]
        spec = self.spec
        quality = {"tpr": spec.tpr, "tnr": spec.tnr} if spec.kind == "verdict" else {"sigma": spec.sigma}
        return {
            "spec": spec.text,
            "kind": spec.kind,
            **quality,
            "model": self.model,
            "model_default": spec.model is None,
            "usd_per_mtok_in": price.usd_per_mtok_in,
            "usd_per_mtok_out": price.usd_per_mtok_out,
            "usd_per_call": price.usd_per_call,
            "overhead_tokens": spec.overhead_tokens,
            "tokens_out": spec.tokens_out,
            "mean_usd_per_judged_answer": float(self.cost.mean()),
            "answer_characters": self.answer_sources,
            "judged_rounds": "cascade and set/awc rounds; the policy sees the grade, the user the true reward",
        }


def judge_note(report: dict[str, Any]) -> str:
    """One line for the console: the judge, its price model and how the answer lengths were made."""
    quality = (
        f"TPR {report['tpr']:g}, TNR {report['tnr']:g}"
        if report["kind"] == "verdict"
        else f"sigma {report['sigma']:g}"
    )
    sources = ", ".join(f"{n} {what}" for what, n in sorted(report["answer_characters"].items()))
    return (
        f"judge {report['spec']!r}: {report['kind']} judge, {quality}, priced at {report['model']} "
        f"(mean ${report['mean_usd_per_judged_answer']:.6g} per judged answer, counted in cost); {sources}"
    )
