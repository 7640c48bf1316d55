"""Randomised rounding of a relaxed selection z in [0, 1]^K to a set S with E[1_S] = z (C2MAB-V, App. B).

``pairwise_round`` is Algorithm 3 (pairwise dependent rounding, Gandhi et al.): while two coordinates
k, j are fractional, with p = min(1 - z_k, z_j), q = min(z_k, 1 - z_j),

    (z_k, z_j) <- (z_k + p, z_j - p)  with probability q / (p + q),  else  (z_k - q, z_j + q);

each step keeps sum z and E[z] and makes one coordinate integral, so |S| = sum z when it is an integer.
A last fractional coordinate (sum z not an integer, possible under AWC's sum z <= N) is kept with
probability z_k; then |S| is floor or ceil of sum z.

``swap_round`` is Algorithm 2 (randomised swap rounding on the uniform-matroid polytope, Chekuri et al.):
z is written as a convex combination sum_i v_i 1_{B_i} of sets of size floor/ceil(sum z) by systematic
cuts of [0, 1), and the sets are merged pairwise: the merged set B1 (weight p1) and the next B2 (weight
p2) are padded to equal size by G in B1 \\ B2, swapped element by element (B1 moves toward B2 with
probability p2 / (p1 + p2), else B2 toward B1), and G is dropped with probability p2 / (p1 + p2) by a
single coin (spec 3.3). Values within ``EPS`` of 0 or 1 are snapped.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

EPS = 1e-9


def _snap(z: np.ndarray) -> np.ndarray:
    z = np.clip(np.asarray(z, dtype=np.float64).copy(), 0.0, 1.0)
    z[z < EPS] = 0.0
    z[z > 1.0 - EPS] = 1.0
    return z


def pairwise_round(z: np.ndarray, rng: np.random.Generator) -> list[int]:
    """Algorithm 3: indices of the chosen set, ascending."""
    z = _snap(z)
    while True:
        frac = np.flatnonzero((z > 0.0) & (z < 1.0))
        if frac.size < 2:
            break
        k, j = int(frac[0]), int(frac[1])
        p = min(1.0 - z[k], z[j])
        q = min(z[k], 1.0 - z[j])
        if rng.random() < q / (p + q):
            z[k], z[j] = z[k] + p, z[j] - p
        else:
            z[k], z[j] = z[k] - q, z[j] + q
        z = _snap(z)
    frac = np.flatnonzero((z > 0.0) & (z < 1.0))
    if frac.size == 1:
        k = int(frac[0])
        z[k] = 1.0 if rng.random() < z[k] else 0.0
    return [int(i) for i in np.flatnonzero(z == 1.0)]


def systematic_decomposition(z: np.ndarray) -> list[tuple[float, set[int]]]:
    """(weight, set) pairs with sum weight * 1_set = z, each set of size floor or ceil of sum z."""
    z = _snap(z)
    cs = np.concatenate([[0.0], np.cumsum(z)])
    cuts = np.unique(np.concatenate([[0.0, 1.0], np.mod(cs, 1.0)]))
    parts: list[tuple[float, set[int]]] = []
    for a, b in pairwise(cuts):
        if b - a <= EPS:
            continue
        u = 0.5 * (a + b)
        members = {k for k in range(z.shape[0]) if z[k] > 0 and np.ceil(cs[k] - u) < cs[k + 1] - u}
        parts.append((float(b - a), members))
    return parts


def swap_round(z: np.ndarray, rng: np.random.Generator) -> list[int]:
    """Algorithm 2 on the uniform matroid: indices of the chosen set, ascending."""
    parts = systematic_decomposition(z)
    if not parts:
        return []
    p1, merged = parts[0][0], set(parts[0][1])
    for p2, nxt in parts[1:]:
        b1, b2, w1, w2 = set(merged), set(nxt), p1, p2
        if len(b1) < len(b2):
            b1, b2, w1, w2 = b2, b1, w2, w1
        pad = sorted(b1 - b2)[: len(b1) - len(b2)]
        b2 |= set(pad)
        while b1 != b2:
            i = min(b1 - b2)
            j = min(b2 - b1)
            if rng.random() < w2 / (w1 + w2):
                b1 = (b1 - {i}) | {j}
            else:
                b2 = (b2 - {j}) | {i}
        if pad and rng.random() < w2 / (w1 + w2):
            b1 -= set(pad)
        merged, p1 = b1, p1 + p2
    return sorted(merged)
