"""Method ``one-step`` (defaults) beside ``pgm``, ``sds`` and the independent baseline.

Run: ``python -m benchmarks.one_step_releases [--datasets demo,adult,nist] [--seeds 1,2,3]
[--methods one-step,pgm,sds,marginals]`` (``DPSYNTH_SHARED_DATA`` when the shared data is
not beside the checkout). Epsilon 1, one measure + synthesize per method, dataset and seed.
Prints mean TVD by k (1, 2, 3), the k-marginal score (NIST SDNist on national2019,
1000 x (1 - mean 3-way TVD) elsewhere) and seconds; for one-step also the worst ratio of a
measured marginal's TVD to its gate threshold (below 1 passes). Writes
``benchmarks/results/one_step_releases.json`` (a run on some datasets updates their entries).
Beside the methods, each dataset's non-private ceilings (``ceilings``, benchmarks._common.ceilings):
``binned``, the real codes themselves (decoded for NIST's score), and ``resample``, n rows drawn
with replacement from the real codes (seed 0), the i.i.d. sampling floor. ``--ceilings-only``
adds them to the JSON without running a method.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np

from benchmarks._common import RESULTS, add_ceilings, ceilings, print_table, write_json

METHODS = ("one-step", "pgm", "sds", "marginals")


def gate_ratio(m: Any, schema: Any, synth: np.ndarray) -> float:
    """Largest TVD / threshold over the measured marginals (the gate's per-marginal rule)."""
    from dpsynth.gate.thresholds import _target, predicted_tvd, predicted_tvd_sd

    n, big_n = synth.shape[0], float(m.records.value) if m.records is not None else float(synth.shape[0])
    worst = 0.0
    for nm in m.measured:
        idx = [schema.index(a) for a in nm.attrs]
        flat = np.ravel_multi_index(tuple(synth[:, i].astype(np.int64) for i in idx), nm.counts.shape)
        tvd = 0.5 * np.abs(np.bincount(flat, minlength=nm.counts.size) / n - _target(nm.counts)).sum()
        e = predicted_tvd(nm.counts, n, big_n, nm.stddev)
        sd = predicted_tvd_sd(nm.counts, n, big_n, nm.stddev)
        worst = max(worst, float(tvd / max(2 * e, e + 6 * sd)))
    return worst


SCORES = ("tvd1_mean", "tvd2_mean", "tvd3_mean", "kmarginal")


def ceiling(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """The dataset's ceilings (binned, i.i.d. resample), scored as the methods are."""
    import benchmarks.sds_vs_pacsynth as peer

    codes = np.asarray(data["codes"], dtype=np.int64)
    return ceilings(codes, lambda real, other: {k: peer.evaluate(name, data, other)[k] for k in SCORES})


def ceiling_rows(c: dict[str, Any] | None) -> list[list[str]]:
    """The printed table's rows for a dataset's ceilings."""
    if not c:
        return []
    return [[f"ceiling {w}"] + [f"{c[w][k]:.3f}" for k in SCORES[:3]] + [f"{c[w]['kmarginal']:.1f}", "", ""]
            for w in ("binned", "resample")]


def run(name: str, data: dict[str, Any], methods: list[str], seeds: list[int]) -> dict[str, Any]:
    import benchmarks.sds_vs_pacsynth as peer
    from dpsynth.rows.encoding import EncodedTable
    from dpsynth.methods import get_method
    from dpsynth.privacy import Budget, Ledger

    enc = EncodedTable(schema=data["schema"], codes=data["codes"])
    budget = Budget(epsilon=1.0, delta=peer.release_delta(enc.n))
    out: dict[str, Any] = {"rows": enc.n, "columns": len(enc.schema.columns), "epsilon": 1.0, "runs": {}}
    for method_name in methods:
        runs = []
        for seed in seeds:
            method = get_method(method_name, {})
            t0 = time.perf_counter()
            m = method.measure(enc, Ledger(budget, method.plan(enc.schema, budget)), np.random.default_rng(seed))
            t1 = time.perf_counter()
            synth = method.synthesize(m, enc.schema, None, np.random.default_rng(1000 + seed))
            t2 = time.perf_counter()
            ev = peer.evaluate(name, data, synth.codes.astype(np.int64))
            ev.update(seed=seed, measure_s=t1 - t0, synthesize_s=t2 - t1)
            if method_name == "one-step":
                ev["gate_worst_ratio"] = gate_ratio(m, enc.schema, synth.codes)
            runs.append(ev)
            print(f"  {name} {method_name} seed {seed}: tvd2 {ev['tvd2_mean']:.3f} ({t2 - t0:.0f} s)", flush=True)
        keys = ("tvd1_mean", "tvd2_mean", "tvd3_mean", "kmarginal", "measure_s", "synthesize_s")
        mean = {k: float(np.mean([r[k] for r in runs])) for k in keys}
        sd = {k: float(np.std([r[k] for r in runs], ddof=1)) if len(runs) > 1 else 0.0 for k in keys}
        out["runs"][method_name] = {"seeds": runs, "mean": mean, "sd": sd}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="demo,adult,nist")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--ceilings-only", action="store_true", help="add the datasets' ceilings to the JSON only")
    args = ap.parse_args()
    from benchmarks.microaggregation import load

    if args.ceilings_only:
        for name in args.datasets.split(","):
            c = ceiling(name, load(name))
            add_ceilings("one_step_releases", {name: c})
            print(name), print_table(["", "tvd1", "tvd2", "tvd3", "k-marginal", "", ""], ceiling_rows(c))
        return

    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    path = RESULTS / "one_step_releases.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    results.pop("machine", None)
    for name in args.datasets.split(","):
        data = load(name)
        t0 = time.perf_counter()
        results[name] = run(name, data, methods, seeds)
        results[name]["loadavg_after"] = os.getloadavg()
        results[name]["seconds"] = time.perf_counter() - t0
        rows = []
        for meth, r in results[name]["runs"].items():
            mu, sd = r["mean"], r["sd"]
            gate = max((s.get("gate_worst_ratio", 0.0) for s in r["seeds"]), default=0.0)
            rows.append([meth] + [f"{mu[k]:.3f} ± {sd[k]:.3f}" for k in ("tvd1_mean", "tvd2_mean", "tvd3_mean")]
                        + [f"{mu['kmarginal']:.0f} ± {sd['kmarginal']:.0f}",
                           f"{mu['measure_s'] + mu['synthesize_s']:.0f}", f"{gate:.2f}" if meth == "one-step" else ""])
        results.setdefault("ceilings", {})[name] = ceiling(name, data)
        rows += ceiling_rows(results["ceilings"][name])
        print(f"\n{name} ({results[name]['rows']:,} x {results[name]['columns']}), epsilon 1, seeds {seeds}: "
              "mean ± sd over seeds")
        print_table(["method", "tvd1", "tvd2", "tvd3", "k-marginal", "seconds", "gate worst"], rows)
        write_json("one_step_releases", results)


if __name__ == "__main__":
    main()
