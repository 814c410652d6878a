"""Benchmark: what each step of ``marginals``' post-processing buys where the noise dominates.

``marginals`` measures one noisy 1-way histogram per column; everything after is
post-processing. On the same measurement (paired: one measurement per seed, every
variant synthesised from it with the same synthesis seed) it scores:

* ``old``: negatives clipped, each histogram normalised on its own, i.i.d. draws (the
  method before issue 26's change, kept here as the reference);
* ``clip+alloc``: clipped as ``old``, rows allocated by expected counts (floor or ceiling,
  shuffled: :func:`dpsynth.postprocess.histograms.allocated_draw`);
* ``proj+iid``: projected onto the non-negative tables with the inverse-variance record
  estimate (:func:`dpsynth.postprocess.histograms.project_to_total`), i.i.d. draws;
* ``new``: the method as it is (projection and allocation);
* ``thr1``, ``proj+thr1``: cells below one noise sd set to 0 (after clipping, or after the
  projection), then allocation: the thresholding candidate, not adopted;

beside ``sds`` (its own release, the same seeds as benchmarks/auto_choice.py) where delta > 0.
Score: auto_choice's, 1000 x (1 - mean 3-way TVD) on codes, the mean over ``--seeds``.
Cells: auto_choice's low-signal cells, TUNING half (where the choice was made) and
HELD-OUT half (reported as they came), pure-epsilon (delta 0) cells included.

Usage::

    nice python benchmarks/marginals_postprocess.py --quick          # one cell, one seed
    nice python benchmarks/marginals_postprocess.py --half tuning    # results/marginals_postprocess.json
    nice python benchmarks/marginals_postprocess.py --half held-out
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import RESULTS, print_table, write_json  # noqa: E402
from benchmarks.auto_choice import DELTA, HALVES, load_table, run_config, score, triples  # noqa: E402

VARIANTS = ("old", "clip+alloc", "proj+iid", "new", "thr1", "proj+thr1")
#: (half, table, epsilon, delta): auto_choice's low-signal cells and a few more on its tuning tables
CELLS: dict[str, list[tuple[str, float, float]]] = {
    "tuning": [("nist:tx2019/demographic", 0.1, DELTA), ("gen:1000,5,6,0,0", 0.1, DELTA),
               ("nist:national2019/all", 0.1, DELTA), ("gen:20000,30,12,0.2,0.2", 0.1, DELTA),
               ("gen:5000,60,4,0,0.2", 0.1, DELTA), ("nist:tx2019/demographic", 0.3, DELTA),
               ("gen:1000,5,6,0,0", 0.3, DELTA)],
    "held-out": [("nist:ma2019/all", 0.1, DELTA), ("gen:2000,8,10,0.2,0.3", 0.1, DELTA),
                 ("nist:national2019/demographic", 1.0, 0.0), ("adult", 1.0, 0.0), ("adult", 4.0, 0.0),
                 ("gen:2000,8,10,0.2,0.3", 1.0, 0.0), ("gen:100000,30,12,0.2,0.1", 1.0, 0.0)],
}


def variant_codes(variant: str, m: Any, schema: Any, rng: np.random.Generator) -> np.ndarray:
    """The synthetic codes of one post-processing variant of measurement ``m``."""
    from dpsynth.methods.marginals import estimate_rows
    from dpsynth.postprocess.histograms import allocated_draw, project_to_total

    n = estimate_rows(m)
    out = np.empty((n, len(schema.columns)), dtype=np.int64)
    for j, col in enumerate(schema.columns):
        nm = next(x for x in m.measured if x.attrs == (col.name,))
        v = np.asarray(nm.counts, dtype=np.float64)
        p = project_to_total(v, float(n)) if variant.startswith("proj") else np.clip(v, 0.0, None)
        if variant.endswith("thr1"):
            kept = np.where(p > nm.stddev, p, 0.0)
            p = kept if kept.sum() > 0 else p
        p = p / p.sum() if p.sum() > 0 else np.full(p.size, 1.0 / p.size)
        out[:, j] = rng.choice(p.size, size=n, p=p) if variant in ("old", "proj+iid") else allocated_draw(p, n, rng)
    return out


def run_cell(half: str, spec: str, eps: float, delta: float, seeds: int, with_sds: bool) -> dict[str, Any]:
    """Every variant (and sds) on one cell, ``seeds`` measurements."""
    from dpsynth.methods.auto import cell_signal
    from dpsynth.methods.marginals import MarginalsMethod
    from dpsynth.privacy.budget import Budget, Ledger
    from dpsynth.rows.encoding import EncodedTable

    index = [s for s, _, _ in HALVES[half]].index(spec)
    schema, codes = load_table(spec, index + (0 if half == "tuning" else 100))
    subs = triples(len(schema.columns), seed=index)
    method, budget = MarginalsMethod(), Budget(epsilon=eps, delta=delta)
    scores: dict[str, list[float]] = {v: [] for v in VARIANTS}
    if with_sds and delta > 0:
        scores["sds"] = []
    t0 = time.process_time()
    for seed in range(seeds):
        r_measure, r_synth = (np.random.default_rng(s) for s in np.random.SeedSequence([seed, 26]).spawn(2))
        m = method.measure(EncodedTable(schema=schema, codes=codes), Ledger(budget, method.plan(schema, budget)),
                           r_measure)
        key = [int(x) for x in r_synth.integers(0, 2**32, size=4)]
        for v in VARIANTS:
            rng = np.random.default_rng(key)
            synth = (method.synthesize(m, schema, None, rng).codes if v == "new"
                     else variant_codes(v, m, schema, rng))
            scores[v].append(score(schema, codes, synth, subs))
        if "sds" in scores:
            s, _, status, _ = run_config("sds", {}, schema, codes, eps, delta, seed, 300)
            scores["sds"].append(score(schema, codes, s, subs) if s is not None else float("nan"))
    return {"half": half, "table": spec, "rows": int(codes.shape[0]), "columns": len(schema.columns),
            "epsilon": eps, "delta": delta, "seeds": seeds,
            "signal": round(cell_signal(schema.cardinalities, eps, delta, codes.shape[0]), 2),
            "mean": {k: round(float(np.mean(v)), 2) for k, v in scores.items()},
            "scores": {k: [round(x, 2) for x in v] for k, v in scores.items()},
            "cpu_seconds": round(time.process_time() - t0, 1),
            "load": float(open("/proc/loadavg").read().split()[0])}


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one half (or ``--quick``), prints every cell, writes results/marginals_postprocess.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", choices=sorted(CELLS))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--no-sds", action="store_true", help="score the marginals variants only")
    ap.add_argument("--quick", action="store_true", help="one tuning cell, one seed; writes nothing")
    args = ap.parse_args(argv)
    if args.quick:
        cells = [run_cell("tuning", "gen:1000,5,6,0,0", 0.1, DELTA, 1, not args.no_sds)]
    else:
        halves = [args.half] if args.half else sorted(CELLS)
        cells = []
        for half in halves:
            for spec, eps, delta in CELLS[half]:
                cells.append(run_cell(half, spec, eps, delta, args.seeds, not args.no_sds))
                c = cells[-1]
                print(f"{half} {spec} eps {eps:g} delta {delta:g} signal {c['signal']}: "
                      + "  ".join(f"{k} {v:.1f}" for k, v in c["mean"].items()) + f" (load {c['load']})", flush=True)
    print_table(("half", "table", "eps", "delta", "signal", *VARIANTS, "sds", "new - old", "new - sds"),
                [(c["half"], c["table"], f"{c['epsilon']:g}", f"{c['delta']:g}", c["signal"],
                  *(f"{c['mean'][v]:.1f}" for v in VARIANTS), f"{c['mean']['sds']:.1f}" if "sds" in c["mean"] else "-",
                  f"{c['mean']['new'] - c['mean']['old']:+.1f}",
                  f"{c['mean']['new'] - c['mean']['sds']:+.1f}" if "sds" in c["mean"] else "-") for c in cells])
    if not args.quick:
        f = RESULTS / "marginals_postprocess.json"
        old = json.loads(f.read_text()).get("cells", []) if f.is_file() else []
        done = {(c["half"], c["table"], c["epsilon"], c["delta"]) for c in cells}
        kept = [c for c in old if (c["half"], c["table"], c["epsilon"], c["delta"]) not in done]
        write_json("marginals_postprocess", {"metric": "1000 x (1 - mean 3-way TVD) on codes, mean over seeds",
                                             "variants": list(VARIANTS), "cells": kept + cells})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
