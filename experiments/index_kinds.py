"""What one kNN select's searches cost on real prompt embeddings, by index kind, beside their recall.

kNN-UCB searches each candidate arm's store once or twice per select (``routers.neighbors``), fetching
up to k_max = 256 neighbours. This measures that work outside the policy, on the MiniLM embeddings of
the RouteLLM MMLU and GSM8K prompts (``--data``; ``experiments.speed_knn.RealPrompts``, embedded once and
cached by ``bench.embedding_cache``): the prompts are shuffled (``--seed``), ``--queries`` of them
are held out as queries and the rest split evenly over ``--arms`` arms, each with an index of its own.
For each index, per query, one search of every arm at ``--k`` neighbours is timed in the calling
thread's CPU time (FAISS on one thread; an HNSW row fetches min(ef, k)); reported are the median over
queries, in ms, and the recall at that k against an exact search of the same arm (``|approx top-k & exact top-k| / k``, the mean over queries
and arms). Index kinds:

- ``flat``: ``IndexFlatIP``, exact; what an arm below ``hnsw_at`` points uses;
- ``hnsw M/ef``: ``IndexHNSWFlat`` of degree M searched with beam ef for min(ef, k) neighbours (``--hnsw-m``,
  ``--ef``), as the store searches (M 32, beam = neighbours fetched: the scan's 128, then 256);
- ``ivf nlist/nprobe``: ``IndexIVFFlat`` with nlist k-means lists, nprobe of them scanned (``--nlist``,
  ``--nprobe``); the stores do not use it: it is measured as the cheaper approximate index it could be.

    python -m experiments.index_kinds --arms 1 4 --json /tmp/index_kinds.json

experiments/ is not packaged.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from tqdm import tqdm

from experiments.speed_knn import RealPrompts
from routers.neighbors import recall_at_k


def cpu_ms(search: Callable[[np.ndarray], object], queries: np.ndarray) -> float:
    """Median thread CPU time of ``search`` over the queries, in ms."""
    times = []
    for q in queries:
        start = time.thread_time()
        search(q.reshape(1, -1))
        times.append(time.thread_time() - start)
    return float(np.median(times) * 1e3)


def measure(
    name: str, indexes: Sequence[Any], truth: Sequence[np.ndarray], queries: np.ndarray, k: int
) -> dict[str, Any]:
    """One search of every index at k per query: median CPU ms, and recall@k against ``truth``."""
    ms = cpu_ms(lambda q: [index.search(q, k) for index in indexes], queries)
    found = [index.search(queries, k)[1] for index in indexes]
    hits = float(np.mean([recall_at_k(got, want, k) for got, want in zip(found, truth, strict=True)]))
    return {"index": name, "k": k, "cpu_ms": round(ms, 3), "recall": round(hits, 3)}


def run_arms(
    x: np.ndarray, queries: np.ndarray, arms: int, args: argparse.Namespace, bar: tqdm
) -> list[dict]:
    parts = np.array_split(x, arms)
    dim = x.shape[1]
    k = args.k
    flats = []
    for part in parts:
        flat = faiss.IndexFlatIP(dim)
        flat.add(part)
        flats.append(flat)
    truth = [flat.search(queries, k)[1] for flat in flats]
    rows = [measure("flat", flats, truth, queries, k)]
    bar.update(1)
    for m in args.hnsw_m:
        graphs = []
        for part in parts:
            graph = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
            graph.hnsw.efConstruction = 80
            faiss.omp_set_num_threads(args.build_threads)
            graph.add(part)
            faiss.omp_set_num_threads(1)
            graphs.append(graph)
        for ef in args.ef:  # a beam fetching ef neighbours, as the scan's searches do
            for graph in graphs:
                graph.hnsw.efSearch = ef
            rows.append(measure(f"hnsw M{m}/ef{ef}", graphs, truth, queries, min(ef, k)))
            bar.update(1)
    for nlist in args.nlist:
        lists = []
        for part in parts:
            quantizer = faiss.IndexFlatIP(dim)
            ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
            faiss.omp_set_num_threads(args.build_threads)
            ivf.train(part)
            ivf.add(part)
            faiss.omp_set_num_threads(1)
            lists.append((ivf, quantizer))  # the quantizer must outlive the index
        for nprobe in args.nprobe:
            for ivf, _ in lists:
                ivf.nprobe = nprobe
            rows.append(measure(f"ivf {nlist}/{nprobe}", [ivf for ivf, _ in lists], truth, queries, k))
            bar.update(1)
    for row in rows:
        row.update(arms=arms, per_arm=int(parts[0].shape[0]))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.index_kinds", description=__doc__)
    parser.add_argument("--data", type=Path, default=Path("../shared/data"), help="holds routellm/")
    parser.add_argument("--arms", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--k", type=int, default=256, help="neighbours per search (k_max)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--hnsw-m", type=int, nargs="+", default=[32, 16])
    parser.add_argument("--ef", type=int, nargs="+", default=[128, 256], help="beams, each fetching as many")
    parser.add_argument("--nlist", type=int, nargs="+", default=[64])
    parser.add_argument("--nprobe", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--build-threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--embedder", default="minilm", help="the embedder of the prompts")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    faiss.omp_set_num_threads(1)
    real = RealPrompts(args.data, args.queries, args.seed, args.embedder)
    queries, points = np.ascontiguousarray(real.queries), np.ascontiguousarray(real.x)
    steps = len(args.arms) * (1 + len(args.hnsw_m) * len(args.ef) + len(args.nlist) * len(args.nprobe))
    rows: list[dict[str, Any]] = []
    with tqdm(total=steps, desc="index_kinds") as bar:
        for arms in args.arms:
            rows.extend(run_arms(points, queries, arms, args, bar))
    print(
        f"{points.shape[0] + queries.shape[0]} prompts, {queries.shape[0]} held out as queries; k = {args.k}"
    )
    print("| arms | points per arm | index | k | search CPU ms per select (median) | recall@k |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        cells = [row["arms"], row["per_arm"], row["index"], row["k"], row["cpu_ms"], row["recall"]]
        print("| " + " | ".join(str(cell) for cell in cells) + " |")
    if args.json:
        command = " ".join([parser.prog, *(sys.argv[1:] if argv is None else argv)])
        args.json.write_text(json.dumps({"command": command, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
