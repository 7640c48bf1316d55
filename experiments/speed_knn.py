"""Select and update latency of kNN-UCB at 1e3..1e6 stored observations, beside raw FAISS searches.

For each history size N (split uniformly over ``--arms`` arms), the policy is warm-started with N
synthetic 384-d unit vectors with cluster structure (rewards: a smooth function of the vector plus
Bernoulli noise), then ``--queries`` fresh prompts are timed through ``policy.select`` and, on the same
prompts, a raw FAISS search of each arm's index with the k the policy chose for that arm (the sum over
arms: what any kNN router must at least pay). Then ``--updates`` fresh observations are timed through
``policy.update``. Reported: p50/p99 of each, the select/raw ratio of p50s, the k values chosen, and the
HNSW recall@k of one arm's index against exact search; ``choices`` digests the arm chosen for each
query, so two runs that differ only in a speed knob (``--k-init``, say) and print the same digest chose
the same arm every time. Each timing is taken twice: wall clock
(``perf_counter``) and the calling thread's CPU time (``thread_time``), which a loaded shared machine
inflates far less (searches run with ``--threads`` FAISS threads, 1 by default, so the thread's CPU time
is the work done).

    nice -n 10 python -m experiments.speed_knn --sizes 1000,10000,100000,1000000

With ``--data ../shared/data`` the points, queries and rewards are real instead (``RealPrompts``): each
arm holds N / arms distinct prompts of the RouteLLM MMLU and GSM8K sets (about 15,000 in all) with a real
model's outcomes as rewards, and the queries are prompts held out of every arm.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from tqdm import tqdm

from bench.convert_routellm import gsm8k_rows, mmlu_rows
from bench.embedding_cache import embed_prompts
from routers.base import Context, Observation
from routers.knn_ucb import KnnUCB
from routers.neighbors import hnsw_recall


def clustered_points(n: int, dim: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    """Unit vectors near randomly chosen centres (noise of norm ~0.7, as in sentence embeddings)."""
    label = rng.integers(centres.shape[0], size=n)
    x = centres[label] + 0.7 * rng.standard_normal((n, dim), dtype=np.float32) / np.sqrt(dim)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


def rewards_for(x: np.ndarray, arm_dirs: np.ndarray, arm: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    mean = 0.5 + 0.4 * np.tanh(np.einsum("nd,nd->n", x, arm_dirs[arm]) * 20)
    return (rng.random(x.shape[0]) < mean).astype(np.float64)


def percentiles(values: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(values) * 1e3  # ms
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


class RealPrompts:
    """``--data``: the MiniLM rows of the RouteLLM MMLU and GSM8K prompts (shuffled by ``--seed``; the
    first ``held_out`` are the queries and the timed updates), arm j rewarded with RouteLLM model
    j mod 2's real outcome on each prompt. The timed updates keep synthetic rewards: an update's cost
    does not depend on the value."""

    def __init__(self, data: Path, held_out: int, seed: int, embedder: str = "minilm") -> None:
        rows = mmlu_rows(data) + gsm8k_rows(data)
        models = list(rows[0]["rewards"])
        x = embed_prompts([row["prompt"] for row in rows], embedder, progress=True)
        y = np.array([[row["rewards"][m] for m in models] for row in rows], dtype=np.float64)
        order = np.random.default_rng(seed).permutation(x.shape[0])
        self.queries = x[order[:held_out]]
        self.x, self.y = x[order[held_out:]], y[order[held_out:]]
        self.models = len(models)

    def sample(self, n: int, arm: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """n distinct prompts (not queries) and arm's rewards on them."""
        if n > self.x.shape[0]:
            raise SystemExit(f"--data holds {self.x.shape[0]} prompts besides the queries: {n} per arm asked")
        rows = rng.permutation(self.x.shape[0])[:n]
        return self.x[rows], self.y[rows, arm % self.models]


