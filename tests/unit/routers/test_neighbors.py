"""Neighbour stores: memory bounds, the early-terminating k scan against a brute-force argmin, recall."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from routers.base import Context, Observation
from routers.knn_ucb import KnnUCB
from routers.neighbors import ArmNeighbors, adaptive_k, brute_force_k, hnsw_recall

# float16 keeps 11 significant bits: a component moves by at most 2^-11 of itself (2^-25 among the
# subnormals), so an inner product of unit vectors, hence a distance, by at most 2^-11
HALF = 2.0**-11


def _rounded_to_float16(stored: np.ndarray, given: np.ndarray) -> bool:
    """Whether ``stored`` is ``given`` rounded to float16: within its rounding, and rounding again is a no-op."""
    within = np.all(np.abs(stored - given) <= HALF * np.abs(given) + 2.0**-25)
    return bool(within) and np.array_equal(stored.astype(np.float16).astype(np.float32), stored)


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_search_returns_cosine_distances_in_order() -> None:
    store = ArmNeighbors(2)
    for angle, y in ((0.0, 1.0), (np.pi / 2, 2.0), (np.pi / 3, 3.0)):
        store.add(np.array([np.cos(angle), np.sin(angle)], dtype=np.float32), y)
    dist, rewards = store.search(np.array([1.0, 0.0], dtype=np.float32), 3)
    np.testing.assert_allclose(dist, [0.0, 0.5, 1.0], atol=1e-6)  # 1 - cos(0), 1 - cos(60), 1 - cos(90)
    np.testing.assert_array_equal(rewards, [1.0, 3.0, 2.0])


def test_window_keeps_the_latest_points_and_compacts() -> None:
    rng = np.random.default_rng(1)
    x = _unit(rng, 500, 8)
    store = ArmNeighbors(8, capacity=50, memory="window")
    for i in range(500):
        store.add(x[i], float(i))
    vectors, rewards = store.all_points()
    assert len(store) == 50
    assert sorted(rewards.tolist()) == [float(i) for i in range(450, 500)]
    assert store.dead <= store.backstop * max(len(store), 64)  # a store nobody compacts bounds itself
    store.compact()
    assert store.dead == 0 and len(store) == 50
    np.testing.assert_allclose(vectors[np.argsort(rewards)], x[450:], atol=1e-6)
    _, near = store.search(x[10], 50)
    assert set(near.tolist()) == set(rewards.tolist())  # evicted points are never returned


def test_reservoir_is_bounded_and_roughly_uniform() -> None:
    rng = np.random.default_rng(2)
    x = _unit(rng, 2000, 4)
    kept_first_half = []
    for seed in range(20):
        store = ArmNeighbors(4, capacity=100, memory="reservoir", seed=seed)
        store.extend(x, np.arange(2000.0))
        _, rewards = store.all_points()
        assert len(store) == 100
        kept_first_half.append(np.mean(rewards < 1000))
    assert abs(np.mean(kept_first_half) - 0.5) < 0.05  # uniform sample: half from each half (20 x 100 draws)


@pytest.mark.parametrize("hnsw_at", [10_000, 200])
def test_extend_equals_repeated_add(hnsw_at: int) -> None:
    rng = np.random.default_rng(3)
    x = _unit(rng, 400, 8)
    a = ArmNeighbors(8, capacity=300, hnsw_at=hnsw_at)
    b = ArmNeighbors(8, capacity=300, hnsw_at=hnsw_at)
    a.extend(x, np.arange(400.0))
    for i in range(400):
        b.add(x[i], float(i))
    assert sorted(a.all_points()[1].tolist()) == sorted(b.all_points()[1].tolist())


def test_early_termination_scan_equals_brute_force_argmin() -> None:
    mismatches = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        d, n = int(rng.integers(2, 16)), int(rng.integers(1, 400))
        x = _unit(rng, n, d)
        y = rng.random(n)
        store = ArmNeighbors(d, hnsw_at=10**6)
        store.extend(x, y)
        q = _unit(rng, 1, d)[0]
        stat, geo = float(rng.uniform(0, 2)), float(rng.choice([0.0, rng.uniform(0, 5)]))
        k_max = int(rng.integers(1, 300))
        got = adaptive_k(store, q, stat, geo, k_max, k_init=int(rng.integers(1, 20)))
        want = brute_force_k(x, y, q, stat, geo, k_max)
        mismatches += (
            got.k != want.k or abs(got.estimate - want.estimate) > 1e-9 or abs(got.bonus - want.bonus) > 1e-6
        )
        assert got.k <= min(n, k_max)
    assert mismatches == 0


def test_early_termination_on_hnsw_doubles_until_the_stop_rule_holds() -> None:
    rng = np.random.default_rng(4)
    x = _unit(rng, 3000, 16)
    y = rng.random(3000)
    store = ArmNeighbors(16, hnsw_at=1000, ef_search=128)
    store.extend(x, y)
    assert store.hnsw
    agree = 0
    for q in _unit(rng, 30, 16):
        got = adaptive_k(store, q, 1.0, 3.0, 512, k_init=4)
        want = brute_force_k(x, y, q, 1.0, 3.0, 512)
        agree += got.k == want.k
    assert agree >= 24  # approximate neighbourhood: same k on most queries (16-d random data)


def searches_per_select(policy: KnnUCB, queries: np.ndarray) -> tuple[list[int], list[str]]:
    """How many searches each select made over all arms, and the arm it chose."""
    fetched: list[int] = []
    for store in policy._stores.values():
        plain = store.search

        def counted(
            query: np.ndarray, k: int, plain: Callable[[np.ndarray, int], Any] = plain
        ) -> tuple[np.ndarray, np.ndarray]:
            fetched.append(k)
            return plain(query, k)  # type: ignore[no-any-return]

        store.search = counted  # type: ignore[method-assign]
    counts: list[int] = []
    picks: list[str] = []
    for q in queries:
        fetched.clear()
        picks.append(policy.select(Context(embedding=q)).arm)
        counts.append(len(fetched))
    return counts, picks


def test_a_default_knn_ucb_select_searches_an_hnsw_arm_at_most_twice() -> None:
    """The select budget of docs/policies/knn-ucb.md: with the default first beam (k_init 128) and k_max
    256, the scan on an HNSW store makes at most two searches (beams 128 and 256); a first beam of 16
    (the earlier default) needs up to four (32, 64, 128, 256) and picks the same arm here."""
    rng = np.random.default_rng(6)
    x = _unit(rng, 1200, 16)
    arms = rng.integers(2, size=1200)
    rewards = ((x @ _unit(rng, 2, 16).T)[np.arange(1200), arms] > 0).astype(float)
    queries = _unit(rng, 60, 16)
    runs = {}
    for k_init in (None, 16):  # the default, then the earlier one
        scan = {} if k_init is None else {"k_init": k_init}
        policy = KnnUCB(["a", "b"], seed=0, dim=16, hnsw_at=300, **scan)
        policy.warm_start(x, [["a", "b"][a] for a in arms], rewards)
        assert all(store.hnsw for store in policy._stores.values())
        runs[k_init] = searches_per_select(policy, queries)
    assert max(runs[None][0]) <= 2 * 2  # two arms, at most two searches each
    assert max(runs[16][0]) > 2 * 2  # the small first beam needed more somewhere
    assert sum(a == b for a, b in zip(runs[None][1], runs[16][1], strict=True)) >= 57


def test_an_hnsw_search_depends_on_its_own_beam_only() -> None:
    """A search's beam is max(ef_search, fetched), whatever searches came before and after the index was
    replaced (the HNSW switch, a compaction, a load): wide and narrow searches in any order, on the store
    and on a copy loaded from its state, give identical results. FAISS keeps efSearch on the index and
    the store sets it only when it changes, so a stale record of it would search a new index with the
    wrong beam here (recall@200 with beam 8 is far below beam 200's)."""
    rng = np.random.default_rng(10)
    x = _unit(rng, 2000, 16)
    store = ArmNeighbors(16, hnsw_at=1000, ef_search=8)
    store.extend(x, rng.random(2000))
    queries = _unit(rng, 10, 16)

    def results(s: ArmNeighbors, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return [s.search_labels(q, k) for q in queries]

    def same(got: list[tuple[np.ndarray, np.ndarray]], want: list[tuple[np.ndarray, np.ndarray]]) -> None:
        for (d1, l1), (d2, l2) in zip(got, want, strict=True):
            np.testing.assert_array_equal(l1, l2)
            np.testing.assert_array_equal(d1, d2)

    assert store.hnsw
    wide, narrow = results(store, 200), results(store, 5)
    same(results(store, 200), wide)  # after a narrow search
    same(results(store, 5), narrow)  # after a wide one
    index = store._index
    results(store, 200)  # leaves the old index's beam at 200
    store.compact()  # a new index, built with beam ef_search
    assert store._index is not index
    copy = ArmNeighbors(16, hnsw_at=1000, ef_search=8)
    copy.load(store.state())
    for k in (200, 5, 200):
        same(results(store, k), results(copy, k))
    assert hnsw_recall(store, queries, 200) > 0.9  # searched with beam 200, not the index's 8


def test_a_default_knn_ucb_arm_is_exact_below_16384_points() -> None:
    """The default ``hnsw_at`` (float16 vectors): an arm of 16,383 points is searched exactly (the same k,
    estimate and bonus as the brute-force argmin over the vectors it stores, for every query); its
    16,384th point turns it into HNSW. float16 vectors are rounded, not approximated by the search."""
    rng = np.random.default_rng(11)
    n = 16384
    x = _unit(rng, n, 8)
    y = rng.random(n)
    policy = KnnUCB(["a"], seed=0, dim=8)
    policy.warm_start(x[: n - 1], ["a"] * (n - 1), y[: n - 1])
    store = policy._stores["a"]
    assert not store.hnsw and store.precision == "float16"
    stored, _ = store.all_points()
    assert _rounded_to_float16(stored, x[: n - 1])
    for q in _unit(rng, 20, 8):
        got = adaptive_k(store, q, 0.3, 2.0, 256)
        want = brute_force_k(stored, y[: n - 1], q, 0.3, 2.0, 256)
        assert (got.k, got.estimate) == (want.k, want.estimate)
        assert got.bonus == pytest.approx(want.bonus, abs=1e-6)
    policy.update(Observation(embedding=x[n - 1], arm="a", reward=float(y[n - 1])))
    assert store.hnsw and len(store) == n


@pytest.mark.parametrize(
    ("given", "precision", "hnsw_at"),
    [({}, "float16", 16384), ({"precision": "float32"}, "float32", 8192), ({"hnsw_at": 100}, "float16", 100)],
)
def test_hnsw_at_defaults_by_precision(given: dict[str, Any], precision: str, hnsw_at: int) -> None:
    policy = KnnUCB(["a"], dim=4, **given)
    assert policy.config["precision"] == precision and policy.config["hnsw_at"] == hnsw_at
    store = policy._stores["a"]
    assert (store.precision, store.hnsw_at) == (precision, hnsw_at)


@pytest.mark.parametrize("hnsw_at", [10**6, 500])
def test_a_float16_store_searches_within_half_precision_of_float32(hnsw_at: int) -> None:
    """The same points in a float32 and a float16 store (exact, or HNSW from 500 points): every distance
    within 2^-11 of the float32 one (|<q, x - fp16(x)>| <= 2^-11 |q| |x|) and the neighbours the same but
    where two lie within that of each other (exact); none nearer than that allows (both); the state round
    trip keeps the float16 index."""
    rng = np.random.default_rng(12)
    x = _unit(rng, 3000, 64)
    y = rng.random(3000)
    wide = ArmNeighbors(64, hnsw_at=10**6)
    wide.extend(x, y)
    half = ArmNeighbors(64, hnsw_at=hnsw_at, ef_search=256, precision="float16")
    half.extend(x, y)
    assert half.hnsw == (hnsw_at == 500)
    for q in _unit(rng, 30, 64):
        d32, _ = wide.search(q, 50)
        d16, _ = half.search(q, 50)
        if not half.hnsw:
            assert np.abs(d16 - d32).max() <= HALF
            _, l32 = wide.search_labels(q, 50)
            _, l16 = half.search_labels(q, 50)
            apart = np.diff(d32) > 2 * HALF  # ranks i and i + 1 farther apart than two roundings
            for i in np.flatnonzero(apart):  # then the first i + 1 neighbours are the same set
                assert set(l16[: i + 1].tolist()) == set(l32[: i + 1].tolist())
        # any search's i-th nearest is no nearer than the true i-th nearest, less one rounding
        assert np.all(d16 >= d32[: d16.shape[0]] - HALF)
    copy = ArmNeighbors(64, hnsw_at=hnsw_at, ef_search=256, precision="float16")
    copy.load(half.state())
    q = _unit(rng, 1, 64)[0]
    np.testing.assert_array_equal(copy.search(q, 20)[0], half.search(q, 20)[0])
    assert hnsw_recall(half, x[:50], 10) >= (1.0 if hnsw_at > 3000 else 0.9)


def test_a_float16_store_compacts_to_the_same_points() -> None:
    """Compaction rebuilds from the rounded vectors, which round to themselves: nothing drifts."""
    rng = np.random.default_rng(13)
    x = _unit(rng, 400, 16)
    store = ArmNeighbors(16, capacity=100, memory="window", precision="float16")
    store.extend(x, np.arange(400.0))
    before = store.all_points()
    store.compact()
    after = store.all_points()
    np.testing.assert_array_equal(before[0], after[0])
    assert _rounded_to_float16(after[0], x[300:])
    np.testing.assert_array_equal(after[1], np.arange(300.0, 400.0))


def test_hnsw_recall_against_exact_search() -> None:
    rng = np.random.default_rng(5)
    x = _unit(rng, 3000, 32)
    exact = ArmNeighbors(32, hnsw_at=10**6)
    exact.extend(x, np.zeros(3000))
    approx = ArmNeighbors(32, hnsw_at=500, ef_search=64)
    approx.extend(x, np.zeros(3000))
    assert hnsw_recall(exact, x[:50], 10) == 1.0
    assert 0.8 <= hnsw_recall(approx, x[:50], 10) <= 1.0


def test_state_round_trip_keeps_an_identical_index() -> None:
    rng = np.random.default_rng(6)
    x = _unit(rng, 1500, 16)
    store = ArmNeighbors(16, capacity=1200, hnsw_at=500, seed=1)
    store.extend(x, rng.random(1500))
    copy = ArmNeighbors(16, capacity=1200, hnsw_at=500, seed=99)
    copy.load(store.state())
    for q in _unit(rng, 20, 16):
        for k in (1, 10, 100):
            a, b = store.search(q, k), copy.search(q, k)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])


