"""Benchmark: sds's pool update as a descent (descent.py) on a pool captured from the release path.

``capture``: measures a table with sds (epsilon 1, the pre-spend guard off, as
benchmarks/sds_expand.py does) and builds the release's sampler with the pool update replaced
by a recorder, so that the fitted pool and the update's arguments (its generator's state
included) are written to a pickle file (a scratch file: it holds the measurement, never the
real rows). ``run``: loads that file, rounds the pool to equal records as ``update_pool``
does and runs the descent (module constants can be set as ``NAME=value``), then reports the
descent's rounds and J, its CPU seconds, the process peak, the tables' misfit ratios and the
gate's worst ratio per k from the records written as equal copies to the release's rows
(benchmarks/sds_expand.py's gate), and with ``--tvd`` the 1-, 2-, 3-way TVD against the real
table (regenerated) before (the weighted pool) and after. Results append to
results/sds_descent.json (tuning only: docs/sds-generalisation.md, fifteenth round).

    python benchmarks/sds_descent.py capture --table int7 --rows 5000000 --seed 0 --out /tmp/int7.pkl
    python benchmarks/sds_descent.py run /tmp/int7.pkl ROUNDS=8 --tvd
    python benchmarks/sds_descent.py capture --table int7 --table-seed 9103 --rows 10000000 --seed 5 --out /tmp/h3.pkl
    python benchmarks/sds_descent.py run /tmp/h3.pkl ROUNDS=32 --at 8,16 --out sds_descent_reach
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import RESULTS, write_json  # noqa: E402


def capture(kind: str, rows: int, seed: int, out: str, table_seed: int | None = None) -> None:
    import benchmarks.sds_expand as be
    import dpsynth.methods.sds.guard as guard
    import dpsynth.methods.sds.method as meth
    from benchmarks.sds_matrix import DELTA
    from dpsynth.methods.sds import SdsMethod
    from dpsynth.privacy.budget import Budget, Ledger
    from dpsynth.rows.encoding import EncodedTable

    guard.MIN_PAIR_THRESHOLD = guard.MIN_PAIR_THRESHOLD_EXPANDED = 0.0
    schema, real = be._table(kind, rows, seed, table_seed)
    method = SdsMethod()
    budget = Budget(epsilon=1.0, delta=DELTA)
    r_measure, r_synth, _ = (np.random.default_rng(s) for s in np.random.SeedSequence([seed, 17]).spawn(3))
    m = method.measure(EncodedTable(schema=schema, codes=real), Ledger(budget, method.plan(schema, budget)), r_measure)
    cap: dict = {}

    def recorder(pool, weights, scaled, schema_, ones, total, rng, **kwargs):
        cap.update(pool=np.asarray(pool), weights=weights, scaled=scaled, ones=ones, total=total,
                   rng_state=rng.bit_generator.state)
        return None

    meth.update_pool = recorder
    real_copies = meth.copies

    def copies_recorder(weights, n, rng):  # the release's rounding of the pool to its rows
        cap["copies_rng_state"] = rng.bit_generator.state
        return real_copies(weights, n, rng)

    meth.copies = copies_recorder
    c0 = time.process_time()
    s = method.sampler(m, schema, None, r_synth)
    print("fit cpu", round(time.process_time() - c0, 1), "info", s.info, flush=True)
    cap.update(m=m, schema=schema, n=s.rows, info=s.info, kind=kind, rows=rows, seed=seed, table_seed=table_seed)
    with open(out, "wb") as f:
        pickle.dump(cap, f, protocol=5)


def _release_counts(cap: dict, m: int, n: int) -> np.ndarray:
    """The copies of ``m`` equal records to the release's ``n`` rows: with the release's own
    generator state where the capture recorded it (the release's exact rounding), else a fixed one."""
    from dpsynth.methods.sds import expand

    rng = np.random.default_rng(0)
    if "copies_rng_state" in cap:
        rng.bit_generator.state = cap["copies_rng_state"]
    return expand.copies(np.ones(m), n, rng).astype(float)


def _finish(cap: dict, codes: np.ndarray, obj, one_checks, rng, cards, lastpass_on: bool) -> dict:
    """What the release would hold if the descent stopped here: the exact 1-way fit, the last
    pass (as ``update_pool``), the misfit ratios and the gate from the release's exact copies.
    Works on copies of ``codes``, the objective and the generator (the descent goes on unchanged)."""
    import copy as _copy

    import benchmarks.sds_expand as be
    from dpsynth.methods.sds import descent, lastpass, refit

    codes, obj, rng = codes.copy(), _copy.deepcopy(obj), _copy.deepcopy(rng)
    c0 = time.process_time()
    descent._fit_one_way(obj, codes, one_checks, cards, rng)
    out: dict = {"one_way_cpu_s": round(time.process_time() - c0, 1)}
    if lastpass_on:
        tables = lastpass.gate_tables(cap["scaled"], cap["schema"])
        if tables is not None:
            c0 = time.process_time()
            codes, lp = lastpass.last_pass(codes, tables, rng)
            out["lastpass"] = {**lp, "cpu_s": round(time.process_time() - c0, 1)}
    checks = refit.table_checks(cap["scaled"], cap["schema"])
    after = refit.misfit_ratios(np.asfortranarray(codes), checks, np.ones(codes.shape[0]), cap["total"])
    c = _release_counts(cap, codes.shape[0], cap["n"])
    out.update(ratio_after=round(max(after), 3), off_after=sum(r > 1 for r in after),
               **be._gate(np.asfortranarray(codes), c, cap["m"], cap["schema"]))
    out["codes"] = codes
    return out


def run(path: str, sets: dict[str, str], tvd: bool, at: list[int], lastpass_on: bool = True) -> dict:
    """The descent on a capture (constants ``sets``), the release's state after rounds ``at``
    and at its end (:func:`_finish`), with the descent's per-round trace."""
    import benchmarks.sds_expand as be
    from dpsynth.methods.sds import descent, expand, refit

    for k, v in sets.items():
        cur = getattr(descent, k)
        setattr(descent, k, int(float(v)) if isinstance(cur, int) else type(cur)(float(v)))
    with open(path, "rb") as f:
        cap = pickle.load(f)
    pool, weights, scaled, ones, total, schema, m, n = (cap[k] for k in ("pool", "weights", "scaled", "ones", "total", "schema", "m", "n"))
    rng = np.random.default_rng()
    rng.bit_generator.state = cap["rng_state"]
    pool = np.asfortranarray(pool)
    checks = refit.table_checks(scaled, schema)
    before = refit.misfit_ratios(pool, checks, weights, total)
    records = np.repeat(np.asarray(pool), expand.copies(weights, pool.shape[0], rng), axis=0)
    snaps: dict = {}
    wall0 = time.time()

    def look(rnd, codes, obj, one_checks, g):
        r = obj.ratio[: obj.measured]
        print("round", rnd, "J", round(obj.value, 1), "above stop", int((r > descent.STOP_RATIO).sum()), "above 1",
              int((r > 1).sum()), "worst", round(float(r.max()), 3), "cpu", round(time.process_time() - c0, 1), flush=True)
        if rnd in at:
            snaps[rnd] = {k: v for k, v in _finish(cap, codes, obj, one_checks, g, schema.cardinalities, lastpass_on).items()
                          if k != "codes"}
            print("after round", rnd, json.dumps(snaps[rnd]), flush=True)

    c0 = time.process_time()
    out, info = descent.descend(records, checks, ones, total, schema.cardinalities, rng, after_round=look)
    cpu = time.process_time() - c0  # the snapshots' cost included: the trace's per-round CPU excludes it
    res: dict = {"table": cap["kind"], "table_seed": cap.get("table_seed"), "rows": cap["rows"], "seed": cap["seed"],
                 "settings": sets, "exact_copies": "copies_rng_state" in cap,
                 "constants": {k: getattr(descent, k) for k in ("ROUNDS", "POWER", "STOP_RATIO", "MIN_GAIN", "SWAP_SHARE", "ROUND_PROPOSALS")},
                 "descent": {k: v for k, v in info.items() if not k.startswith(("cpu_", "n_", "acc_"))},
                 "ratio_before": round(max(before), 3), "off_before": sum(r > 1 for r in before),
                 "descent_cpu_s_approx": round(cpu, 1), "after_rounds": snaps}
    # the end: the 1-way fit already ran inside descend; the last pass and the gate as the release
    tables = None
    if lastpass_on:
        from dpsynth.methods.sds import lastpass
        tables = lastpass.gate_tables(scaled, schema)
    if tables is not None:
        c1 = time.process_time()
        out, lp = lastpass.last_pass(out, tables, rng)
        res["lastpass"] = {**lp, "cpu_s": round(time.process_time() - c1, 1)}
    after = refit.misfit_ratios(np.asfortranarray(out), checks, np.ones(out.shape[0]), total)
    c = _release_counts(cap, out.shape[0], n)
    res.update(ratio_after=round(max(after), 3), off_after=sum(r > 1 for r in after),
               update_peak_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
               **be._gate(np.asfortranarray(out), c, m, schema))
    if tvd:
        _, real = be._table(cap["kind"], cap["rows"], cap["seed"], cap.get("table_seed"))
        cw = expand.copies(weights, n, np.random.default_rng(0)).astype(float)
        res["tvd_before"] = be._tvds(np.asfortranarray(real), pool, cw, schema.cardinalities)
        res["tvd_after"] = be._tvds(np.asfortranarray(real), np.asfortranarray(out), c, schema.cardinalities)
    res["wall_s"] = round(time.time() - wall0)
    res["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    res["loadavg"] = list(os.getloadavg())
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--table", default="int7", choices=["scale", "int6", "int7"])
    c.add_argument("--rows", type=int, default=1_000_000)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--table-seed", type=int, default=None,
                   help="int6/int7: draw the generator's structure with this seed (as sds_expand.py)")
    c.add_argument("--out", required=True)
    r = sub.add_parser("run")
    r.add_argument("path")
    r.add_argument("sets", nargs="*", help="descent constants, NAME=value")
    r.add_argument("--tvd", action="store_true")
    r.add_argument("--at", default="", help="rounds after which to report the release's state (1-way fit, last pass, gate), e.g. 8,16")
    r.add_argument("--no-lastpass", action="store_true", help="the gate from the descent's records alone")
    r.add_argument("--out", default="sds_descent", help="results/<out>.json")
    args = ap.parse_args()
    if args.cmd == "capture":
        capture(args.table, args.rows, args.seed, args.out, args.table_seed)
        return
    at = [int(x) for x in args.at.split(",") if x]
    res = run(args.path, dict(a.split("=", 1) for a in args.sets), args.tvd, at, not args.no_lastpass)
    print(json.dumps(res, default=float), flush=True)
    path = RESULTS / f"{args.out}.json"
    old = json.loads(path.read_text()).get("cells", []) if path.exists() else []
    write_json(args.out, {"epsilon": 1.0, "cells": old + [json.loads(json.dumps(res, default=float))]})


if __name__ == "__main__":
    main()