def run_size(n: int, args: argparse.Namespace, bar: tqdm, real: RealPrompts | None = None) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    centres = rng.standard_normal((args.clusters, args.dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    arm_dirs = rng.standard_normal((args.arms, args.dim)).astype(np.float32)
    arm_dirs /= np.linalg.norm(arm_dirs, axis=1, keepdims=True)
    names = [f"m{j}" for j in range(args.arms)]
    # None: the policy's default
    chosen_by_flag = {"k_init": args.k_init, "hnsw_at": args.hnsw_at, "precision": args.precision}
    overrides = {name: value for name, value in chosen_by_flag.items() if value is not None}
    policy = KnnUCB(
        arms=names,
        seed=args.seed,
        dim=args.dim,
        window=max(n, 1),
        k_max=args.k_max,
        ef_search=args.ef_search,
        **overrides,
    )
    faiss.omp_set_num_threads(args.build_threads)
    start = time.perf_counter()
    if real is not None:
        for j, name in enumerate(names):
            x, y = real.sample(n // args.arms, j, rng)
            policy.warm_start(x, [name] * x.shape[0], y)
            bar.set_postfix_str(f"N={n}: built arm {j + 1}/{args.arms}")
    else:
        chunk = 100_000
        for lo in range(0, n, chunk):
            m = min(chunk, n - lo)
            x = clustered_points(m, args.dim, rng, centres)
            arm = rng.integers(args.arms, size=m)
            policy.warm_start(x, [names[a] for a in arm], rewards_for(x, arm_dirs, arm, rng))
            bar.set_postfix_str(f"N={n}: built {lo + m}")
    build_s = time.perf_counter() - start
    faiss.omp_set_num_threads(args.threads)
    if real is not None:
        queries = real.queries[: args.queries + args.updates]
    else:
        queries = clustered_points(args.queries + args.updates, args.dim, rng, centres)
    select_t: list[float] = []
    raw_t: list[float] = []
    select_cpu: list[float] = []
    raw_cpu: list[float] = []
    ks: list[float] = []
    chosen = hashlib.sha256()
    for q in queries[: args.queries]:
        c0, t0 = time.thread_time(), time.perf_counter()
        decision = policy.select(Context(embedding=q))
        select_t.append(time.perf_counter() - t0)
        select_cpu.append(time.thread_time() - c0)
        chosen.update(f"{decision.arm};".encode())
        qq = q.reshape(1, -1)
        chosen_k = {a: int(s["k"]) for a, s in decision.scores.items()}
        ks.extend(chosen_k.values())
        c0, t0 = time.thread_time(), time.perf_counter()
        for a, k in chosen_k.items():
            store = policy._stores[a]
            store.set_beam(k)
            store._index.search(qq, k)
        raw_t.append(time.perf_counter() - t0)
        raw_cpu.append(time.thread_time() - c0)
        bar.update(1)
    update_t: list[float] = []
    update_cpu: list[float] = []
    arm_u = rng.integers(args.arms, size=args.updates)
    ys = rewards_for(queries[args.queries :], arm_dirs, arm_u, rng)
    for q, a, y in zip(queries[args.queries :], arm_u, ys, strict=True):
        c0, t0 = time.thread_time(), time.perf_counter()
        policy.update(Observation(embedding=q, arm=names[a], reward=float(y)))
        update_t.append(time.perf_counter() - t0)
        update_cpu.append(time.thread_time() - c0)
        bar.update(1)
    store0 = policy._stores[names[0]]
    k_med = int(np.median(ks))
    recall = hnsw_recall(store0, queries[: min(100, args.queries)], max(k_med, 1))
    s50, s99 = percentiles(select_t)
    r50, r99 = percentiles(raw_t)
    u50, u99 = percentiles(update_t)
    sc50, sc99 = percentiles(select_cpu)
    rc50, rc99 = percentiles(raw_cpu)
    uc50, uc99 = percentiles(update_cpu)
    s_lam = policy.scales()
    return {
        "N": n,
        "per_arm": n // args.arms,
        "hnsw": store0.hnsw,
        "build_s": round(build_s, 1),
        "select_p50_ms": round(s50, 3),
        "select_p99_ms": round(s99, 3),
        "raw_p50_ms": round(r50, 3),
        "raw_p99_ms": round(r99, 3),
        "ratio_p50": round(s50 / r50, 2),
        "update_p50_ms": round(u50, 3),
        "update_p99_ms": round(u99, 3),
        "cpu_select_p50_ms": round(sc50, 3),
        "cpu_select_p99_ms": round(sc99, 3),
        "cpu_raw_p50_ms": round(rc50, 3),
        "cpu_raw_p99_ms": round(rc99, 3),
        "cpu_ratio_p50": round(sc50 / rc50, 2),
        "cpu_update_p50_ms": round(uc50, 3),
        "cpu_update_p99_ms": round(uc99, 3),
        "k_p10_p50_p90": [int(v) for v in np.percentile(ks, [10, 50, 90])],
        "recall_at_k": round(recall, 3),
        "k_recall": k_med,
        "s_l": [round(v, 4) for v in s_lam],
        "choices": chosen.hexdigest()[:12],  # equal across runs = the same arm chosen for every query
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="kNN-UCB select/update latency vs raw FAISS search.")
    parser.add_argument(
        "--sizes", default="1000,10000,100000,1000000", help="total observations, comma-separated"
    )
    parser.add_argument("--arms", type=int, default=8)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=256)
    parser.add_argument("--queries", type=int, default=500, help="timed selects per size")
    parser.add_argument("--updates", type=int, default=200, help="timed updates per size")
    parser.add_argument("--threads", type=int, default=1, help="FAISS threads while timing")
    parser.add_argument("--build-threads", type=int, default=2, help="FAISS threads while building")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--k-max", type=int, default=256, help="the policy's k_max (the cap on k)")
    parser.add_argument("--ef-search", type=int, default=32, help="the policy's HNSW ef_search")
    parser.add_argument(
        "--k-init", type=int, default=None, help="the policy's k_init (default: the policy's default)"
    )
    parser.add_argument(
        "--hnsw-at", type=int, default=None, help="the policy's hnsw_at (default: the policy's default)"
    )
    parser.add_argument(
        "--precision",
        choices=["float32", "float16"],
        default=None,
        help="how each arm stores its vectors (default: the policy's default)",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="real prompts instead of synthetic points: the folder holding routellm/ (../shared/data)",
    )
    parser.add_argument("--embedder", default="minilm", help="the embedder of --data's prompts")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    real = (
        RealPrompts(args.data, args.queries + args.updates, args.seed, args.embedder) if args.data else None
    )
    if real is not None and real.x.shape[1] != args.dim:
        raise SystemExit(f"--data gives {real.x.shape[1]}-d embeddings: drop --dim {args.dim}")
    rows = []
    with tqdm(total=len(sizes) * (args.queries + args.updates), desc="speed_knn") as bar:
        for n in sizes:
            row = run_size(n, args, bar, real)
            rows.append(row)
            tqdm.write(json.dumps(row))
    print("command: python -m experiments.speed_knn " + " ".join(sys.argv[1:] if argv is None else argv))
    cols = ["N", "per_arm", "hnsw", "select_p50_ms", "select_p99_ms", "raw_p50_ms", "raw_p99_ms", "ratio_p50"]
    cols += ["update_p50_ms", "update_p99_ms", "cpu_select_p50_ms", "cpu_select_p99_ms", "cpu_raw_p50_ms"]
    cols += ["cpu_raw_p99_ms", "cpu_ratio_p50", "cpu_update_p50_ms", "cpu_update_p99_ms", "k_p10_p50_p90"]
    cols += ["recall_at_k", "build_s", "choices"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in cols) + " |")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
