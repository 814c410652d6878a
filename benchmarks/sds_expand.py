"""Benchmark: sds's expanded release (one fitted pool, copies; issue 25, twelfth round).

Measures a table once with sds (epsilon 1, the pre-spend guard off), builds the release's
sampler (``SdsMethod.sampler``, which expands above the switch) and reports: the pool's
fit (tables off before, refitted, still off after; the weights' effective size, distinct
records, the most copies of one record), synthesis CPU seconds (fit, then the copies of
every record), the gate's worst ratio per k computed exactly from the weighted pool's
tables (they are the release's), the mean TVD of the 1-, 2- and 3-way marginals against
the real table (1-way also of the weighted pool before the copies' rounding,
``tvd1_weights``), and the peak RSS of the process. Tables: ``scale`` (benchmarks/scale.py's
table; ``--rows`` 1,000,000 per file of its generator, seed 2026 + seed), ``int6`` /
``int7`` (benchmarks/sds_matrix.py's 1,000,000 x 20 interaction tables, seeds as the matrix
draws them). One cell per process; results merge into results/sds_expand.json by
(label, table, rows, seed, pool); ``--label`` names the code measured (cells of the twelfth round have none).

    python benchmarks/sds_expand.py --table scale --rows 1000000 --seed 0
    python benchmarks/sds_expand.py --table int6
    python benchmarks/sds_expand.py --table int7 --table-seed 9101 --rows 3000000 --seed 3 --label lastpass

Held-out half of the sixteenth round (the last pass, dpsynth/methods/sds/lastpass.py; named
before any tuning run, nothing set on them; run once each after tuning, in this order):
H1 int7's shape, generator seed 9101, 3,000,000 rows, release seed 3; H2 int6's shape,
generator seed 9102, 5,000,000 rows, release seed 4; H3 int7's shape, generator seed 9103,
10,000,000 rows, release seed 5. Tuning half: the captures of int7's generator at 5M seed 0
and int6's at 3M seed 1 (benchmarks/sds_descent.py capture).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import RESULTS, print_table, write_json  # noqa: E402


def _table(kind: str, rows: int, seed: int, table_seed: int | None = None):
    """(schema, codes) of the benchmark table; ``table_seed``: int6 / int7's generator drawn
    with that seed (a fresh structure of the same shape) instead of the matrix's 8000 + index."""
    if kind == "scale":
        from benchmarks.scale import FILE_ROWS, _piece, schema as scale_schema
        from dpsynth.rows.encoding import encode

        sch, rng = scale_schema(), np.random.default_rng(2026 + seed)
        sizes = [min(FILE_ROWS, rows - s) for s in range(0, rows, FILE_ROWS)]
        return sch, np.concatenate([encode(_piece(k, rng), sch).codes for k in sizes])
    from benchmarks.sds_matrix import INTERACTIONS, interaction_table, make_table

    index = int(kind.removeprefix("int"))
    if rows == INTERACTIONS[index][0] and table_seed is None:
        t = interaction_table(index)
        return t.schema, t.codes
    _, p, cmax, num_share, miss_share, inter = INTERACTIONS[index]  # the same generator, another size
    gen = 8000 + index if table_seed is None else int(table_seed)
    return make_table(rows, p, cmax, num_share, miss_share, seed=gen, name=kind, interactions=inter)


def _gate(pool: np.ndarray, copies: np.ndarray, m, schema) -> dict:
    """The gate's worst TVD / threshold per k and how many marginals are over, from the
    release's exact tables (the pool's records counted ``copies`` times)."""
    from dpsynth.evaluation.predicted import dp_row_estimate
    from dpsynth.gate.checks import _marginal_checks, measured_subsets
    from dpsynth.gate.scan import CodeCounts

    counts = {sub: _counts(pool, sub, schema.cardinalities, copies) for sub in measured_subsets(schema, m)}
    marg = _marginal_checks(CodeCounts(schema=schema, n=int(copies.sum()), counts=counts), m,
                            dp_row_estimate(m).value, {})
    out: dict = {}
    for k in sorted({e["k"] for e in marg.errors}):
        errs = [e for e in marg.errors if e["k"] == k]
        worst = max(errs, key=lambda e: e["tvd"] / e["threshold"])
        out[f"max_ratio_k{k}"] = round(worst["tvd"] / worst["threshold"], 4)
        out[f"worst_k{k}"] = worst["marginal"]
        out[f"over_k{k}"] = sum(e["tvd"] > e["threshold"] for e in errs)
    out["published"] = all(v <= 1.0 for k, v in out.items() if k.startswith("max_ratio"))
    return out


def _counts(codes: np.ndarray, cols, cards, weights=None) -> np.ndarray:
    shape = tuple(cards[j] for j in cols)
    idx = np.ravel_multi_index(tuple(codes[:, j].astype(np.int64) for j in cols), shape)
    return np.bincount(idx, weights=weights, minlength=int(np.prod(shape))).reshape(shape)


def _tvds(real: np.ndarray, pool: np.ndarray, copies: np.ndarray, cards, ks=(1, 2, 3)) -> dict:
    out = {}
    for k in ks:
        vals = []
        for sub in itertools.combinations(range(len(cards)), k):
            a = _counts(real, sub, cards).ravel().astype(float)
            b = _counts(pool, sub, cards, copies).ravel()
            vals.append(0.5 * np.abs(a / a.sum() - b / b.sum()).sum())
        out[f"tvd{k}"] = round(float(np.mean(vals)), 5)
    return out


