"""Diversity objectives: values and gradients against direct computation and finite differences,
incremental statistics against recomputation, arms coming and going, state round trips."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import sqrtm

from routers.base import PolicyConfigError, decode_state, encode_state
from routers.diversity import (
    FrechetObjective,
    KernelQuadraticObjective,
    QualityTerm,
    build_objective,
    gaussian_kernel,
)

ARMS = ("a", "b", "c")


def _samples(seed: int = 0, d: int = 4, sizes: tuple[int, ...] = (7, 5, 9)) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {a: rng.normal(size=(n, d)) + 1.5 * i for i, (a, n) in enumerate(zip(ARMS, sizes, strict=True))}


def _fill(objective, samples: dict[str, np.ndarray]):
    # interleave arms, as a policy would feed them
    order = [(a, x) for a, xs in samples.items() for x in xs]
    rng = np.random.default_rng(1)
    for k in rng.permutation(len(order)):
        objective.observe(*order[k])
    for a in samples:
        objective.add_arm(a)
    return objective


def _reference(seed: int = 5, d: int = 4, n: int = 30) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d)) + 1.0


def _direct_khat(samples: dict[str, np.ndarray], arms: list[str], sigma: float, power: int) -> np.ndarray:
    m = len(arms)
    k = np.zeros((m, m))
    for i, a in enumerate(arms):
        for j, b in enumerate(arms):
            k[i, j] = gaussian_kernel(samples[a], samples[b], sigma, power).mean()
    return k


@pytest.mark.parametrize("name,power", [("rke", 2), ("kid", 1)])
def test_incremental_pair_sums_equal_recomputation(name: str, power: int) -> None:
    samples = _samples()
    obj = _fill(
        build_objective(name, bandwidth=1.3, reference=_reference(), max_samples_per_arm=None), samples
    )
    idx = obj.indices(list(samples))
    k, f = obj.quadratic_terms(idx)
    np.testing.assert_allclose(k, _direct_khat(samples, list(samples), 1.3, power), rtol=1e-10, atol=1e-12)
    if name == "kid":
        ref = _reference()
        expected_f = [-2.0 * gaussian_kernel(samples[a], ref, 1.3).mean() for a in samples]
        np.testing.assert_allclose(f, expected_f, rtol=1e-10)


def test_rke_pooled_score_is_rke_of_pooled_samples_with_diagonal_counted_once() -> None:
    samples = _samples()
    obj = _fill(build_objective("rke", bandwidth=0.9, max_samples_per_arm=None), samples)
    pooled = np.concatenate(list(samples.values()))
    gram_sq = gaussian_kernel(pooled, pooled, 0.9, power=2)
    expected_rke = len(pooled) ** 2 / gram_sq.sum()  # V-statistic: the diagonal once per sample
    assert obj.score(obj.pooled_loss()) == pytest.approx(expected_rke, rel=1e-10)
    # a single sample: RKE = 1 exactly (the public code's double-counted diagonal would give 1/2)
    one = build_objective("rke", bandwidth=1.0)
    one.observe("a", [0.0, 1.0])
    assert one.score(one.pooled_loss()) == pytest.approx(1.0)


def test_kid_score_is_mmd2_v_statistic_of_pooled_samples() -> None:
    samples, ref = _samples(), _reference()
    obj = _fill(build_objective("kid", bandwidth=1.1, reference=ref, max_samples_per_arm=None), samples)
    x = np.concatenate(list(samples.values()))
    mmd2 = (
        gaussian_kernel(x, x, 1.1).mean()
        + gaussian_kernel(ref, ref, 1.1).mean()
        - 2 * gaussian_kernel(x, ref, 1.1).mean()
    )
    assert obj.score(obj.pooled_loss()) == pytest.approx(mmd2, rel=1e-10)


def _vendi_kernel_form(features: np.ndarray) -> float:
    rho = features @ features.T / len(features)
    lam = np.linalg.eigvalsh(rho)
    lam = lam[lam > 1e-12]
    return float(np.sum(lam * np.log(lam)))


@pytest.mark.parametrize("feature", ["cosine", "rff"])
def test_vendi_feature_form_equals_kernel_form_of_pooled_samples(feature: str) -> None:
    samples = _samples()
    obj = _fill(build_objective("vendi", feature=feature, rff_dim=16, bandwidth=2.0), samples)
    pooled = np.concatenate(list(samples.values()))
    phi = np.stack([obj.features(x) for x in pooled])
    np.testing.assert_allclose(np.linalg.norm(phi, axis=1), 1.0, rtol=1e-12)
    assert obj.pooled_loss() == pytest.approx(_vendi_kernel_form(phi), rel=1e-9, abs=1e-10)
    assert obj.score(obj.pooled_loss()) == pytest.approx(np.exp(-_vendi_kernel_form(phi)), rel=1e-9)


def test_fd_at_proportions_equals_fd_of_pooled_samples() -> None:
    samples, ref = _samples(), _reference(n=40)
    obj = _fill(FrechetObjective(ref, eps=0.0), samples)
    x = np.concatenate(list(samples.values()))
    mu, mu_r = x.mean(0), ref.mean(0)
    cov, cov_r = np.cov(x.T, bias=True), np.cov(ref.T, bias=True)
    root_r = np.real(sqrtm(cov_r))
    expected = (
        (mu - mu_r) @ (mu - mu_r)
        + np.trace(cov)
        + np.trace(cov_r)
        - 2 * np.trace(np.real(sqrtm(root_r @ cov @ root_r)))
    )
    assert obj.pooled_loss() == pytest.approx(expected, rel=1e-7)


def test_fd_mixture_covariance_includes_between_component_spread() -> None:
    # two arms, point masses at -1 and +1 (1-D): the 50/50 mixture has variance 1, not 0
    ref = np.array([[-1.0], [1.0]])
    obj = FrechetObjective(ref, eps=0.0)
    obj.observe("a", [-1.0])
    obj.observe("b", [1.0])
    assert obj.loss(np.array([0.5, 0.5])) == pytest.approx(0.0, abs=1e-5)
    assert obj.loss(np.array([1.0, 0.0])) == pytest.approx(1.0 + 0 + 1 - 0, abs=1e-5)


def _objectives() -> list:
    ref = _reference()
    return [
        build_objective("rke", bandwidth=1.2),
        build_objective("kid", bandwidth=1.2, reference=ref),
        build_objective("vendi", feature="cosine"),
        build_objective("vendi", feature="rff", rff_dim=8, bandwidth=1.5),
        build_objective("fd", reference=ref, fd_eps=1e-6),
        build_objective(
            "rke", bandwidth=1.2, reference=ref, quality="density", quality_weight=0.3, quality_k=3
        ),
        build_objective("vendi", reference=ref, quality="precision", quality_weight=0.5, quality_k=3),
    ]


@pytest.mark.parametrize(
    "obj", _objectives(), ids=lambda o: f"{o.name}-{getattr(o, 'feature', '')}{o.has_quality}"
)
def test_gradient_matches_central_finite_differences(obj) -> None:
    _fill(obj, _samples(d=4, sizes=(12, 10, 14)))
    rng = np.random.default_rng(3)
    for _ in range(3):
        alpha = rng.dirichlet(np.ones(3)) * 0.9 + 0.1 / 3
        _, grad = obj.loss_and_gradient(alpha)
        h = 1e-6
        numeric = np.array([(obj.loss(alpha + h * e) - obj.loss(alpha - h * e)) / (2 * h) for e in np.eye(3)])
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)


def test_quality_precision_and_density_by_hand() -> None:
    ref = np.array([[0.0], [1.0], [3.0]])
    q_prec = QualityTerm(ref, "precision", k=1)
    # 1-NN radii: 0 -> 1, 1 -> 1, 3 -> 2
    np.testing.assert_allclose(q_prec.radii_sq, [1.0, 1.0, 4.0])
    assert q_prec(np.array([0.5])) == 1.0
    assert q_prec(np.array([-2.0])) == 0.0
    q_dens = QualityTerm(ref, "density", k=1)
    assert q_dens(np.array([0.5])) == 2.0  # inside the balls of 0 and 1, not of 3 (distance 2.5 > 2)
    assert q_dens(np.array([1.5])) == 2.0  # balls of 1 (0.5 < 1) and 3 (1.5 < 2)


def test_reservoir_bounds_memory_and_keeps_kernel_sums_unbiased() -> None:
    rng = np.random.default_rng(0)
    data = {"a": rng.normal(size=(400, 2)), "b": rng.normal(size=(300, 2)) + 2.0}
    exact = _fill(build_objective("rke", bandwidth=1.0, max_samples_per_arm=None), data)
    k_exact, _ = exact.quadratic_terms(np.arange(2))
    estimates = []
    for seed in range(20):
        capped = build_objective("rke", bandwidth=1.0, max_samples_per_arm=40, seed=seed)
        _fill(capped, data)
        assert int(capped.stored.max()) == 40 and all(len(b) <= 40 for b in capped.samples)
        estimates.append(capped.quadratic_terms(np.arange(2))[0])
    est = np.array(estimates)
    # unbiased: the mean over 20 reservoirs is within 4 standard errors of the exact value (a biased
    # estimator, e.g. one that forgot the n_j / stored_j scale, misses by orders of magnitude more)
    se = est.std(axis=0, ddof=1) / np.sqrt(len(est))
    assert np.all(np.abs(est.mean(axis=0) - k_exact) < 4 * se + 1e-12)
    assert np.all(se < 0.05 * k_exact)


def test_remove_arm_equals_never_having_it() -> None:
    samples, ref = _samples(), _reference()
    for name in ("kid", "vendi", "fd"):
        full = _fill(build_objective(name, bandwidth=1.2, reference=ref), samples)
        full.remove_arm("b")
        partial = _fill(
            build_objective(name, bandwidth=1.2, reference=ref), {a: samples[a] for a in ("a", "c")}
        )
        assert full.arms == ["a", "c"]
        alpha = np.array([0.3, 0.7])
        assert full.loss(alpha) == pytest.approx(partial.loss(alpha), rel=1e-9)


@pytest.mark.parametrize("name", ["rke", "kid", "vendi", "fd"])
def test_state_round_trip(name: str) -> None:
    ref = _reference()
    kwargs = {"bandwidth": 1.2, "reference": ref, "max_samples_per_arm": 6, "feature": "rff", "rff_dim": 8}
    obj = _fill(build_objective(name, **kwargs), _samples())
    clone = build_objective(name, **kwargs)
    clone.load(decode_state(encode_state(obj.state())))
    extra = np.array([0.1, -0.2, 0.3, 0.4])
    obj.observe("b", extra)
    clone.observe("b", extra)
    alpha = np.array([0.2, 0.5, 0.3])
    assert clone.loss_and_gradient(alpha)[0] == pytest.approx(obj.loss_and_gradient(alpha)[0], rel=1e-12)
    np.testing.assert_allclose(clone.loss_and_gradient(alpha)[1], obj.loss_and_gradient(alpha)[1], rtol=1e-12)


def test_bad_options_name_the_argument() -> None:
    with pytest.raises(PolicyConfigError, match="objective"):
        build_objective("entropy")
    with pytest.raises(PolicyConfigError, match="bandwidth"):
        build_objective("rke", bandwidth=0.0)
    with pytest.raises(PolicyConfigError, match="reference"):
        build_objective("kid")
    with pytest.raises(PolicyConfigError, match="reference"):
        build_objective("fd")
    with pytest.raises(PolicyConfigError, match="dimension"):
        obj = KernelQuadraticObjective("rke", 1.0)
        obj.observe("a", [1.0, 2.0])
        obj.observe("a", [1.0, 2.0, 3.0])


@pytest.mark.parametrize("name", ["rke", "kid", "vendi", "fd"])
def test_batch_observation_equals_one_by_one(name: str) -> None:
    ref, samples = _reference(), _samples()
    kwargs = {
        "bandwidth": 1.2,
        "reference": ref,
        "max_samples_per_arm": None,
        "feature": "rff",
        "rff_dim": 8,
        "quality": "density",
        "quality_weight": 0.2,
        "quality_k": 3,
    }
    single, batched = build_objective(name, **kwargs), build_objective(name, **kwargs)
    for arm, xs in samples.items():
        for x in xs:
            single.observe(arm, x)
        batched.observe_many(arm, xs)
    alpha = np.array([0.2, 0.5, 0.3])
    assert batched.loss(alpha) == pytest.approx(single.loss(alpha), rel=1e-10)
    np.testing.assert_array_equal(batched.counts, single.counts)
