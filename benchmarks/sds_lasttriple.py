"""Diagnosis: why the gate refuses one triple that sds's descent (descent.py) does not see.

A scratch benchmark of session 38 (task sds-lasttriple; tuning data only: the captured int7
5M pool of benchmarks/sds_descent.py). ``descend``: loads a capture, rounds the pool to equal
records as ``expand.update_pool`` does, runs the descent (optionally a variant, ``--variant``)
and saves the records. ``diagnose``: per measured table, the descent's ratio (misfit over
allowance, :meth:`.refit.TableCheck.misfit`) and the gate's ratio (TVD against the clipped
and renormalised DP marginal over its threshold, :mod:`dpsynth.gate.checks`) of the records
written as equal copies to the release's rows; the tables the two rank worst; and the worst
gate triple's cells. Results go to results/sds_lasttriple.json. No raw rows are read.

    python benchmarks/sds_lasttriple.py descend /tmp/sdsd/int7_5m.pkl /tmp/lt/base.npy
    python benchmarks/sds_lasttriple.py diagnose /tmp/sdsd/int7_5m.pkl /tmp/lt/base.npy
    python benchmarks/sds_lasttriple.py lastpass /tmp/sdsd/int7_5m.pkl /tmp/lt/base.npy MARGIN=0.95

``lastpass`` (session 39, the sixteenth round's tuning): the last pass on the descended records;
``rounding``: how much the copies' rounding moves the tables' gate ratios (the pass's margin).
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


def _load(path: str) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f)


def descend(path: str, out: str, variant: str) -> dict:
    from dpsynth.methods.sds import descent, expand, refit

    cap = _load(path)
    pool, weights, scaled, ones, total, schema = (cap[k] for k in ("pool", "weights", "scaled", "ones", "total", "schema"))
    rng = np.random.default_rng()
    rng.bit_generator.state = cap["rng_state"]
    pool = np.asfortranarray(pool)
    checks = refit.table_checks(scaled, schema)
    records = np.repeat(np.asarray(pool), expand.copies(weights, pool.shape[0], rng), axis=0)
    if variant == "gate":  # every measured table's gate ratio as one more table of J
        checks = checks + _gate_copies(checks, cap)
        descent.Objective = _GateObjective
    elif variant != "base":
        raise SystemExit(f"unknown variant {variant}")
    c0 = time.process_time()
    codes, info = descent.descend(records, checks, ones, total, schema.cardinalities, rng)
    cpu = time.process_time() - c0
    np.save(out, codes)
    with open(out + ".rng.pkl", "wb") as f:  # the update's generator after the descent: the last pass's
        pickle.dump(rng.bit_generator.state, f)
    return {"variant": variant, "descent": {k: v for k, v in info.items() if not k.startswith(("cpu_", "n_", "acc_"))},
            "update_cpu_s": round(cpu, 1), "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "loadavg": list(os.getloadavg())}


#: The gate copies' ratio is TVD / (threshold x GATE_AT): at the gate's limit a copy weighs as a
#: misfit table at 1 / GATE_AT of its allowance (the descent's own stop margin, STOP_RATIO).
GATE_AT = 0.7


def _gate_copies(checks, cap) -> list:
    """A copy of each measured table whose cells' terms are the gate's: 0.5 |p - q| over the
    table's gate threshold x :data:`GATE_AT` (q: the DP table clipped and normalised, p: the
    records' shares; thresholds for the release's rows, :func:`allowed_tvds`)."""
    import dataclasses

    from dpsynth.evaluation.predicted import allowed_tvds

    m, schema = cap["m"], cap["schema"]
    limit = {tuple(schema.index(a) for a in attrs): t for attrs, t in allowed_tvds(m, cap["n"]).items()}
    out = []
    for c in checks:
        q = np.clip(np.asarray(c.noisy, dtype=np.float64), 0.0, None)
        q = q / q.sum()
        out.append(_GateCheck(**{f.name: getattr(c, f.name) for f in dataclasses.fields(c)}, q=q,
                              limit=float(limit[c.cols]) * GATE_AT))
    return out


def _gate_check_class():
    from dataclasses import dataclass

    from dpsynth.methods.sds.refit import DISCREPANCY_Z, TableCheck

    @dataclass(frozen=True)
    class GateCheck(TableCheck):
        """A table seen by the gate (its terms: :class:`_GateObjective`)."""

        q: np.ndarray = None
        limit: float = 1.0

        def allowance(self, z: float = DISCREPANCY_Z) -> float:
            return self.limit

    return GateCheck


def _gate_objective_class():
    from dpsynth.methods.sds.descent import Objective

    class GateObjective(Objective):
        """The descent's objective where a :class:`_GateCheck`'s cells have the gate's terms."""

        def term(self, counts, idx):
            base = super().term(counts, idx)
            if not hasattr(self, "_gate"):
                self._gate = np.concatenate([np.full(c.noisy.size, isinstance(c, _GateCheck)) for c in self.checks])
                self._q = np.concatenate([c.q if isinstance(c, _GateCheck) else np.zeros(c.noisy.size) for c in self.checks])
            g = self._gate[idx]
            if not np.any(g):
                return base
            return np.where(g, 0.5 * np.abs(counts / self.n - self._q[idx]) * self.w[idx], base)

    return GateObjective