def cell(kind: str, rows: int, seed: int, table_seed: int | None = None) -> dict:
    """One cell in this process."""
    import dpsynth.methods.sds.guard as guard
    from benchmarks.sds_matrix import DELTA
    from dpsynth.methods.sds import SdsMethod, expand
    from dpsynth.pipeline.synthetic import block_sizes
    from dpsynth.privacy.budget import Budget, Ledger
    from dpsynth.rows.encoding import EncodedTable

    guard.MIN_PAIR_THRESHOLD = guard.MIN_PAIR_THRESHOLD_EXPANDED = 0.0  # what would the gate say?
    from dpsynth.methods.sds import lastpass

    passes: list = []  # what the last pass did (recorded; the same call, the same bytes)
    real_pass = lastpass.last_pass
    def recorded(*a, **k):
        c0 = time.process_time()
        out = real_pass(*a, **k)
        passes.append({**out[1], "cpu_s": round(time.process_time() - c0, 1)})
        return out

    lastpass.last_pass = recorded
    from dpsynth.methods.sds import descent

    descents: list = []  # what the descent did (recorded; the same call, the same bytes)
    real_descend = descent.descend
    def watched(*a, **k):
        c0 = time.process_time()
        out = real_descend(*a, **k)
        descents.append({**{key: v for key, v in out[1].items() if key != "trace"},
                         "trace": [{key: r[key] for key in ("round", "j", "above_1", "worst", "cpu_s")} for r in out[1].get("trace", [])],
                         "cpu_s": round(time.process_time() - c0, 1)})
        return out

    descent.descend = watched
    schema, real = _table(kind, rows, seed, table_seed)
    method = SdsMethod()
    budget = Budget(epsilon=1.0, delta=DELTA)
    r_measure, r_synth, _ = (np.random.default_rng(s) for s in np.random.SeedSequence([seed, 17]).spawn(3))
    m = method.measure(EncodedTable(schema=schema, codes=real), Ledger(budget, method.plan(schema, budget)), r_measure)
    c0 = time.process_time()
    s = method.sampler(m, schema, None, r_synth)
    fit = time.process_time() - c0
    if not isinstance(s, expand.ExpandedSampler):
        raise SystemExit(f"{kind} at {rows} rows is not expanded")
    c1 = time.process_time()
    for k in block_sizes(s.rows):
        s.sample(k, r_synth)
    copy = time.process_time() - c1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c = s.counts
    pool = np.asfortranarray(s.pool)
    out = {"table": kind, "rows": int(real.shape[0]), "seed": seed}
    if passes:
        out["lastpass"] = passes[-1]
    if descents:
        out["descent"] = descents[-1]
    from benchmarks.sds_matrix import _forecast

    f = _forecast(m, schema, "sds")  # the guard's, off here: what it would have said
    if f is not None:
        out["forecast"] = f["min_pair_threshold"]
    if table_seed is not None:
        out["table_seed"] = int(table_seed)
    return {**out, **s.info,
            "ess": round(float(c.sum()) ** 2 / float((c.astype(float) ** 2).sum())), "distinct": int((c > 0).sum()),
            "max_copies": int(c.max()), "fit_cpu_s": round(fit, 1), "copy_cpu_s": round(copy, 1),
            "peak_rss_mb": round(peak / 1024), **_gate(pool, c.astype(float), m, schema),
            **_tvds(np.asfortranarray(real), pool, c.astype(float), schema.cardinalities),
            "tvd1_weights": _tvds(np.asfortranarray(real), pool, s.weights, schema.cardinalities, ks=(1,))["tvd1"],
            "loadavg": list(os.getloadavg())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", default="scale", choices=["scale", "int6", "int7"])
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the table (int6/int7: their generator at another size; 1,000,000 is the matrix table itself)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--table-seed", type=int, default=None,
                    help="int6/int7: draw the generator's structure with this seed (default: the matrix's 8000 + index)")
    ap.add_argument("--label", default="latent", help="kept beside older cells of the same table (twelfth: before)")
    args = ap.parse_args()
    res = {"label": args.label, **cell(args.table, args.rows, args.seed, args.table_seed)}
    print(json.dumps(res), flush=True)
    path = RESULTS / "sds_expand.json"
    old = json.loads(path.read_text()).get("cells", []) if path.exists() else []
    def key(c: dict) -> tuple:
        return c.get("label", "twelfth"), c["table"], c.get("table_seed"), c["rows"], c["seed"], c["pool_rows"]

    cells = [c for c in old if key(c) != key(res)] + [res]
    print_table(["label", "table", "gen", "rows", "seed", "pool", "ess latent", "published", "k1", "k2", "k3", "tvd1", "tvd2", "tvd3", "fit cpu s",
                 "ess", "peak MB", "load"],
                [[c.get("label", "twelfth"), c["table"], c.get("table_seed", "-"), c["rows"], c["seed"], c["pool_rows"],
                  c.get("ess_latent", "-") if c.get("ess_latent", 0) > c.get("ess_sampler", 0) else "-", c.get("published"), c.get("max_ratio_k1"),
                  c.get("max_ratio_k2"), c.get("max_ratio_k3"), c.get("tvd1"), c.get("tvd2"), c.get("tvd3"), c.get("fit_cpu_s"),
                  c.get("ess"), c.get("peak_rss_mb"), f"{c['loadavg'][0]:.1f}"] for c in cells])
    write_json("sds_expand", {"epsilon": 1.0, "cells": cells})


if __name__ == "__main__":
    main()
