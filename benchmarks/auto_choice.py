"""Benchmark: does ``--method auto`` choose (nearly) the best configuration in every cell?

A cell is one table at one epsilon (delta 1e-6; one seed, or several on the small cells). In each cell it runs the
four configurations ``auto`` could stand for: ``pgm`` (``select=mst``), ``pgm``
(``select=aim degree=2``), ``sds`` and ``marginals``, measure + synthesize as a release
does, each stopped after ``--timeout`` seconds. Score: 1000 x (1 - mean 3-way TVD) on
the schema's codes (missing is a code of its own; up to 200 random triples per table,
fixed per table). ``auto`` draws a DP record count (1% of the budget) and then runs the
configuration :func:`dpsynth.methods.auto.choose` picks from the schema, epsilon, delta and
that count. Where the ``auto`` configuration itself was run (``--configs auto``), its own
score is reported (``auto_run``); elsewhere the score of the configuration it picks, with a
record count drawn as auto draws it (seeded per cell), stands in for it: that configuration
at the full budget, where auto runs it with 99% (a proxy, marked ``proxy`` in the table).

Seeds: without ``--seeds`` a configuration re-run in a cell runs as many seeds as it had, and
``auto`` (or a configuration new to the cell) as many as the cell's most-seeded configuration,
so that auto's mean is compared with means over as many seeds; each ``auto`` seed draws its own
DP record count, as a release does. The report gives the gap's standard error
(:func:`seed_gap`): the seeds of ``auto`` and of the best configuration are independent draws.

Tables are split in two halves: the TUNING half set the rule's constants
(``MAX_AIM_COLUMNS``, ``MAX_AIM_PAIR_CELLS``), the HELD-OUT half is reported as it came.
Tables: NIST national2019/tx2019/ma2019 (``schemas/nist.yaml``, demographic or all 24
columns), adult (``schemas/adult.yaml``), and random Bayesian networks
(``benchmarks.sds_matrix.make_table``: 5 to 60 columns, 1,000 to 1,000,000 rows, numeric
and missing cells). A few pure-epsilon cells (delta 0) compare the pure-epsilon methods
(``marginals`` with discrete Laplace noise, ``microaggregation-dp``) with ``auto``'s
choice at delta 1e-6 on the same table: what a pure policy gives up.

Beside each cell, the table's non-private ceilings (``ceilings`` in the JSON, per table,
benchmarks._common.ceilings, on the same triples): ``binned`` (the real codes themselves: 1000)
and ``resample``, n rows drawn with replacement from the real codes (seed 0), the i.i.d.
sampling floor that a method sampling n rows from even a perfect model pays.

Usage::

    nice python benchmarks/auto_choice.py --half tuning     # its cells into results/auto_choice.json ("raw")
    nice python benchmarks/auto_choice.py --half held-out
    nice python benchmarks/auto_choice.py --half tuning --only gen:1000,5,6,0,0 --epsilon 0.1 --configs auto
                                                            # one cell, auto on as many seeds as the cell's best
    nice python benchmarks/auto_choice.py --half held-out --delta 0 --configs marginals-laplace auto
    python benchmarks/auto_choice.py --report               # every cell: table + "cells" in the same file
    nice python benchmarks/auto_choice.py --ceilings-only   # adds every table's ceilings, runs no method
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import RESULTS, add_ceilings, ceiling_text, ceilings, print_table, write_json  # noqa: E402
from benchmarks.sds_matrix import SHARED_DATA, make_table, nist_tables  # noqa: E402
from dpsynth.methods.auto import WIDE_AIM  # noqa: E402

DELTA = 1e-6
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "pgm-mst": ("pgm", {"select": "mst"}),
    "pgm-aim2": ("pgm", {"select": "aim", "degree": 2}),
    "sds": ("sds", {}),
    "marginals": ("marginals", {}),
    "auto": ("auto", {}),  # the record count, then its choice: run only when asked (--configs auto)
    # AIM bounded for wide tables (issue 26 §1b): fewer budget units (rounds) and a smaller model
    "pgm-aim2-bounded": ("pgm", dict(WIDE_AIM)),
}
ON_REQUEST = {"auto", "pgm-aim2-bounded"}
PURE_CONFIGS = {"marginals-laplace": ("marginals", {}), "microaggregation-dp": ("microaggregation-dp", {}),
                "auto": ("auto", {})}  # auto under --delta 0: a Laplace count, then its pure-epsilon choice
TRIPLES = 200

#: (table, epsilons, pure-epsilon cells at these epsilons). gen:n,p,cmax,numeric,missing
HALVES: dict[str, list[tuple[str, tuple[float, ...], tuple[float, ...]]]] = {
    "tuning": [
        ("nist:national2019/all", (0.1, 1.0, 10.0), ()),
        ("nist:tx2019/demographic", (0.1, 10.0), ()),
        ("gen:1000,5,6,0,0", (0.1, 1.0), ()),
        ("gen:20000,30,12,0.2,0.2", (1.0, 10.0), ()),
        ("gen:100000,45,8,0.1,0.1", (1.0,), ()),
        ("gen:5000,60,4,0,0.2", (1.0, 10.0), ()),
        ("gen:200000,15,30,0.2,0.1", (1.0,), ()),
    ],
    "held-out": [
        ("nist:national2019/demographic", (1.0, 10.0), (1.0,)),
        ("nist:ma2019/all", (0.1, 1.0), ()),
        ("adult", (0.1, 1.0, 10.0), (1.0, 4.0)),
        ("gen:2000,8,10,0.2,0.3", (0.1, 1.0), (1.0,)),
        ("gen:100000,30,12,0.2,0.1", (1.0, 10.0), (1.0,)),
        ("gen:1000000,12,10,0.2,0.1", (1.0,), ()),
        ("gen:10000,55,6,0.1,0.2", (1.0,), ()),
    ],
}


class Timeout(Exception):
    """A configuration ran past --timeout."""


def load_table(spec: str, index: int) -> tuple[Any, np.ndarray]:
    """(schema, codes) of a table spec (see :data:`HALVES`)."""
    from dpsynth.rows.encoding import encode, read_table
    from dpsynth.schema import load_schema

    if spec.startswith("nist:"):
        f, cs = spec[5:].split("/")
        (t,) = nist_tables([f], [cs])
        return t.schema, t.codes
    if spec == "adult":
        schema = load_schema(ROOT / "schemas" / "adult.yaml")
        return schema, encode(read_table(SHARED_DATA / "adult" / "adult.csv", schema), schema).codes
    n, p, cmax, num, miss = spec[4:].split(",")
    return make_table(int(n), int(p), int(cmax), float(num), float(miss), seed=9100 + index, name=f"g{index}")


def triples(p: int, seed: int) -> list[tuple[int, int, int]]:
    """Every 3-subset of the columns, or :data:`TRIPLES` of them drawn at random (fixed seed)."""
    from itertools import combinations

    allt = list(combinations(range(p), 3))
    if len(allt) <= TRIPLES:
        return allt
    rng = np.random.default_rng(seed)
    return [allt[i] for i in sorted(rng.choice(len(allt), size=TRIPLES, replace=False))]


def score(schema: Any, real: np.ndarray, synth: np.ndarray, subsets: Sequence[tuple[int, ...]]) -> float:
    """1000 x (1 - mean TVD) over ``subsets`` (3-way marginals on codes)."""
    from dpsynth.evaluation.metrics import iter_tvds

    tvds = [t for _, t in iter_tvds(real, synth, schema.cardinalities, subsets)]
    return 1000.0 * (1.0 - float(np.mean(tvds)))


def _alarm(signum: int, frame: Any) -> None:
    raise Timeout()


def run_config(method: str, params: dict[str, Any], schema: Any, codes: np.ndarray, eps: float, delta: float,
               seed: int, timeout: int) -> tuple[np.ndarray | None, float, str, dict[str, Any] | None, float]:
    """(synthetic codes or None, seconds, status, auto's record count and choice or None, CPU
    seconds of the process) of measure + synthesize, as a release runs them."""
    from dpsynth.rows.encoding import EncodedTable
    from dpsynth.methods import get_method
    from dpsynth.privacy.budget import Budget, Ledger

    m = get_method(method, params)
    budget = Budget(epsilon=eps, delta=delta)
    ss = np.random.SeedSequence([seed, 26])
    r_measure, r_synth = (np.random.default_rng(s) for s in ss.spawn(2))
    t0, c0 = time.perf_counter(), time.process_time()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        meas = m.measure(EncodedTable(schema=schema, codes=codes), Ledger(budget, m.plan(schema, budget)), r_measure)
        synth = m.synthesize(meas, schema, None, r_synth).codes
        status, auto = "ok", meas.meta.get("auto")
    except Timeout:
        synth, status, auto = None, f"timeout {timeout} s", None
    except Exception as exc:  # noqa: BLE001 - a failing configuration is a result too
        synth, status, auto = None, f"error: {type(exc).__name__}: {str(exc)[:160]}", None
    finally:
        signal.alarm(0)
    return synth, time.perf_counter() - t0, status, auto, time.process_time() - c0


def _load() -> dict[str, Any]:
    f = RESULTS / "auto_choice.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def _save_raw(half: str, cells: list[dict[str, Any]], timeout: int) -> None:
    payload = _load()
    payload.pop("machine", None)
    payload.setdefault("raw", {})[half] = {"cells": cells, "timeout_s": timeout}
    write_json("auto_choice", payload)


def cell_seeds(cell: dict[str, Any], label: str) -> int:
    """How many seeds ``label`` runs in ``cell`` when ``--seeds`` is not given: as many as it had;
    ``auto``, or a configuration the cell has not run, as many as the cell's most-seeded
    configuration (so auto's mean is compared with means over as many seeds)."""
    conf = cell["configs"]
    if label in conf and label != "auto":
        return int(conf[label].get("seeds", 1))
    return max((int(v.get("seeds", 1)) for k, v in conf.items() if k != "auto"), default=1)


def seed_scores(entry: dict[str, Any] | None) -> list[float]:
    """A configuration's per-seed scores (an old one-seed entry: its score alone; none: [])."""
    if not entry or entry.get("score") is None:
        return []
    return [float(x) for x in entry.get("scores") or [entry["score"]]]


def seed_gap(best: Sequence[float], auto: Sequence[float]) -> tuple[float, float | None]:
    """(mean(best) - mean(auto), its standard error). The two seed sets are independent draws
    (auto's count takes the first draws of its generator, so seed i is no pair of the
    configuration's seed i): SE = sqrt(var_best / n_best + var_auto / n_auto), sample
    variances. None when either side has one seed (its spread is unknown)."""
    b, a = np.asarray(best, dtype=float), np.asarray(auto, dtype=float)
    if b.size == 0 or a.size == 0:
        raise ValueError("seed_gap needs at least one score on each side")
    gap = float(b.mean() - a.mean())
    if b.size < 2 or a.size < 2:
        return gap, None
    return gap, float(np.sqrt(b.var(ddof=1) / b.size + a.var(ddof=1) / a.size))


#: Above this many seeds, auto's runs are kept as their record counts and a tally of choices.
FULL_AUTO_RUNS = 20


def auto_runs_entry(autos: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """auto's per-seed records as the JSON keeps them: each whole (``auto_runs``) up to
    :data:`FULL_AUTO_RUNS` seeds, else each seed's record count and how often each choice was made."""
    if len(autos) <= 1:
        return {}
    if len(autos) <= FULL_AUTO_RUNS:
        return {"auto_runs": list(autos)}
    tally: dict[str, int] = {}
    for a in autos:
        c = a["choice"]
        key = " ".join([c["method"], *(f"{k}={v}" for k, v in sorted(c["params"].items()))])
        tally[key] = tally.get(key, 0) + 1
    return {"auto_record_counts": [a["record_count"] for a in autos], "auto_choices": tally}


def _previous(old: dict[str, Any] | None) -> dict[str, Any]:
    """What a re-run replaces, kept beside it: the old score, its seeds and its status."""
    if not old:
        return {}
    keep = {k: old[k] for k in ("score", "seeds", "status", "seconds") if k in old}
    return {"previous": keep}


def run_half(half: str, timeout: int, only: str | None = None, configs: Sequence[str] | None = None,
             epsilon: float | None = None, seeds: int | None = None, delta: float | None = None
             ) -> list[dict[str, Any]]:
    """Every cell of one half (or those ``only``/``configs``/``epsilon`` select); each result
    replaces its entry in results/auto_choice.json (the replaced score kept as ``previous``),
    the other cells and configurations stay. With more than one seed a configuration's score is
    the mean over seeds 0..seeds-1 (each seed's in ``scores``): one seed of a small table at
    epsilon 0.1 varies by tens of points. ``seeds`` None: :func:`cell_seeds`. ``delta``: only
    the cells with this delta (0: the pure-epsilon cells)."""
    cells: list[dict[str, Any]] = list(_load().get("raw", {}).get(half, {}).get("cells", []))
    where = {(c["table"], c["epsilon"], c["delta"]): c for c in cells}
    for index, (spec, epsilons, pure_eps) in enumerate(HALVES[half]):
        if only and only != spec:
            continue
        schema, codes = load_table(spec, index + (0 if half == "tuning" else 100))
        subs = triples(len(schema.columns), seed=index)
        runs = [(eps, DELTA, CONFIGS) for eps in epsilons] + [(eps, 0.0, PURE_CONFIGS) for eps in pure_eps]
        for eps, cell_delta, table in runs:
            if (epsilon is not None and eps != epsilon) or (delta is not None and cell_delta != delta):
                continue
            cell = where.get((spec, eps, cell_delta))
            if cell is None:
                cell = {"half": half, "table": spec, "rows": int(codes.shape[0]), "columns": len(schema.columns),
                        "cardinalities": list(schema.cardinalities), "epsilon": eps, "delta": cell_delta,
                        "triples": len(subs), "configs": {}}
                cells.append(cell)
                where[(spec, eps, cell_delta)] = cell
            for label, (method, params) in table.items():
                if (configs and label not in configs) or (not configs and label in ON_REQUEST):
                    continue
                n = seeds or cell_seeds(cell, label)
                runs = [run_config(method, params, schema, codes, eps, cell_delta, seed, timeout) for seed in range(n)]
                scores = [score(schema, codes, r[0], subs) if r[0] is not None else None for r in runs]
                sc = float(np.mean(scores)) if None not in scores else None
                secs = float(np.mean([r[1] for r in runs]))
                cpu = float(np.mean([r[4] for r in runs]))
                status = next((r[2] for r in runs if r[2] != "ok"), "ok")
                autos = [r[3] for r in runs if r[3]]
                load = open("/proc/loadavg").read().split()[0]
                cell["configs"][label] = {"score": sc, "seconds": round(secs, 2), "cpu_seconds": round(cpu, 2),
                                          "status": status,
                                          "timeout_s": timeout, "load": float(load),
                                          **({"auto": autos[0]} if autos else {}),
                                          **({"scores": scores, "seeds": n} if n > 1 else {}),
                                          **auto_runs_entry(autos),
                                          **_previous(cell["configs"].get(label))}
                print(f"{half} {spec} eps {eps:g} delta {cell_delta:g} {label}: "
                      f"{'%.1f' % sc if sc is not None else status} ({secs:.1f} s, {cpu:.1f} CPU s, {n} seed{'s' * (n > 1)}, "
                      f"load {load})", flush=True)
                _save_raw(half, cells, timeout)
    return cells


def table_ceilings(half: str, only: str | None = None) -> dict[str, Any]:
    """Ceilings (binned, i.i.d. resample) of every table of one half, scored as the cells are."""
    out: dict[str, Any] = {}
    for index, (spec, _, _) in enumerate(HALVES[half]):
        if only and only != spec:
            continue
        schema, codes = load_table(spec, index + (0 if half == "tuning" else 100))
        subs = triples(len(schema.columns), seed=index)
        out[spec] = ceilings(codes, lambda real, other: score(schema, real, other, subs))
        print(f"{half} {spec} ceilings: {ceiling_text(out[spec])}", flush=True)
    return out


def simulated_count(cell: dict[str, Any]) -> float:
    """A record count drawn as ``auto`` draws it (its share of the cell's budget; seeded per cell)."""
    from dpsynth.methods.auto_method import AutoMethod
    from dpsynth.privacy.budget import Budget
    from dpsynth.privacy.mechanisms import gaussian_counts, laplace_counts

    budget = Budget(epsilon=cell["epsilon"], delta=cell["delta"])
    charge = AutoMethod().plan(None, budget)[0]  # type: ignore[arg-type] - the count's charge needs no schema
    rng = np.random.default_rng([cell["rows"], int(cell["epsilon"] * 1000), 26])
    draw = laplace_counts if budget.pure else gaussian_counts
    return float(draw(np.array([cell["rows"]]), charge, rng).values[0])


def auto_label(cell: dict[str, Any]) -> tuple[str, str]:
    """The configuration label ``auto`` picks for a cell, and its reason: what its own run
    chose when it was run, else the choice from a simulated record count."""
    from dpsynth.methods.auto import choose_for

    run = (cell["configs"].get("auto") or {}).get("auto")
    if run:
        c = run["choice"]
        return _label(c["method"], c["params"], cell["delta"]), c["reason"]
    c = choose_for(cell["cardinalities"], cell["epsilon"], cell["delta"], simulated_count(cell))
    return _label(c.method, dict(c.params), cell["delta"]), c.reason


def _label(method: str, params: dict[str, Any], delta: float) -> str:
    """The configuration label of a method and its parameters."""
    if method == "marginals":
        return "marginals-laplace" if delta == 0 else "marginals"
    if method == "pgm" and params.get("select") == "aim":
        return "pgm-aim2-bounded" if "units" in params else "pgm-aim2"
    if method == "pgm":
        return "pgm-mst"
    return method


def report(halves: Sequence[str]) -> None:
    """Prints every cell (auto against the best configuration) and writes results/auto_choice.json."""
    payload = _load()
    raw = payload.get("raw", {})
    for half in halves:  # a half's own file, from a run of an earlier version of this script
        f = RESULTS / f"auto_choice-{half}.json"
        if f.is_file():
            raw[half] = json.loads(f.read_text())
    cells = [c for half in halves for c in raw.get(half, {}).get("cells", [])]
    ceils = payload.get("ceilings", {})
    rows, out = [], []
    by_table = {(c["table"], c["epsilon"]): c for c in cells if c["delta"] > 0}
    for c in cells:
        label, _ = auto_label(c)
        conf = c["configs"]
        scored = {k: v["score"] for k, v in conf.items() if v["score"] is not None and k not in ON_REQUEST}
        best = max(scored, key=scored.get) if scored else None
        ran = conf.get("auto") if (conf.get("auto") or {}).get("score") is not None else None
        own = ran or conf.get(label, {})
        a = own.get("score")
        entry = {**{k: c[k] for k in ("half", "table", "rows", "columns", "epsilon", "delta")},
                 "auto": label, "auto_run": ran is not None, "auto_score": a, "auto_seconds": own.get("seconds"),
                 "auto_seeds": len(seed_scores(own)), "auto_scores": seed_scores(own),
                 **({"auto_record_count": ran["auto"]["record_count"]} if ran else {}),
                 "best": best, "best_score": scored.get(best), "best_seeds": len(seed_scores(conf.get(best))),
                 "configs": {k: {f: v[f] for f in ("score", "seeds", "seconds", "cpu_seconds", "status") if f in v}
                             for k, v in conf.items()},
                 "ceiling": ceils.get(c["table"])}
        if c["delta"] > 0:
            gap = None if a is None or best is None else seed_gap(seed_scores(conf[best]), seed_scores(own))
            entry["gap_to_best"] = None if gap is None else round(gap[0], 1)
            entry["gap_se"] = None if gap is None or gap[1] is None else round(gap[1], 1)
            mst = scored.get("pgm-mst")
            entry["vs_pgm_mst"] = None if a is None or mst is None else round(a - mst, 1)
        else:  # pure cells: what delta 0 gives up against auto's choice at delta 1e-6
            ref = by_table.get((c["table"], c["epsilon"]))
            ref_score = (ref["configs"].get("auto") or ref["configs"][auto_label(ref)[0]])["score"] if ref else None
            entry["auto_at_delta_1e-6"] = ref_score
            entry["gives_up"] = None if ref_score is None or a is None else round(ref_score - a, 1)
        out.append(entry)
        shown = "  ".join(f"{k} {v['score']:.1f} ({v['seconds']:.0f}s)" if v["score"] is not None
                          else f"{k} {v['status'][:12]} ({v['seconds']:.0f}s)" for k, v in conf.items())
        se = f" ± {entry['gap_se']:.1f}" if entry.get("gap_se") is not None else ""
        mst_text = f"{entry['vs_pgm_mst']:+.1f}" if entry.get("vs_pgm_mst") is not None else "n/a"
        gap = (f"gap {entry['gap_to_best']:+.1f}{se}, vs mst {mst_text}" if c["delta"] > 0
               and entry.get("gap_to_best") is not None else
               f"gives up {entry['gives_up']}" if c["delta"] == 0 and entry.get("gives_up") is not None else "n/a")
        rows.append((c["half"], c["table"], f"{c['rows']}x{c['columns']}", f"{c['epsilon']:g}", f"{c['delta']:g}",
                     (f"{label} {a:.1f}" if a is not None else f"{label} -") + ("" if ran else " proxy")
                     + (f" ({entry['auto_seeds']}/{entry['best_seeds']} seeds)" if entry["auto_seeds"] > 1 else ""),
                     gap,
                     ceiling_text(ceils.get(c["table"])), shown))
    print_table(("half", "table", "shape", "eps", "delta", "auto", "gap", "ceiling binned/resample",
                 "configs: score (seconds)"), rows)
    write_json("auto_choice", {"metric": "1000 x (1 - mean 3-way TVD) on codes, mean over each configuration's "
                               "seeds; gap_to_best = best - auto, gap_se its standard error (seed_gap)",
                               "delta": DELTA, "cells": out, "raw": raw, "ceilings": ceils})


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one half (``--half``) or reports both (``--report``)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", choices=sorted(HALVES))
    ap.add_argument("--only", default=None, help="run only this table (its spec, e.g. adult)")
    ap.add_argument("--configs", nargs="*", default=None, help="run only these configurations")
    ap.add_argument("--epsilon", type=float, default=None, help="run only this epsilon")
    ap.add_argument("--delta", type=float, default=None, help="run only the cells with this delta (0: pure epsilon)")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=None,
                    help="mean score over this many seeds per configuration (default: as the cell had; "
                         "auto as many as the cell's most-seeded configuration)")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--ceilings-only", action="store_true", help="add the tables' ceilings to the JSON, run no method")
    args = ap.parse_args(argv)
    if args.ceilings_only or args.half:
        for half in [args.half] if args.half else sorted(HALVES):
            add_ceilings("auto_choice", table_ceilings(half, args.only))
    if args.ceilings_only:  # beside the reported cells as they are (no re-run, no re-scoring)
        payload = _load()
        for c in payload.get("cells", []):
            c["ceiling"] = payload["ceilings"].get(c["table"])
        write_json("auto_choice", {k: v for k, v in payload.items() if k != "machine"})
        print_table(("table", "ceiling binned/resample"),
                    [(t, ceiling_text(v)) for t, v in payload["ceilings"].items()])
        return 0
    if args.half:
        run_half(args.half, args.timeout, args.only, args.configs, args.epsilon, args.seeds, args.delta)
    if args.report or not args.half:
        report(("tuning", "held-out"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