def _rank(values: np.ndarray) -> np.ndarray:
    r = np.empty(values.size, dtype=np.int64)
    r[np.argsort(-values, kind="stable")] = np.arange(1, values.size + 1)
    return r


def diagnose(path: str, recs: str, top: int = 10) -> dict:
    from benchmarks.sds_expand import _counts
    from dpsynth.evaluation.predicted import dp_row_estimate
    from dpsynth.gate.checks import _marginal_checks, measured_subsets
    from dpsynth.gate.scan import CodeCounts
    from dpsynth.measurement import marginal_key
    from dpsynth.methods.sds import expand, refit

    cap = _load(path)
    scaled, total, schema, m, n = (cap[k] for k in ("scaled", "total", "schema", "m", "n"))
    codes = np.asfortranarray(np.load(recs))
    checks = refit.table_checks(scaled, schema)
    ratio = np.array(refit.misfit_ratios(codes, checks, np.ones(codes.shape[0]), total))
    copies = expand.copies(np.ones(codes.shape[0]), n, np.random.default_rng(0)).astype(float)
    counts = {sub: _counts(codes, sub, schema.cardinalities, copies) for sub in measured_subsets(schema, m)}
    cc = CodeCounts(schema=schema, n=int(copies.sum()), counts=counts)
    records = dp_row_estimate(m).value
    marg = _marginal_checks(cc, m, records, {})
    gate = {e["marginal"]: e for e in marg.errors}
    names = [marginal_key(tuple(schema.names[j] for j in c.cols)) for c in checks]
    g = np.array([gate[k]["tvd"] / gate[k]["threshold"] for k in names])
    ks = np.array([len(c.cols) for c in checks])
    rg, rd = _rank(g), _rank(ratio)
    # per table: the suppressed share of the release and the gate's renormalisation
    supp_mass, kept = np.zeros(len(checks)), np.zeros(len(checks))
    by_attrs = {tuple(nm.attrs): nm for nm in m.measured}
    for i, (c, key) in enumerate(zip(checks, names)):
        nm = by_attrs[tuple(schema.names[j] for j in c.cols)]
        t = cc.table(nm.attrs).ravel() / cc.n
        noisy = np.asarray(nm.counts, dtype=np.float64).ravel()
        supp = noisy <= (nm.threshold or 0.0)
        supp_mass[i] = t[supp].sum()
        kept[i] = np.clip(noisy, 0, None).sum() / records
    rows = lambda idx: [{"table": names[i], "k": int(ks[i]), "gate": round(float(g[i]), 4), "gate_rank": int(rg[i]),
                         "descent": round(float(ratio[i]), 3), "descent_rank": int(rd[i]),
                         "tvd": round(gate[names[i]]["tvd"], 5), "threshold": round(gate[names[i]]["threshold"], 5),
                         "cells": int(checks[i].noisy.size), "suppressed_cells": int(checks[i].suppressed.sum()),
                         "release_in_suppressed": round(float(supp_mass[i]), 5),
                         "clipped_noisy_total_over_N": round(float(kept[i]), 5)} for i in idx]
    floor = np.array([abs(gate[k]["threshold"] - 2.0 * gate[k]["predicted"]) < 1e-12 for k in names])
    every = [[names[i], int(ks[i]), int(checks[i].noisy.size), round(float(g[i]), 4), round(float(ratio[i]), 4),
              bool(floor[i])] for i in range(len(checks))]
    worst_gate = np.argsort(-g, kind="stable")[:top]
    worst_desc = np.argsort(-ratio, kind="stable")[:top]
    res = {"records": int(codes.shape[0]), "release_rows": int(cc.n), "N": records,
           "tables": len(checks), "gate_over": int((g > 1).sum()), "descent_over_1": int((ratio > 1).sum()),
           "descent_over_07": int((ratio > 0.7).sum()),
           "spearman": float(np.corrcoef(rg, rd)[0, 1]),
           "threshold_is_2E": int(floor.sum()),
           "all": every, "top_gate": rows(worst_gate), "top_descent": rows(worst_desc),
           "worst": _cells(checks[worst_gate[0]], by_attrs[tuple(schema.names[j] for j in checks[worst_gate[0]].cols)],
                           cc, codes, total, records, gate[names[worst_gate[0]]], schema)}
    return res


