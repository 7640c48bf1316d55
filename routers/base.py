"""The policy contract every router policy implements.

A policy is a pure, in-memory learner: no I/O, no clock, no database. The gateway and the offline
benchmark drive the same objects through these calls:

- ``select(context) -> Decision``: which model(s) to call for one prompt.
- ``update(observation)``: fold one piece of feedback (a reward, a cost, or an output embedding).
- ``add_arm(name)`` / ``remove_arm(name)``: models come and go at any time.
- ``state_dict()`` / ``Policy.from_state(state)``: plain arrays and scalars, so a policy can be
  snapshotted, exported, imported and compared. ``encode_state`` / ``decode_state`` turn such a dict into
  bytes and back without pickle.

A policy owns a ``numpy.random.Generator`` seeded from the router's seed. Callers that need decisions that
do not depend on how many selections a process served before (several gateway replicas folding the same
event log) pass their own generator in ``Context.rng``; the policy then draws from that one. The gateway
passes a ``KeyedRng``: the decision's generator, built only if the policy draws from it.

Every decision has a key, ``Context.decision_key``, and the feedback about it carries the same key in
``Observation.decision_key`` (the gateway: the decision id; the simulator: the round index). A policy
that keeps state per decision (PromptWise's open cascade step) or draws randomness while learning
(thompson-set's Bernoulli trick) derives it from the key and from folded observations only, never from
the selects a process served, so every replica folding the same event log holds the same state. None
means the caller keys nothing (a single client in sequence); such a policy then falls back to one
unkeyed slot, or to its own generator, which is not replica-safe.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, get_args, runtime_checkable

import numpy as np

ObservationKind = Literal["bandit", "query", "cascade-step", "offline", "shadow"]
# How a policy uses the caller's select-time counts (``Context.decisions_before``, ``query_rounds_before``):
# ``none``: not at all; ``read``: as a round index only (kNN-UCB's log t), so a count that misses the
# decisions still in flight is good enough; ``exact``: as a budget that concurrent decisions must not
# overspend (BALROG's queries), so each decision counts itself, under the counter's lock, before select.
CounterUse = Literal["none", "read", "exact"]
DecisionMode = Literal["single", "cascade", "set", "mixture"]
OBSERVATION_KINDS: tuple[str, ...] = get_args(ObservationKind)


class PolicyConfigError(ValueError):
    """A hyperparameter or argument is invalid; the message names it."""


@dataclass(frozen=True)
class Context:
    """What a policy sees for one prompt.

    ``embedding`` is a unit-norm float32 vector. ``arms`` restricts the choice to these models (None: every
    arm the policy knows). ``costs`` is the expected USD cost of one call per arm for this prompt (prices x
    estimated tokens), for cost-aware policies. ``tried`` lists models already called for this prompt in
    an adaptive cascade (they must not be chosen again). ``constraints`` carries per-request limits (for
    example ``max_calls``).

    ``decisions_before`` and ``query_rounds_before``: how many decisions, and query rounds among them, the
    caller's log holds for this router since its state was last reset or imported, this one not counted
    (the gateway's ``router_counters``). A policy that counts its own selects (kNN-UCB's round t, BALROG's
    query budget) takes its counts from them when given, so they survive restarts and replicas agree;
    None (the simulator) means the policy counts its own selects. The policy's ``counter_use`` tells the
    caller how exact they must be (``CounterUse``).

    ``rng`` is the generator this select draws from (a ``KeyedRng`` is built on the first draw); None:
    the policy's own.

    ``decision_key`` names the decision this select belongs to: the same key for every select of one
    decision (an adaptive cascade's later steps included) and in every observation about it; unique per
    decision (the gateway's decision id, the simulator's round). None: unkeyed (see the module doc).
    """

    embedding: np.ndarray
    arms: Sequence[str] | None = None
    costs: Mapping[str, float] | None = None
    tried: Sequence[str] = ()
    constraints: Mapping[str, Any] = field(default_factory=dict)
    rng: np.random.Generator | KeyedRng | None = None
    decisions_before: int | None = None
    query_rounds_before: int | None = None
    decision_key: str | None = None


@dataclass
class Decision:
    """What to call for one prompt.

    ``arms`` is the ordered list of models to call: one for single-choice policies, several for cascades
    (call in order, stop on success) and sets (call all), empty when the policy declines the prompt.
    ``adaptive`` means a cascade decided one step at a time: call ``arms[0]``, report the outcome as a
    ``cascade-step`` observation, then ``select`` again with the called models in ``Context.tried``.
    ``query`` names the extra models whose rewards the policy asks for (active learning), ``shadow`` the
    models to call as well, off the client's path, whose answers the client never sees (shadow
    evaluation: graded, they come back as ``shadow`` observations), ``scores`` the per-model numbers that
    explain the choice (for UCB policies: estimate, bonus, index), and ``info`` anything else a policy
    reports (mixture weights, chosen k, ...).
    """

    arms: list[str]
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    mode: DecisionMode = "single"
    adaptive: bool = False
    query: list[str] = field(default_factory=list)
    shadow: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def arm(self) -> str | None:
        return self.arms[0] if self.arms else None


@dataclass(frozen=True)
class Observation:
    """One piece of feedback about one model's answer to one prompt.

    ``kind``: ``bandit`` (the chosen model's reward), ``query`` (an active-learning probe of another model),
    ``cascade-step`` (a step of a cascade; ``reward`` is the step's outcome), ``offline`` (a logged outcome
    imported as a warm start: no decision of this policy made it, so it is learned like a query, is never
    a round the policy played nor money it spent, and its ``decision_key`` is the log row's id, which
    belongs to no open decision), ``shadow`` (the graded answer of a shadow call, ``Decision.shadow``:
evidence about that model, learned like a query, never a round the client was served, so never in a
policy's realised reward). ``reward`` or ``cost`` may be
    None when the feedback carries only the other. ``output_embedding`` is the answer's embedding, the
    feedback of diversity-aware mixture policies. ``decision_key``: the key of the decision this feedback
    is about (``Context.decision_key`` of its selects), None when the caller keys nothing.
    """

    embedding: np.ndarray
    arm: str
    reward: float | None = None
    cost: float | None = None
    kind: ObservationKind = "bandit"
    output_embedding: np.ndarray | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    decision_key: str | None = None


@runtime_checkable
class Policy(Protocol):
    """The contract. See the module docstring."""

    name: ClassVar[str]

    @property
    def arms(self) -> list[str]: ...

    def select(self, context: Context) -> Decision: ...

    def update(self, observation: Observation) -> None: ...

    def add_arm(self, arm: str) -> None: ...

    def remove_arm(self, arm: str) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Policy: ...


def counter_use(policy: Policy) -> CounterUse:
    """The policy's ``counter_use`` (``CounterUse``); ``exact``, the safe reading, for a policy that does
    not declare one."""
    use = getattr(policy, "counter_use", "exact")
    return "none" if use == "none" else "read" if use == "read" else "exact"


def candidate_arms(known: Sequence[str], context: Context, allow_repeat: bool = False) -> list[str]:
    """The arms a policy may choose for ``context``: known arms, restricted to ``context.arms``, minus
    ``context.tried`` (unless ``allow_repeat``), in the policy's own order (so tie-breaking by position is
    reproducible)."""
    allowed = set(known) if context.arms is None else set(context.arms) & set(known)
    tried = set() if allow_repeat else set(context.tried)
    return [a for a in known if a in allowed and a not in tried]


def argmax_random_tie(values: np.ndarray, rng: RngSource) -> int:
    """Index of the largest value, ties (including several +inf) broken uniformly at random (``rng`` is
    drawn from, and so built, only on a tie)."""
    best = np.max(values)
    ties = np.flatnonzero(values == best)
    return int(ties[0]) if ties.size == 1 else int(resolve_rng(rng).choice(ties))


def make_rng(seed: int | None) -> np.random.Generator:
    return np.random.default_rng(seed)


def decision_rng(seed: int, key: int | str) -> np.random.Generator:
    """The generator of one decision: a function of the router's ``seed`` and a per-decision ``key`` only
    (the gateway's decision id, or a client's request seed; the simulator's round under ``round_rng``),
    so the same decision draws the same numbers wherever and whenever it is made, and a cascade's later
    steps of that decision start from the same generator again. A string key (a ``decision_key``) enters
    as the first 8 bytes of its BLAKE2b digest, the same on every machine and process."""
    if isinstance(key, str):
        key = int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")
    return np.random.default_rng(np.random.SeedSequence([seed, key]))


def generator_key(decision_id: str, request_seed: int | None = None) -> int:
    """The ``key`` of a gateway decision's generator (``decision_rng(seed, key)``): the client's request
    ``seed`` when it sent one, else the decision id's first 64 bits (its first 16 hex digits). So
    replicas with the same learned state make the same choice for the same decision, whatever else they
    served, and a client that replays the same seeded requests gets the same choices: ``bench e2e``
    sends round t as the seed, so the gateway draws what the simulator's ``round_rng(t)`` draws."""
    return int(request_seed) if request_seed is not None else int(decision_id[:16], 16)


class KeyedRng:
    """``decision_rng(seed, key)``, built on the first call and the same generator on every call after it.

    Most selects draw nothing (a policy's index rarely ties, and ``always`` or kNN-UCB draw only then),
    while building a generator from a seed sequence takes about 0.1 ms of a gateway request's CPU on
    the development machine (profiled per request): so a decision's generator is made when a policy first
    draws from it, and its draws are the same numbers as an eagerly built one's."""

    __slots__ = ("_generator", "key", "seed")

    def __init__(self, seed: int, key: int | str) -> None:
        self.seed = seed
        self.key = key
        self._generator: np.random.Generator | None = None

    def __call__(self) -> np.random.Generator:
        if self._generator is None:
            self._generator = decision_rng(self.seed, self.key)
        return self._generator

    @property
    def built(self) -> bool:
        """Whether anything asked for the generator yet."""
        return self._generator is not None


# A generator, or a call that returns one when a draw is needed (``KeyedRng``).
RngSource = np.random.Generator | Callable[[], np.random.Generator]


def resolve_rng(source: RngSource) -> np.random.Generator:
    return source if isinstance(source, np.random.Generator) else source()


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """A JSON-able copy of a generator's state (PCG64 state holds Python ints)."""
    return dict(rng.bit_generator.state)


def rng_from_state(state: Mapping[str, Any]) -> np.random.Generator:
    rng = np.random.default_rng()
    rng.bit_generator.state = dict(state)
    return rng


def unit(vector: np.ndarray | Sequence[float]) -> np.ndarray:
    """float32, L2-normalised copy (the zero vector stays zero)."""
    v = np.asarray(vector, dtype=np.float32).reshape(-1)
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v.copy()


# --- state (de)serialisation: JSON with arrays as base64, no pickle -----------------------------------


def _encode(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return {
            "__ndarray__": base64.b64encode(data.tobytes()).decode("ascii"),
            "dtype": data.dtype.str,
            "shape": list(data.shape),
        }
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return {"__float__": repr(value)}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "__ndarray__" in value:
            raw = base64.b64decode(value["__ndarray__"])
            return np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
        if "__float__" in value and len(value) == 1:
            return float(value["__float__"])
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def encode_state(state: Mapping[str, Any]) -> bytes:
    """Serialise a ``state_dict()`` (nested dicts, lists, scalars, numpy arrays) to UTF-8 JSON bytes."""
    return json.dumps(_encode(state), separators=(",", ":"), allow_nan=False).encode("utf-8")


def decode_state(blob: bytes | str) -> dict[str, Any]:
    """Inverse of ``encode_state``: arrays come back with their dtype and shape."""
    decoded = _decode(json.loads(blob))
    if not isinstance(decoded, dict):
        raise PolicyConfigError("a policy state must be a JSON object")
    return decoded


def require(condition: bool, message: str) -> None:
    """Raise ``PolicyConfigError(message)`` unless ``condition``: hyperparameter validation."""
    if not condition:
        raise PolicyConfigError(message)
