"""Per-arm neighbour stores for kNN policies: FAISS indexes, bounded memory, adaptive-k scan.

Distance. Embeddings are unit norm, so the index searches by inner product and the distance is the
cosine distance of the BALROG paper (L199): ``rho(x, x') = 1 - <x, x'>`` (in [0, 2]).

Index. An arm's history lives in a FAISS ``IndexFlatIP`` (exact) while it holds fewer than ``hnsw_at``
vectors; when it reaches ``hnsw_at`` it is rebuilt once as ``IndexHNSWFlat(d, hnsw_m, METRIC_INNER_PRODUCT)``
(approximate; ``ef_search`` is raised to at least the number of neighbours fetched). Only calls that
exist in faiss-gpu as well are used (HNSW is a CPU index in both builds).

Precision. ``precision="float32"`` stores each vector as given (``IndexFlatIP``, ``IndexHNSWFlat``);
``"float16"`` stores it in half precision (``IndexScalarQuantizer`` / ``IndexHNSWSQ`` with ``QT_fp16``)
and searches it with the float32 query. An exact scan reads every stored vector, so at the sizes where
it no longer fits the CPU's cache its cost is the bytes read, and half precision halves them. The price:
a stored component is rounded to 11 significant bits (relative error <= 2^-11), so for unit vectors an
inner product moves by at most 2^-11 (measured: at most 1.5e-4), and two neighbours closer than that
may swap ranks. Vectors read back (``all_points``, compaction) are the rounded ones; rounding
them again changes nothing. A loaded index keeps the precision it was saved with until it is rebuilt.

Memory. At most ``capacity`` live points per arm. ``memory="window"`` keeps the latest ``capacity``
observations (a new one evicts the oldest), ``memory="reservoir"`` keeps a uniform sample of everything
seen (Vitter's algorithm R: the n-th observation replaces a uniformly random slot with probability
capacity/n). FAISS HNSW cannot delete, so an evicted point becomes a tombstone: its label is marked dead
and searches skip it (fetching more while tombstones fill the result).

Compaction, off the write path. ``add``/``extend`` never rebuild for tombstones: an update costs one
index insertion. When the dead outnumber the live (``needs_compaction``), the owner runs ``compact()``:
the live vectors are copied out in one ``reconstruct_batch`` call, a new index is built from them in one
``add``, and it replaces the old one. For a caller that must keep serving meanwhile, the same work is
split in three (``begin_compaction`` copies, ``CompactionJob.build`` builds without touching the store,
so it can run in another thread while the old index keeps serving and taking writes, and
``CompactionJob.finish`` swaps it in after replaying the writes made since the copy). A store whose
owner never compacts compacts itself inside a write once the dead reach ``backstop`` times the live
(default 4): memory stays bounded, at the price of the old spike. The only other rebuild in a write is
the one-off switch from exact to HNSW at ``hnsw_at`` points.

Adaptive k (``adaptive_k``). For U(k) = a / sqrt(k) + b * r_k with r_k non-decreasing (BALROG eq. 4-5)
and b > 0: for any k' > k, U(k') > b r_{k'} >= b r_k, so once b r_m >= min_{k<=m} U(k) no larger k
can win. On an HNSW store the scan fetches max(k_init, ef_search) neighbours and doubles the number
fetched until that holds, all neighbours are fetched, or ``k_max`` is reached (k never exceeds k_max:
it bounds the work of one search). On an exact store one search fetches min(N, k_max) at once (a flat search scans
everything anyway, so fetching more costs only the final partial sort).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

try:
    import faiss
except ImportError as exc:  # pragma: no cover - faiss-cpu is a base dependency
    raise ImportError(
        "kNN policies need faiss: pip install faiss-cpu==1.15.1 (a dependency of banditgate; "
        "faiss-gpu-cu12 provides the same module where installed in its place)"
    ) from exc

Memory = Literal["window", "reservoir"]
MEMORIES: tuple[str, ...] = ("window", "reservoir")
Precision = Literal["float32", "float16"]
FP16: Any = faiss.ScalarQuantizer.QT_fp16  # faiss's stubs type the quantizer kinds as plain ints


def set_search_threads(threads: int) -> None:
    """FAISS's OpenMP threads for this process. A service searches one query at a time, where threads
    only add their start-up and spin-wait after each search (on cores the rest of the service needs);
    bulk offline work may want more."""
    faiss.omp_set_num_threads(threads)


def _grow(array: np.ndarray, size: int) -> np.ndarray:
    if size <= array.shape[0]:
        return array
    out = np.empty(max(size, 2 * array.shape[0], 16), dtype=array.dtype)
    out[: array.shape[0]] = array
    return out


class ArmNeighbors:
    """The (embedding, reward) history of one arm, searchable by cosine distance.

    Labels are FAISS's sequential ids (the i-th vector added has label i). ``_slot_label[s]`` is the label
    held by memory slot s (at most ``capacity`` slots); ``_alive[label]`` marks live labels.
    """

    def __init__(
        self,
        dim: int,
        capacity: int = 100_000,
        memory: Memory = "window",
        hnsw_at: int = 8192,
        hnsw_m: int = 32,
        ef_search: int = 32,
        ef_construction: int = 80,
        seed: int | None = 0,
        backstop: float = 4.0,
        precision: Precision = "float32",
    ) -> None:
        self.dim = int(dim)
        self.precision: Precision = precision
        self.capacity = int(capacity)
        self.memory: Memory = memory
        self.hnsw_at = int(hnsw_at)
        self.hnsw_m = int(hnsw_m)
        self.ef_search = int(ef_search)
        self.ef_construction = int(ef_construction)
        self.rng = np.random.default_rng(seed)
        self.seen = 0  # observations ever offered (reservoir's n)
        self._rewards = np.empty(0, dtype=np.float64)  # by label
        self._alive = np.empty(0, dtype=bool)  # by label
        self._slot_label = np.empty(0, dtype=np.int64)  # by slot
        self._index: Any = self._new_index(hnsw=False)
        self._ef = self.ef_search  # the index's efSearch (an HNSW index starts at ef_search)
        self.hnsw = False
        self.backstop = float(backstop)
        self.builds = 0  # index rebuilds so far (the HNSW switch and compactions)

    # --- size ------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._slot_label.shape[0])

    @property
    def ntotal(self) -> int:
        return int(self._index.ntotal)

    @property
    def dead(self) -> int:
        return self.ntotal - len(self)

    # --- writes ----------------------------------------------------------------------------------------

    def _new_index(self, hnsw: bool) -> Any:
        """An empty index of this store's kind: exact or HNSW, its vectors stored as ``precision``."""
        half = self.precision == "float16"
        if not hnsw:
            if half:
                return faiss.IndexScalarQuantizer(self.dim, FP16, faiss.METRIC_INNER_PRODUCT)
            return faiss.IndexFlatIP(self.dim)
        index: Any
        if half:
            index = faiss.IndexHNSWSQ(self.dim, FP16, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = self.ef_construction
        return index

    def _set_index(self, index: Any) -> None:
        """Install an index (built here, in a compaction job, or loaded), an HNSW one at beam ``ef_search``:
        the one place that knows the index's efSearch besides ``set_beam``."""
        if isinstance(index, faiss.IndexHNSW):
            index.hnsw.efSearch = self.ef_search
        self._index = index
        self._ef = self.ef_search

    def set_beam(self, fetch: int) -> None:
        """An HNSW index's beam for a search fetching ``fetch`` neighbours: max(ef_search, fetch). FAISS
        keeps efSearch on the index; it is set through SWIG only when it changes."""
        ef = max(self.ef_search, fetch)
        if self.hnsw and self._ef != ef:
            self._index.hnsw.efSearch = self._ef = ef

    def _append(self, vectors: np.ndarray, rewards: np.ndarray) -> np.ndarray:
        """Add rows to the index; returns their labels."""
        start = self.ntotal
        n = vectors.shape[0]
        self._index.add(vectors)
        self._rewards = _grow(self._rewards, start + n)
        self._alive = _grow(self._alive, start + n)
        self._rewards[start : start + n] = rewards
        self._alive[start : start + n] = True
        return np.arange(start, start + n, dtype=np.int64)

    def _slot_for_next(self, size: int) -> int | None:
        """Slot the next observation takes when ``size`` slots are used: ``size`` (a new slot), an existing
        one (eviction), or None (the reservoir skips it)."""
        self.seen += 1
        if size < self.capacity:
            return size
        if self.memory == "window":
            return (self.seen - 1) % self.capacity
        j = int(self.rng.integers(self.seen))
        return j if j < self.capacity else None

    def add(self, vector: np.ndarray, reward: float) -> None:
        """Store one observation (float32 unit vector of length ``dim``), evicting per ``memory``."""
        self.extend(np.asarray(vector, dtype=np.float32).reshape(1, -1), np.array([reward], dtype=np.float64))

    def extend(self, vectors: np.ndarray, rewards: np.ndarray) -> None:
        """Store many observations in order (the same result as repeated ``add``, one FAISS call)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
        slots: list[int | None] = []
        size = len(self)
        for _ in range(vectors.shape[0]):
            slot = self._slot_for_next(size)
            size += int(slot == size)
            slots.append(slot)
        keep = np.array([s is not None for s in slots], dtype=bool)
        if not keep.any():
            return
        # the last write to a slot wins; earlier rows bound for the same slot are never searchable
        final: dict[int, int] = {}
        for row, slot in enumerate(slots):
            if slot is not None:
                final[slot] = row
        rows = np.array(sorted(final.values()), dtype=np.int64)
        if not self.hnsw and len(self) + rows.shape[0] >= self.hnsw_at:
            self._rebuild(
                hnsw=True, extra=(vectors[rows], rewards[rows]), extra_slots=[slots[r] for r in rows]
            )
            return
        labels = self._append(vectors[rows], rewards[rows])
        row_slots = np.array([slots[r] for r in rows], dtype=np.int64)
        old = row_slots < len(self)
        self._alive[self._slot_label[row_slots[old]]] = False  # evicted
        self._slot_label[row_slots[old]] = labels[old]
        fresh = np.argsort(row_slots[~old], kind="stable")  # new slots len, len + 1, ...
        self._slot_label = np.concatenate([self._slot_label, labels[~old][fresh]])
        if self.dead > self.backstop * max(len(self), 64):
            self.compact()  # nobody maintains this store: bound its memory here

    @property
    def needs_compaction(self) -> bool:
        """True when the tombstones outnumber the live points (and are more than 64)."""
        return self.dead > max(len(self), 64)

    def compact(self) -> None:
        """Rebuild the index from the live points in slot order (label = slot), in bulk."""
        job = self.begin_compaction()
        job.build()
        job.finish()

    def begin_compaction(self) -> CompactionJob:
        """Copy the live points (one bulk read); the returned job builds and swaps in the new index."""
        labels = self._slot_label.copy()
        return CompactionJob(self, self._index, labels, self._vectors(labels), self._rewards[labels].copy())

    def _vectors(self, labels: np.ndarray) -> np.ndarray:
        if labels.shape[0] == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        return np.ascontiguousarray(self._index.reconstruct_batch(labels), dtype=np.float32)

    def _live_vectors(self) -> np.ndarray:
        return self._vectors(self._slot_label)

    def _rebuild(
        self,
        hnsw: bool,
        extra: tuple[np.ndarray, np.ndarray] | None = None,
        extra_slots: list[int | None] | None = None,
    ) -> None:
        """New index holding the live points in slot order (label = slot), plus ``extra`` rows."""
        vectors = self._live_vectors()
        rewards = self._rewards[self._slot_label].copy()
        if extra is not None and extra_slots is not None:
            ex_vec, ex_rew = extra
            slots = np.array(extra_slots, dtype=np.int64)
            n0 = vectors.shape[0]
            old = slots < n0  # evictions overwrite in place; new slots are n0, n0 + 1, ... in row order
            vectors[slots[old]] = ex_vec[old]
            rewards[slots[old]] = ex_rew[old]
            vectors = np.vstack([vectors, ex_vec[~old]])
            rewards = np.concatenate([rewards, ex_rew[~old]])
        self._set_index(self._new_index(hnsw))
        self.hnsw = hnsw
        self.builds += 1
        self._rewards = np.empty(0, dtype=np.float64)
        self._alive = np.empty(0, dtype=bool)
        self._slot_label = self._append(vectors, rewards) if vectors.shape[0] else np.empty(0, dtype=np.int64)

    def _swap_in(self, job: CompactionJob) -> bool:
        """Install ``job``'s index, replaying the writes made since ``begin_compaction``; False (and
        nothing changed) if the index was replaced meanwhile (another compaction, a load, the HNSW
        switch)."""
        if self._index is not job.source or job.index is None:
            return False
        n0 = job.labels.shape[0]
        current = self._slot_label
        moved = np.flatnonzero(current[:n0] != job.labels)  # slots evicted and refilled since the copy
        fresh = np.concatenate([moved, np.arange(n0, current.shape[0], dtype=np.int64)])
        replay = current[fresh]
        vectors, rewards = self._vectors(replay), self._rewards[replay].copy()
        self._set_index(job.index)
        self._rewards = np.array(job.rewards, dtype=np.float64)
        self._alive = np.ones(n0, dtype=bool)
        slot_label = np.arange(n0, dtype=np.int64)
        if replay.shape[0]:
            self._alive[moved] = False  # the copied point of a refilled slot is evicted
            new = self._append(vectors, rewards)
            slot_label = np.concatenate([slot_label, np.empty(fresh.shape[0] - moved.shape[0], np.int64)])
            slot_label[fresh] = new
        self._slot_label = slot_label
        self.builds += 1
        return True

    # --- reads -----------------------------------------------------------------------------------------

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The (up to) k nearest live points: (distances rho = 1 - ip ascending, their rewards)."""
        dist, labels = self.search_labels(query, k)
        return dist, self._rewards[labels]

    def search_labels(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The (up to) k nearest live points: (distances rho = 1 - ip ascending, their FAISS labels).

        FAISS returns each result list sorted by decreasing inner product, so the distances come sorted."""
        live = self._slot_label.shape[0]
        k = min(int(k), live)
        if k <= 0:
            return np.empty(0), np.empty(0, dtype=np.int64)
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        total = self._index.ntotal
        fetch = k if total == live else min(2 * k, total)
        while True:
            self.set_beam(fetch)
            sims, labels = self._index.search(q, fetch)
            sims, labels = sims[0], labels[0]
            if total == live and labels[-1] >= 0:  # no tombstones, a full result: the fast path
                return np.maximum(1.0 - sims.astype(np.float64), 0.0), labels
            valid = labels >= 0
            labels, sims = labels[valid], sims[valid]
            alive = self._alive[labels]
            if int(alive.sum()) >= k or fetch >= total or not valid.all():
                break
            fetch = min(2 * fetch, total)
        return np.maximum(1.0 - sims[alive][:k].astype(np.float64), 0.0), labels[alive][:k]

    def random_point(self) -> tuple[np.ndarray, float]:
        """A uniformly random live (vector, reward), drawn from this store's own generator."""
        label = int(self._slot_label[int(self.rng.integers(len(self)))])
        return np.asarray(self._index.reconstruct(label), dtype=np.float32), float(self._rewards[label])

    def all_points(self) -> tuple[np.ndarray, np.ndarray]:
        """Every live (vector, reward), in slot order."""
        return self._live_vectors(), self._rewards[self._slot_label].copy()

    # --- state -----------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Plain arrays: the serialised FAISS index (an HNSW graph comes back identical), labels, rewards."""
        n = self.ntotal
        return {
            "index": faiss.serialize_index(self._index),
            "hnsw": self.hnsw,
            "rewards": self._rewards[:n].copy(),
            "alive": self._alive[:n].copy(),
            "slot_label": self._slot_label.copy(),
            "seen": self.seen,
            "rng": dict(self.rng.bit_generator.state),
        }

    def load(self, state: Mapping[str, Any]) -> None:
        self.hnsw = bool(state["hnsw"])
        self._set_index(faiss.deserialize_index(np.asarray(state["index"], dtype=np.uint8)))
        self._rewards = np.asarray(state["rewards"], dtype=np.float64).copy()
        self._alive = np.asarray(state["alive"], dtype=bool).copy()
        self._slot_label = np.asarray(state["slot_label"], dtype=np.int64).copy()
        self.seen = int(state["seen"])
        self.rng.bit_generator.state = dict(state["rng"])


class CompactionJob:
    """One compaction of an ``ArmNeighbors``: the live points copied at ``begin_compaction``, the index
    ``build`` makes from them (touching nothing shared: safe in another thread while the store serves),
    and ``finish``, which swaps it in (in the store's own thread)."""

    def __init__(
        self, store: ArmNeighbors, source: Any, labels: np.ndarray, vectors: np.ndarray, rewards: np.ndarray
    ) -> None:
        self.store, self.source = store, source
        self.labels, self.vectors, self.rewards = labels, vectors, rewards
        self.hnsw = store.hnsw
        self.index: Any = None

    def build(self) -> None:
        index = self.store._new_index(self.hnsw)
        if self.vectors.shape[0]:
            index.add(self.vectors)
        self.index = index

    def finish(self) -> bool:
        """Swap the new index in; False if the store's index changed since the copy (nothing done)."""
        done = self.store._swap_in(self)
        self.vectors = np.empty((0, self.store.dim), dtype=np.float32)  # free the copy
        return done


@dataclass(frozen=True)
class KChoice:
    """Result of the adaptive-k scan: k, the k-NN mean reward (eq. 3), the bonus U (eq. 4), r_k, and the
    rewards of the k neighbours (for the variance trigger)."""

    k: int
    estimate: float
    bonus: float
    radius: float
    rewards: np.ndarray


_SQRT_K = np.sqrt(np.arange(1, 1025, dtype=np.float64))  # sqrt(k) for k = 1.., grown on demand


def bonus_curve(dist: np.ndarray, stat: float, geo: float) -> np.ndarray:
    """U(k) = stat / sqrt(k) + geo * r_k for k = 1..len(dist) (eq. 4 with stat = sqrt(theta log N))."""
    global _SQRT_K
    n = dist.shape[0]
    if n > _SQRT_K.shape[0]:
        _SQRT_K = np.sqrt(np.arange(1, 2 * n + 1, dtype=np.float64))
    return stat / _SQRT_K[:n] + geo * dist


def adaptive_k(
    store: ArmNeighbors, query: np.ndarray, stat: float, geo: float, k_max: int, k_init: int = 16
) -> KChoice:
    """k = argmin_{1<=k<=min(N, k_max)} U(k) (eq. 5, smallest k on ties) by the early-terminating scan."""
    cap = min(len(store), int(k_max))
    if cap <= 0:
        raise ValueError("adaptive_k needs a non-empty store")
    # an exact (flat) search costs a full scan whatever k is: fetch the cap at once; HNSW costs grow with
    # k past efSearch, so it starts at max(k_init, ef_search) and doubles
    # with efSearch >= ef_search, fetching ef_search neighbours costs what fetching fewer does
    fetch = min(max(int(k_init), store.ef_search, 1), cap) if store.hnsw else cap
    while True:
        dist, rewards = store.search(query, fetch)
        curve = bonus_curve(dist, stat, geo)
        j = int(curve.argmin())
        got = dist.shape[0]
        if got >= cap or got < fetch or (geo > 0 and geo * dist[-1] >= curve[j]):
            break
        fetch = min(2 * fetch, cap)
    k = j + 1
    return KChoice(
        k=k,
        estimate=float(rewards[:k].sum()) / k,
        bonus=float(curve[j]),
        radius=float(dist[j]),
        rewards=rewards[:k],  # a view of the search's own fresh array
    )


def brute_force_k(
    vectors: np.ndarray, rewards: np.ndarray, query: np.ndarray, stat: float, geo: float, k_max: int
) -> KChoice:
    """Reference for tests: full sort of all distances, then argmin of U over k = 1..min(N, k_max)."""
    dist = np.maximum(1.0 - np.asarray(vectors, dtype=np.float64) @ np.asarray(query, dtype=np.float64), 0.0)
    order = np.argsort(dist, kind="stable")[: min(len(dist), int(k_max))]
    curve = bonus_curve(dist[order], stat, geo)
    j = int(np.argmin(curve))
    ys = np.asarray(rewards, dtype=np.float64)[order]
    return KChoice(
        k=j + 1,
        estimate=float(np.mean(ys[: j + 1])),
        bonus=float(curve[j]),
        radius=float(dist[order][j]),
        rewards=ys[: j + 1],
    )


def hnsw_recall(store: ArmNeighbors, queries: np.ndarray, k: int) -> float:
    """Recall@k of the store's index against exact inner-product search over its live points.

    recall = |approx top-k ∩ exact top-k| / k, averaged over the queries (1.0 for an exact store)."""
    vectors, _ = store.all_points()
    k = min(int(k), len(store))
    if k == 0:
        return 1.0
    exact = faiss.IndexFlatIP(store.dim)
    exact.add(vectors)
    queries = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, store.dim)
    _, truth = exact.search(queries, k)  # ids are slots
    label_slot = np.full(store.ntotal, -1, dtype=np.int64)
    label_slot[store._slot_label] = np.arange(len(store))
    found = [label_slot[store.search_labels(q, k)[1]] for q in queries]
    return recall_at_k(found, truth, k)


def recall_at_k(
    found: Sequence[np.ndarray] | np.ndarray, truth: Sequence[np.ndarray] | np.ndarray, k: int
) -> float:
    """|found top-k ∩ true top-k| / k, averaged over the queries (row i of each is query i's ids)."""
    hits = [len(set(f[:k].tolist()) & set(t[:k].tolist())) for f, t in zip(found, truth, strict=True)]
    return sum(hits) / (k * len(hits)) if hits else 1.0
