"""Benchmark: counting all k-way marginals, block engine vs the naive per-subset loop.

Synthetic codes (default 1,000,000 rows x 20 columns, cardinalities drawn from 2..12,
seed 0). The naive loop computes each subset's flat index with ``ravel_multi_index``
on the row-major code matrix and counts it with ``bincount``; the engine is
``dpsynth.rows.counting.iter_marginals`` (blocks of columns counted once, marginals read
off by summation), tried at several block sizes. Every engine table is checked
against the naive one. Peak memory of an engine run is measured with tracemalloc.

    .venv/bin/python benchmarks/marginal_counting.py            # ~30 s on 2 cores
    .venv/bin/python benchmarks/marginal_counting.py --rows 200000 --no-naive

Writes benchmarks/results/marginal_counting.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpsynth.rows import counting as M  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "marginal_counting.json"


def make_codes(rows: int, cols: int, seed: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    cards = [int(c) for c in rng.integers(2, 13, size=cols)]
    codes = np.empty((rows, cols), dtype=np.uint8)
    for j, c in enumerate(cards):
        codes[:, j] = rng.integers(0, c, size=rows)
    return codes, cards


def naive(codes: np.ndarray, cards: list[int], subsets: list[tuple[int, ...]]) -> dict:
    out = {}
    for s in subsets:
        dims = tuple(cards[j] for j in s)
        flat = np.ravel_multi_index(tuple(codes[:, j] for j in s), dims)
        out[s] = np.bincount(flat, minlength=math.prod(dims)).reshape(dims)
    return out


def timed(fn, repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--cols", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=2, help="engine runs per setting (best is kept)")
    ap.add_argument("--no-naive", action="store_true", help="skip the slow naive loop")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    codes, cards = make_codes(args.rows, args.cols, args.seed)
    triples = M.k_subsets(args.cols, 3)
    all_k = M.k_subsets(args.cols, (1, 2, 3))
    rows: list[dict] = []

    reference = None
    if not args.no_naive:
        seconds, reference = timed(lambda: naive(codes, cards, triples), 1)
        rows.append({"method": "naive per-subset bincount", "ks": "3", "max_cells": None,
                     "marginals": len(triples), "passes": len(triples), "seconds": seconds})

    def engine(subsets, max_cells):
        return dict(M.iter_marginals(codes, cards, subsets, max_cells=max_cells))

    for max_cells in (1 << 12, 1 << 14, 1 << 16, 1 << 18):
        plan = M.plan_blocks(triples, cards, max_cells=max_cells)
        seconds, got = timed(lambda: engine(triples, max_cells), args.repeat)
        equal = None
        if reference is not None:
            equal = all(np.array_equal(got[s], reference[s]) for s in triples)
            if not equal:
                raise SystemExit(f"engine disagrees with naive counts at max_cells={max_cells}")
        rows.append({"method": "block engine", "ks": "3", "max_cells": max_cells,
                     "marginals": len(triples), "passes": len(plan), "seconds": seconds,
                     "equal_to_naive": equal})

    plan = M.plan_blocks(all_k, cards)
    seconds, _ = timed(lambda: engine(all_k, M.DEFAULT_MAX_CELLS), args.repeat)
    rows.append({"method": "block engine", "ks": "1,2,3", "max_cells": M.DEFAULT_MAX_CELLS,
                 "marginals": len(all_k), "passes": len(plan), "seconds": seconds})

    # Peak Python-heap memory of a streamed engine run (tables consumed one by one).
    tracemalloc.start()
    for _ in M.iter_marginals(codes, cards, all_k):
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    all_tables_bytes = sum(8 * math.prod(cards[j] for j in s) for s in all_k)

    naive_seconds = rows[0]["seconds"] if reference is not None else None
    print(f"all k-way marginals of {args.rows:,} x {args.cols} codes, cardinalities {min(cards)}..{max(cards)}"
          f" (sum {sum(cards)}), {os.cpu_count()} cores")
    header = f"{'method':<27}{'k':>6}{'max_cells':>11}{'marginals':>11}{'passes':>8}{'seconds':>9}{'speed-up':>10}"
    print(header)
    print("-" * len(header))
    for r in rows:
        r["speedup_vs_naive"] = (naive_seconds / r["seconds"]) if naive_seconds else None
        mc = "" if r["max_cells"] is None else str(r["max_cells"])
        su = "" if r["speedup_vs_naive"] is None else f"{r['speedup_vs_naive']:.1f}x"
        print(f"{r['method']:<27}{r['ks']:>6}{mc:>11}{r['marginals']:>11}{r['passes']:>8}{r['seconds']:>9.2f}{su:>10}")
    print(f"engine peak traced memory: {peak / 2**20:.1f} MiB (codes: {codes.nbytes / 2**20:.1f} MiB; "
          f"all 1/2/3-way tables at once would be {all_tables_bytes / 2**20:.1f} MiB)")

    result = {
        "benchmark": "marginal_counting",
        "rows": args.rows,
        "cols": args.cols,
        "seed": args.seed,
        "cardinalities": cards,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__, "platform": platform.platform()},
        "results": rows,
        "engine_peak_traced_bytes": peak,
        "codes_bytes": int(codes.nbytes),
        "all_tables_bytes": all_tables_bytes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
