"""One FAISS thread in unit tests: the indexes are small, and OpenMP threads on a busy shared machine
spin and slow the suite down several times."""

from __future__ import annotations

import faiss

faiss.omp_set_num_threads(1)