def _cells(c, nm, cc, codes, total, records, gate, schema) -> dict:
    """The worst gate table's cells: what the gate and the misfit each charge."""
    t = cc.table(nm.attrs).ravel().astype(np.float64)
    n = t.sum()
    noisy = np.asarray(nm.counts, dtype=np.float64).ravel()
    tau = float(nm.threshold or 0.0)
    supp = noisy <= tau
    q = np.clip(noisy, 0, None) / np.clip(noisy, 0, None).sum()
    p = t / n
    gate_cell = 0.5 * np.abs(p - q)
    c = c.on(np.asfortranarray(codes))
    est, var = c.estimate(np.ones(codes.shape[0]), total)
    scale = c.stddev**2 + var
    gap = np.where(c.suppressed, np.clip(est - c.threshold, 0.0, None), c.noisy - est)
    mis_cell = gap**2 / scale / c.allowance()
    order = np.argsort(-gate_cell, kind="stable")[:15]
    shape = c.shape
    lst = [{"cell": [int(x) for x in np.unravel_index(i, shape)], "suppressed": bool(supp[i]),
            "release": int(t[i]), "noisy": round(float(noisy[i]), 1), "q_times_n": round(float(q[i] * n), 1),
            "noisy_over_N_times_n": round(float(noisy[i] / records * n), 1),
            "gate_part": round(float(gate_cell[i] / gate["threshold"]), 4),
            "misfit_part": round(float(mis_cell[i]), 4)} for i in order]
    # what the TVD would be against noisy / N (no renormalisation after clipping and suppression)
    r = np.where(supp, 0.0, noisy) / records
    return {"table": "|".join(nm.attrs), "shape": list(shape), "threshold_count": tau, "stddev": nm.stddev,
            "gate_threshold": gate["threshold"], "tvd": gate["tvd"], "predicted": gate["predicted"],
            "predicted_sd": gate["predicted_sd"],
            "tvd_reported_cells": float(gate_cell[~supp].sum()), "tvd_suppressed_cells": float(gate_cell[supp].sum()),
            "release_share_in_suppressed": float(p[supp].sum()), "suppressed_cells": int(supp.sum()),
            "suppressed_cells_with_records": int((supp & (t > 0)).sum()),
            "clipped_noisy_sum_over_N": float(np.clip(noisy, 0, None).sum() / records),
            "reported_noisy_sum_over_N": float(noisy[~supp].sum() / records),
            "release_reported_sum_over_n": float(p[~supp].sum()),
            "tvd_vs_noisy_over_N": float(0.5 * np.abs(p - r).sum()),
            "reported_over_q": float(np.clip(p - q, 0, None)[~supp].sum()),
            "reported_under_q": float(np.clip(q - p, 0, None)[~supp].sum()),
            "reported_cells_under": int(((p < q) & ~supp).sum()),
            "reported_cells_beyond_2sd_under": int(((q - p) * n > 2 * nm.stddev * n / records)[~supp].sum()),
            "reported_cells_beyond_2sd_over": int(((p - q) * n > 2 * nm.stddev * n / records)[~supp].sum()),
            "misfit_ratio": float(mis_cell.sum()), "misfit_reported": float(mis_cell[~supp].sum()),
            "misfit_suppressed": float(mis_cell[supp].sum()), "allowance": c.allowance(),
            "cells": lst}


