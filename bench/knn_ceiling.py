"""The ``knn_ceiling`` reference: the full-information, leave-one-out kNN router.

What a neighbour router could reach with perfect feedback, so that a policy's "regret to the ceiling"
separates what is learnable from the embeddings from what is not. For prompt p with embedding x_p (the
vectors the policies see, L2-normalised, so the inner product is the cosine), let N_k(p) be the k prompts
q of highest x_p . x_q among those whose *text* differs from p's (p and every other copy of its text are
left out: a copy would tell the answer at distance 0). Every model's outcome is known, so with
u(q, m) = mean_reward(q, m) - lambda * cost(q, m), the utility of the report,

    ubar_k(p, m) = (1 / |N_k(p)|) * sum_{q in N_k(p)} u(q, m)
    m_k(p)       = argmax over the available models m of ubar_k(p, m)   (ties: the cheaper on p, then the
                                                                         first; ``replay_env.oracle_table``)

k ranges over ``KS`` = {10, 25, 50, 100} restricted to k < N (N - 1 when none is); the k reported is the
one of highest mean true utility (1/N) sum_p u(p, m_k(p)) over all N prompts (each availability segment of
the run weighted by its share of rounds; ties to the smaller k), which makes the row a ceiling, not an
estimate. Each seed's trace calls m_k(p_t) alone in round t, so its reward and cost are averaged over the
prompts that seed plays and sit next to the other rows. A prompt without any other-text prompt falls back
to the mean over all prompts (the best single model).

It is a single-call reference: next to set, cascade or mixture policies it bounds what one model per
prompt, chosen from the neighbours, earns; those policies' own references are ``oracle_set`` and
``oracle_cascade``. Neighbours come from FAISS's exact inner-product search (``IndexFlatIP``), all prompts
at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.replay_env import ReplayEnv, SeedDraws, oracle_table
from bench.trace import Trace, fixed_choice_trace

KS: tuple[int, ...] = (10, 25, 50, 100)


@dataclass(frozen=True)
class KnnCeiling:
    """The chosen k, and ``choice[s, p]``: the model m_k(p) under availability segment s."""

    k: int
    choice: np.ndarray

    @property
    def name(self) -> str:
        return f"knn-ceiling k={self.k}"

    def trace(self, env: ReplayEnv, draws: SeedDraws) -> Trace:
        return fixed_choice_trace(env, draws, self.choice[draws.segment, draws.prompts])


def candidate_ks(n_prompts: int, ks: Sequence[int] = KS) -> list[int]:
    """The k of ``ks`` below N, else N - 1 (at least 1)."""
    return [k for k in ks if k < n_prompts] or [max(1, n_prompts - 1)]


def other_text_neighbours(
    embeddings: np.ndarray, text_ids: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """(indices (N, k), valid (N, k)): each prompt's k nearest prompts by cosine among those of another
    text, nearest first; ``valid`` is False where fewer than k such prompts exist."""
    import faiss

    x = np.array(embeddings, dtype=np.float32, order="C", copy=True)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x /= np.where(norms > 0, norms, 1.0)
    n = x.shape[0]
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    # a row's excluded hits (itself and its copies) number at most its text's group size
    want = min(n, k + int(np.bincount(text_ids).max()))
    _, found = index.search(x, want)
    excluded = (found < 0) | (text_ids[np.maximum(found, 0)] == text_ids[:, None])
    keep = np.argsort(excluded, axis=1, kind="stable")[:, :k]
    valid = ~np.take_along_axis(excluded, keep, axis=1)
    return np.take_along_axis(found, keep, axis=1), valid


def neighbour_means(
    utility: np.ndarray, neighbours: np.ndarray, valid: np.ndarray, ks: Sequence[int]
) -> dict[int, np.ndarray]:
    """For each k: ubar_k (N, K), the mean utility of each model over the first k valid neighbours
    (the all-prompt mean where a prompt has none)."""
    gathered = np.where(valid[:, :, None], utility[np.maximum(neighbours, 0)], 0.0)
    sums = np.cumsum(gathered, axis=1)
    counts = np.cumsum(valid, axis=1)
    fallback = utility.mean(axis=0)
    means = {}
    for k in ks:
        c = counts[:, k - 1, None]
        means[k] = np.where(c > 0, sums[:, k - 1] / np.maximum(c, 1), fallback[None, :])
    return means


def knn_ceiling(env: ReplayEnv, ks: Sequence[int] = KS) -> KnnCeiling:
    """The ceiling of ``env`` (its embeddings, utilities, costs, schedule); see the module doc."""
    cost = env.dataset.cost
    candidates = candidate_ks(env.dataset.n_prompts, ks)
    neighbours, valid = other_text_neighbours(env.embeddings, env.text_ids, max(candidates))
    weights = np.bincount(env.schedule.segment, minlength=len(env.schedule.masks)) / env.horizon
    rows = np.arange(env.dataset.n_prompts)
    best: KnnCeiling | None = None
    best_score = -np.inf
    for k, means in neighbour_means(env.utility, neighbours, valid, candidates).items():
        choice = np.stack([oracle_table(means, cost, mask).choice for mask in env.schedule.masks])
        score = sum(float(w * env.utility[rows, c].mean()) for w, c in zip(weights, choice, strict=True))
        if best is None or score > best_score + 1e-12:
            best, best_score = KnnCeiling(k=k, choice=choice), score
    assert best is not None
    return best