def _from_scratch(store: ArmNeighbors) -> ArmNeighbors:
    """A store built in one go from ``store``'s live points, in slot order."""
    fresh = ArmNeighbors(store.dim, capacity=store.capacity, hnsw_at=store.hnsw_at)
    fresh.extend(*store.all_points())
    return fresh


def _same_results(a: ArmNeighbors, b: ArmNeighbors, queries: np.ndarray, k: int) -> None:
    for q in queries:
        da, ya = a.search(q, k)
        db, yb = b.search(q, k)
        np.testing.assert_allclose(da, db, atol=1e-6)
        np.testing.assert_array_equal(ya, yb)


@pytest.mark.parametrize("hnsw_at", [10_000, 100])
def test_a_full_window_of_evictions_does_not_rebuild_inside_update(hnsw_at: int) -> None:
    rng = np.random.default_rng(7)
    x = _unit(rng, 450, 8)
    store = ArmNeighbors(8, capacity=200, hnsw_at=hnsw_at)
    store.extend(x[:200], np.arange(200.0))
    index, builds = store._index, store.builds
    for i in range(200, 450):  # 250 evictions: more dead points than live ones
        store.add(x[i], float(i))
    assert store._index is index and store.builds == builds  # no rebuild on the write path
    assert store.needs_compaction and store.dead == 250 and len(store) == 200
    queries = _unit(rng, 20, 8)
    before = [store.search(q, 30) for q in queries]
    store.compact()
    assert store._index is not index and store.dead == 0 and store.builds == builds + 1
    _same_results(store, _from_scratch(store), queries, 30)
    for q, (dist, rewards) in zip(queries, before, strict=True):
        if store.hnsw:  # approximate: the graph without tombstones may find other neighbours
            break
        np.testing.assert_array_equal(store.search(q, 30)[0], dist)  # exact: compaction changes nothing
        np.testing.assert_array_equal(store.search(q, 30)[1], rewards)
    assert set(store.all_points()[1].tolist()) == {float(i) for i in range(250, 450)}


