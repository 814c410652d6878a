"""Benchmark: how well one chunk of a chunked sds release meets its share of the measured pairs.

A table of ``--rows`` records (benchmarks/sds_chunked.py's ``gen`` network or ``scale``
table, seed 0: the tuning draw) is measured once by sds (epsilon 1, the guard off); the
first chunk of its chunked release is drawn once from the complete sampler and refitted
by each of ``--refits`` (``reweight``: the pool reweighting and raking; ``update``: the
record update alone; ``finish``: the reweighting, then the update of what is still off;
``dpsynth.methods.sds.method.REFIT_MODE``) from the same raw records and generator state.
Reported per refit: the chunk's pair tables still off by the refit's own test (the
6-sigma rule with the chunk's allowance), the largest and median excess over the allowance
(above 1: off), the worst pairs, and the refit's CPU seconds. A bias left in every chunk is
what makes a chunked release fail the gate (docs/sds-generalisation.md, tenth round).

    python benchmarks/sds_chunk_fit.py --table scale --rows 200000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import print_table, write_json  # noqa: E402


def excess(codes: np.ndarray, checks, total: float) -> np.ndarray:
    """Each check's misfit over its cells, in units of the chunk's allowance (above 1: off)."""
    n = codes.shape[0]
    out = []
    for c in checks:
        c = c.on(np.asfortranarray(codes))
        est, var = c.estimate(np.ones(n), total, float(n))
        d = c.noisy.size
        out.append((c.misfit(est, var) - d) / (6.0 * np.sqrt(2.0 * d) * c.share))
    return np.asarray(out)


def run(kind: str, rows: int, refits: list[str]) -> list[dict]:
    """The first chunk of a ``kind`` table of ``rows`` records, refitted each way."""
    import dpsynth.methods.sds.guard as guard
    from benchmarks.sds_chunked import _table
    from benchmarks.sds_matrix import DELTA
    from dpsynth.methods.sds import SdsMethod
    from dpsynth.methods.sds import method as sds_method
    from dpsynth.methods.sds.complete import _sample_complete
    from dpsynth.methods.sds.refit import table_checks
    from dpsynth.privacy.budget import Budget, Ledger
    from dpsynth.rows.encoding import EncodedTable

    guard.MIN_PAIR_THRESHOLD = guard.MIN_PAIR_THRESHOLD_EXPANDED = 0.0
    table = _table(rows, 0, kind)
    method = SdsMethod()
    budget = Budget(epsilon=1.0, delta=DELTA)
    r_measure = np.random.default_rng(np.random.SeedSequence([0, 17]).spawn(1)[0])
    m = method.measure(EncodedTable(schema=table.schema, codes=table.codes),
                       Ledger(budget, method.plan(table.schema, budget)), r_measure)
    sampler = method.sampler(m, table.schema, None, np.random.default_rng(1))
    model, _, _ = method._complete_model(m, table.schema)
    cells = []
    for refit in ["raw", *refits]:
        rng = sampler.chunk_rng(0)
        sampler._left = sampler.rows  # the first chunk's shares again (same splits, same rng)
        sampler._tables = [(nm, type(s)(nm.counts)) for nm, s in sampler._tables]
        sampler._ones = {j: type(s)(sampler.one_way[j]) for j, s in sampler._ones.items()}
        mk, ones, tk = sampler.shares(0, rng)
        n = sampler.sizes[0]
        checks = table_checks(mk, table.schema)
        c0 = time.process_time()
        if refit == "raw":
            codes = _sample_complete(model, n, method.params, rng)
        else:
            sds_method.REFIT_MODE = refit
            codes = method._draw_complete(model, n, mk, table.schema, ones, tk, rng, chunk=True)
        cpu = time.process_time() - c0
        e = excess(np.asarray(codes, dtype=np.int64), checks, tk)
        top = np.argsort(-e)[:3]
        cells.append({"table": kind, "rows": rows, "chunk_rows": n, "chunks": len(sampler.sizes), "refit": refit,
                      "pairs": len(checks), "off": int((e > 1).sum()), "max_excess": round(float(e.max()), 2),
                      "median_excess": round(float(np.median(e)), 2),
                      "worst": [[list(checks[i].cols), round(float(e[i]), 2)] for i in top],
                      "cpu_s": round(cpu, 1), "loadavg": list(os.getloadavg())})
        print(cells[-1], flush=True)
    return cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", choices=["gen", "scale"], default="scale")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--refits", default="reweight,update,finish")
    ap.add_argument("--out", default="sds_chunk_fit")
    args = ap.parse_args()
    cells = run(args.table, args.rows, args.refits.split(","))
    print_table(["table", "rows", "chunk", "refit", "off / pairs", "max", "median", "cpu s", "load"],
                [[c["table"], c["rows"], c["chunk_rows"], c["refit"], f"{c['off']}/{c['pairs']}", c["max_excess"],
                  c["median_excess"], c["cpu_s"], f"{c['loadavg'][0]:.1f}"] for c in cells])
    write_json(args.out, {"epsilon": 1.0, "cells": cells})


if __name__ == "__main__":
    main()
