"""Microaggregation methods: error against n, and side by side with other methods.

Part 1 (scaling): ``microaggregation-dp`` on a generated table (a random Bayesian network
of 8 columns) for n from 1e3 to 1e5 at epsilon 1: mean TVD of the d-way marginals
(d = 1, 2, 3) and the log-log slope of the error against n, beside the local slope of
Theorem 5.15's rate sqrt(log log n / log n).

Part 2 (side by side): adult and NIST national2019 at epsilon 1 and 4: ``marginals``,
``sds``, ``microaggregation-dp`` with the paper's defaults and with ours, and the anonymous
``microaggregation`` (NOT DP; a reference for what the partition alone costs). Mean TVD
by marginal size, the k-marginal score (NIST's for national2019, 1000 (1 - mean 3-way
TVD) for adult), wall time and peak memory, each run in its own process.

Part 3 (defaults): the effect of t, alpha, b and the budget split on adult and
national2019 at epsilon 1.

Beside parts 2 and 3, each table's non-private ceilings (``ceilings``; benchmarks._common.ceilings
as in one_step_releases.py): ``binned``, the real codes themselves (decoded for NIST's score),
and ``resample``, n rows drawn with replacement from them (seed 0), the i.i.d. sampling floor.

    PYTHONPATH=. python benchmarks/microaggregation.py [--parts 1,2,3] [--quick]
    PYTHONPATH=. python benchmarks/microaggregation.py --ceilings-only   # adds them to the JSON only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import benchmarks.sds_vs_pacsynth as svp  # noqa: E402
from benchmarks._common import SHARED_DATA, add_ceilings, print_table, write_json  # noqa: E402
from benchmarks.sds_vs_pacsynth import evaluate, load_datasets, peak_rss_mb, release_delta  # noqa: E402

# The shared data folder beside the repository, or where DPSYNTH_SHARED_DATA points.
SHARED = Path(os.environ.get("DPSYNTH_SHARED_DATA", SHARED_DATA))
svp.SHARED_DATA = SHARED

NUMERIC_ADULT = ("age", "fnlwgt", "capital-gain", "capital-loss", "hours-per-week", "education-num")


def load(name: str) -> dict[str, Any]:
    if name != "adult":
        return load_datasets([name])[name]
    import pandas as pd

    from dpsynth.schema import schema_from_dict

    domain = json.loads((SHARED / "adult" / "adult-domain.json").read_text())
    df = pd.read_csv(SHARED / "adult" / "adult.csv")
    cols = []
    for c, k in domain.items():
        if c in NUMERIC_ADULT:  # already binned codes 0..k-1: numeric bins of width 1
            cols.append({"name": c, "type": "numeric", "edges": list(range(k + 1)), "integer": True})
        else:
            cols.append({"name": c, "type": "categorical", "values": [str(v) for v in range(k)]})
    schema = schema_from_dict({"name": "adult", "columns": cols})
    codes = np.clip(df[list(domain)].to_numpy(), 0, np.array(list(domain.values())) - 1).astype(np.uint8)
    return {"schema": schema, "codes": codes, "note": "adult.csv with adult-domain.json"}


def generated(n: int, seed: int = 7) -> dict[str, Any]:
    """A random Bayesian network of 8 columns (cardinalities 2-5), each with up to 2 parents."""
    from dpsynth.schema import schema_from_dict

    rng = np.random.default_rng(seed)
    cards = [2, 3, 4, 2, 5, 3, 2, 4]
    data = np.zeros((n, len(cards)), dtype=np.int64)
    draw = np.random.default_rng(seed + n)
    for j, c in enumerate(cards):
        parents = rng.choice(j, size=min(j, 2), replace=False) if j else []
        key = np.zeros(n, dtype=np.int64)
        size = 1
        for p in parents:
            key = key * cards[p] + data[:, p]
            size *= cards[p]
        table = rng.dirichlet(np.full(c, 0.5), size)
        u = draw.random(n)[:, None]
        data[:, j] = (u > np.cumsum(table[key], axis=1)).sum(axis=1).clip(max=c - 1)
    schema = schema_from_dict({"name": "generated", "columns": [
        {"name": f"x{j}", "type": "categorical", "values": [str(v) for v in range(c)]} for j, c in enumerate(cards)]})
    return {"schema": schema, "codes": data.astype(np.uint8), "note": "generated Bayesian network, 8 columns"}


def run_method(data: dict[str, Any], method: str, params: dict[str, str], epsilon: float, seed: int) -> np.ndarray:
    from dpsynth.rows.encoding import EncodedTable
    from dpsynth.methods import get_method
    from dpsynth.privacy.budget import Budget, Ledger

    m = get_method(method, params)
    budget = Budget(epsilon=epsilon, delta=release_delta(data["codes"].shape[0]))
    ledger = Ledger(budget, m.plan(data["schema"], budget))
    rng = np.random.default_rng(seed)
    meas = m.measure(EncodedTable(schema=data["schema"], codes=data["codes"]), ledger, rng)
    out = m.synthesize(meas, data["schema"], None, rng)
    return out.codes, {k: meas.meta[k] for k in ("t", "alpha", "b", "cells") if k in meas.meta}


def worker(name: str, method: str, params: str, epsilon: float, out: str) -> None:
    import dpsynth.methods  # noqa: F401  (imports are not part of the wall time)

    data = load(name)
    base = peak_rss_mb()
    t0 = time.perf_counter()
    codes, design = run_method(data, method, json.loads(params), epsilon, 11)
    wall = time.perf_counter() - t0
    res = {"wall_s": wall, "peak_rss_mb": peak_rss_mb(), "rss_over_load_mb": peak_rss_mb() - base, **design}
    res.update(evaluate(name, data, codes.astype(np.int64)))
    Path(out).write_text(json.dumps(res))


def in_process(name: str, method: str, params: dict[str, str], epsilon: float) -> dict[str, Any]:
    out = Path("/tmp") / f"microagg-bench-{name}-{method}-{epsilon:g}-{abs(hash(json.dumps(params))) % 10**8}.json"
    cmd = [sys.executable, __file__, "--worker", name, method, json.dumps(params), str(epsilon), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1][:200] if proc.stderr.strip() else "failed"}
    return json.loads(out.read_text())


# --- part 1: error against n ---------------------------------------------------


def theorem_rate(n: float) -> float:
    return math.sqrt(math.log(math.log(n)) / math.log(n))


def part1(quick: bool) -> dict[str, Any]:
    from dpsynth.evaluation import metrics

    ns = [1000, 3000, 10_000, 30_000, 100_000]
    reps = 1 if quick else 3
    rows, res = [], {}
    for preset in ("paper", "tuned"):
        errs = {d: [] for d in (1, 2, 3)}
        for n in ns:
            data = generated(n)
            vals = {d: [] for d in (1, 2, 3)}
            for r in range(reps):
                codes, design = run_method(data, "microaggregation-dp", {"preset": preset}, 1.0, 100 + r)
                tv = metrics.tvd_by_k(data["codes"], codes, data["schema"].cardinalities, ks=(1, 2, 3))
                for d in (1, 2, 3):
                    vals[d].append(tv[d]["mean"])
            for d in (1, 2, 3):
                errs[d].append(float(np.mean(vals[d])))
            rows.append([preset, n, design.get("t"), design.get("alpha"), round(design.get("b", 0)), design.get("cells"),
                         errs[1][-1], errs[2][-1], errs[3][-1]])
        slopes = {d: float(np.polyfit(np.log(ns), np.log(errs[d]), 1)[0]) for d in (1, 2, 3)}
        res[preset] = {"n": ns, "tvd": errs, "slope": slopes}
    theory = float(np.polyfit(np.log(ns), np.log([theorem_rate(n) for n in ns]), 1)[0])
    print("\nPart 1: microaggregation-dp on a generated 8-column table, epsilon 1, mean TVD by d")
    print_table(["preset", "n", "t", "alpha", "b", "cells", "d=1", "d=2", "d=3"], rows)
    print_table(["preset", "slope d=1", "slope d=2", "slope d=3", "Theorem 5.15 rate slope"],
                [[p, res[p]["slope"][1], res[p]["slope"][2], res[p]["slope"][3], theory] for p in res])
    res["theorem_slope"] = theory
    return res


# --- part 2: side by side ------------------------------------------------------

METHODS = [
    ("marginals", "marginals", {}),
    ("sds", "sds", {}),
    ("pgm", "pgm", {}),
    ("ma-dp paper", "microaggregation-dp", {"preset": "paper"}),
    ("ma-dp tuned", "microaggregation-dp", {}),
    ("ma anonymous (NOT DP)", "microaggregation", {"anonymous_only": "true"}),
]


def part2(datasets: list[str], only: set[str] | None = None) -> list[dict[str, Any]]:
    out, rows = [], []
    for name in datasets:
        for eps in (1.0, 4.0):
            for label, method, params in METHODS:
                if only and label not in only:
                    continue
                if method == "microaggregation" and eps != 1.0:
                    continue  # spends no budget: one run
                r = in_process(name, method, params, eps)
                r.update({"data": name, "epsilon": eps, "method": label})
                out.append(r)
                rows.append([name, eps if method != "microaggregation" else "-", label,
                             *(r.get(k, "err") for k in ("tvd1_mean", "tvd2_mean", "tvd3_mean", "kmarginal",
                                                         "wall_s", "peak_rss_mb"))])
                print(rows[-1], flush=True)
    print("\nPart 2: side by side (mean TVD by marginal size, k-marginal score, wall s, peak RSS MB)")
    print_table(["data", "eps", "method", "tvd1", "tvd2", "tvd3", "k-marginal", "wall s", "peak MB"], rows)
    return out


# --- part 3: defaults ----------------------------------------------------------

VARIANTS = [
    ("paper: t, alpha, b by Sec. 5.8; split 1:1:1", {"preset": "paper"}),
    ("paper + split 1:1:12", {"preset": "paper", "split": "1,1,12"}),
    ("paper + split 1:1:12 + b x8", {"preset": "paper", "split": "1,1,12", "b_factor": "8"}),
    ("tuned net, b x1, split 1:1:1", {"split": "1,1,1", "b_factor": "1"}),
    ("tuned (net, b x8, split 1:1:12)", {}),
    ("tuned + numeric=bins", {"numeric": "bins"}),
    ("tuned + numeric=scaled", {"numeric": "scaled"}),
]


def part3(datasets: list[str]) -> list[dict[str, Any]]:
    out, rows = [], []
    for name in datasets:
        for label, params in VARIANTS:
            r = in_process(name, "microaggregation-dp", params, 1.0)
            r.update({"data": name, "variant": label})
            out.append(r)
            rows.append([name, label, *(r.get(k, "err") for k in ("t", "alpha", "b", "cells", "tvd1_mean",
                                                                    "tvd2_mean", "tvd3_mean"))])
            print(rows[-1], flush=True)
    print("\nPart 3: microaggregation-dp defaults at epsilon 1")
    print_table(["data", "variant", "t", "alpha", "b", "cells", "tvd1", "tvd2", "tvd3"], rows)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="1,2,3")
    ap.add_argument("--data", default="adult,nist")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--methods", default="", help="part 2: only these labels (comma-separated), e.g. pgm")
    ap.add_argument("--out", default="microaggregation", help="name of the JSON in benchmarks/results/")
    ap.add_argument("--ceilings-only", action="store_true", help="add the tables' ceilings to the JSON only")
    args = ap.parse_args()
    parts = {int(p) for p in args.parts.split(",")}
    datasets = [d for d in args.data.split(",") if d]
    if args.ceilings_only or parts & {2, 3}:
        from benchmarks.one_step_releases import ceiling, ceiling_rows

        found = {d: ceiling(d, load(d)) for d in datasets}
        for d, c in found.items():
            print(f"\n{d}: ceilings")
            print_table(["", "tvd1", "tvd2", "tvd3", "k-marginal", "", ""], ceiling_rows(c))
        if args.ceilings_only:
            add_ceilings(args.out, found)
            return
    payload: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    t0 = time.perf_counter()
    if 1 in parts:
        payload["scaling"] = part1(args.quick)
    if 2 in parts:
        payload["side_by_side"] = part2(datasets, {m for m in args.methods.split(",") if m} or None)
    if 3 in parts:
        payload["defaults"] = part3(datasets)
    if parts & {2, 3}:
        payload["ceilings"] = found
    payload["total_s"] = time.perf_counter() - t0
    write_json(args.out, payload)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), sys.argv[6])
    else:
        main()