def test_evicted_points_are_never_returned() -> None:
    """Window of 3 in 2-d, query (1, 0): the point at angle 0 (reward 1) is evicted by the fourth add."""
    store = ArmNeighbors(2, capacity=3, memory="window")
    for degrees, y in ((0, 1.0), (90, 2.0), (180, 3.0), (45, 4.0)):
        a = np.deg2rad(degrees)
        store.add(np.array([np.cos(a), np.sin(a)], dtype=np.float32), y)
    q = np.array([1.0, 0.0], dtype=np.float32)
    for _ in range(2):  # before and after compaction
        dist, rewards = store.search(q, 3)
        np.testing.assert_array_equal(rewards, [4.0, 2.0, 3.0])  # 1.0 is gone although it is nearest
        np.testing.assert_allclose(dist, [1 - np.cos(np.pi / 4), 1.0, 2.0], atol=1e-6)
        store.compact()


@pytest.mark.parametrize("memory", ["window", "reservoir"])
def test_writes_during_a_compaction_are_replayed_when_it_is_swapped_in(memory: str) -> None:
    rng = np.random.default_rng(8)
    x = _unit(rng, 700, 8)
    store = ArmNeighbors(8, capacity=150, memory=memory, hnsw_at=10_000, seed=3)
    store.extend(x[:500], np.arange(500.0))
    job = store.begin_compaction()
    for i in range(500, 700):  # the old index keeps taking writes (and evictions) meanwhile
        store.add(x[i], float(i))
    job.build()
    assert job.finish()
    assert len(store) == 150 and store.dead <= 150  # the copies of refilled slots are dead
    _same_results(store, _from_scratch(store), _unit(rng, 20, 8), 40)
    stale = store.begin_compaction()
    store.compact()  # the index changed under the first job: it does nothing
    stale.build()
    assert not stale.finish()


def test_knn_ucb_maintain_compacts_the_stale_arms_only() -> None:
    rng = np.random.default_rng(9)
    policy = KnnUCB(arms=["a", "b"], window=60)
    for i in range(300):
        x = _unit(rng, 1, 4)[0]
        policy.update(Observation(embedding=x, arm="a" if i % 3 else "b", reward=float(i % 2)))
    # a: 200 updates, 140 evicted (> 64 and > 60 live); b: 100 updates, 40 evicted
    assert [a for a, s in policy._stores.items() if s.needs_compaction] == ["a"]
    q = _unit(rng, 1, 4)[0]
    before = policy.explain("a", q, 500)[0]
    assert policy.maintain() == 1 and policy.maintain() == 0
    assert policy.explain("a", q, 500)[0] == before  # the same k, estimate and bonus (exact store)