def lastpass(path: str, recs: str, sets: dict[str, str], out: str | None) -> dict:
    """The last pass (dpsynth/methods/sds/lastpass.py) on descended records, from the update's
    generator as the descent left it (``descend`` saves it beside the records); module constants
    as ``NAME=value``. The gate from the records written as equal copies to the release's rows
    (copies rounded with a fixed generator, as ``diagnose``), before and after."""
    import dataclasses

    from benchmarks.sds_expand import _gate
    from dpsynth.methods.sds import expand, lastpass as lp

    for k, v in sets.items():
        cur = getattr(lp, k)
        setattr(lp, k, int(float(v)) if isinstance(cur, int) else type(cur)(float(v)))
    cap = _load(path)
    scaled, schema, m, n = (cap[k] for k in ("scaled", "schema", "m", "n"))
    if "pool_share" not in scaled.meta:  # a capture from before the pass: the share from the noise scales
        orig = {nm.attrs: nm.stddev for nm in m.measured}
        nm = scaled.measured[0]
        scaled = dataclasses.replace(scaled, meta={**scaled.meta, "pool_share": nm.stddev / orig[nm.attrs]})
    codes = np.load(recs)
    rng = np.random.default_rng()
    with open(recs + ".rng.pkl", "rb") as f:
        rng.bit_generator.state = pickle.load(f)
    c = expand.copies(np.ones(codes.shape[0]), n, np.random.default_rng(0)).astype(float)
    before = _gate(np.asfortranarray(codes), c, m, schema)
    c0 = time.process_time()
    tables = lp.gate_tables(scaled, schema)
    new, info = lp.last_pass(codes.copy(), tables, rng)
    cpu = time.process_time() - c0
    if out:
        np.save(out, new)
    after = _gate(np.asfortranarray(new), c, m, schema)
    return {"table": cap["kind"], "rows": cap["rows"], "seed": cap["seed"], "settings": sets,
            "constants": {k: getattr(lp, k) for k in ("MARGIN", "BATCH", "SEEN", "PARTNERS", "MAX_BATCHES", "STALL")},
            "pass": info, "gate_before": before, "gate_after": after, "pass_cpu_s": round(cpu, 1),
            "moved_records": int((new != codes).any(axis=1).sum()),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def rounding(path: str, recs: str, draws: int = 12, least: float = 0.6) -> dict:
    """How much the copies' rounding (``expand.copies``, drawn after the update: the last pass
    cannot see it) moves each table's gate ratio from the pass's view (records written equally
    often), over ``draws`` roundings, for the tables at ``least`` of their threshold or more."""
    import dataclasses

    from dpsynth.methods.sds import expand, lastpass as lp

    cap = _load(path)
    scaled, schema, m, n = (cap[k] for k in ("scaled", "schema", "m", "n"))
    if "pool_share" not in scaled.meta:
        orig = {nm.attrs: nm.stddev for nm in m.measured}
        nm = scaled.measured[0]
        scaled = dataclasses.replace(scaled, meta={**scaled.meta, "pool_share": nm.stddev / orig[nm.attrs]})
    codes = np.asfortranarray(np.load(recs))
    tabs = lp.gate_tables(scaled, schema)
    view = lp.gate_ratios(codes, tabs)
    top = np.flatnonzero(view >= least)
    cells = {i: np.ravel_multi_index(tuple(codes[:, j].astype(np.int64) for j in tabs[i].cols), tabs[i].shape) for i in top}
    rises, worst = [], []
    for s in range(draws):
        c = expand.copies(np.ones(codes.shape[0]), n, np.random.default_rng(100 + s)).astype(float)
        g = np.array([0.5 * float(np.abs(np.bincount(cells[i], weights=c, minlength=tabs[i].q.size) / c.sum()
                                         - tabs[i].q).sum()) / tabs[i].limit for i in top])
        rises.append(g - view[top])
        worst.append(round(float(g.max()), 4))
    r = np.array(rises)
    return {"table": cap["kind"], "rows": cap["rows"], "seed": cap["seed"], "copies_per_record": round(n / codes.shape[0], 3),
            "tables": int(top.size), "view_worst": round(float(view.max()), 4), "rise_max": round(float(r.max()), 4),
            "rise_p99": round(float(np.quantile(r, 0.99)), 4), "rise_mean": round(float(r.mean()), 4),
            "rise_sd": round(float(r.std()), 4), "worst_after_rounding": worst}


_GateCheck = _gate_check_class()
_GateObjective = _gate_objective_class()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("descend")
    d.add_argument("path")
    d.add_argument("out")
    d.add_argument("--variant", default="base")
    g = sub.add_parser("diagnose")
    g.add_argument("path")
    g.add_argument("records")
    g.add_argument("--label", default="")
    lp = sub.add_parser("lastpass")
    lp.add_argument("path")
    lp.add_argument("records")
    lp.add_argument("sets", nargs="*", help="lastpass constants, NAME=value")
    lp.add_argument("--out", default=None)
    ro = sub.add_parser("rounding")
    ro.add_argument("path")
    ro.add_argument("records")
    args = ap.parse_args()
    if args.cmd == "rounding":
        res = rounding(args.path, args.records)
        res["loadavg"] = list(os.getloadavg())
    elif args.cmd == "descend":
        res = descend(args.path, args.out, args.variant)
    elif args.cmd == "lastpass":
        res = lastpass(args.path, args.records, dict(a.split("=", 1) for a in args.sets), args.out)
        res["loadavg"] = list(os.getloadavg())
    else:
        res = diagnose(args.path, args.records)
        res["label"] = args.label
        res["loadavg"] = list(os.getloadavg())
    print(json.dumps(res, indent=1), flush=True)
    path = RESULTS / "sds_lasttriple.json"
    old = json.loads(path.read_text()).get("cells", []) if path.exists() else []
    write_json("sds_lasttriple", {"cells": old + [{"cmd": args.cmd, **res}]})


if __name__ == "__main__":
    main()
