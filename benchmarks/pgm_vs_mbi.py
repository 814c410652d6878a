"""Benchmark: dpsynth ``pgm`` (select=mst, select=aim) against MST and AIM on mbi 2.0.

Same binned data, same (epsilon, delta = 1e-9) and so the same zCDP rho, one run, each
method in its own subprocess (peak RSS = that process's VmHWM; wall = its
select-measure-fit-sample time, excluding interpreter and import start-up):

* ``nist-demo``: national2019.csv binned by schemas/nist.yaml, the 10 SDNist demographic columns;
* ``nist-all``: the same, all 24 columns;
* ``nistfine-demo``, ``nistfine-all``: the same columns binned by schemas/nist-fine.yaml (finer public bins);
* ``nist-all-tx2019``, ``nistfine-demo-ma2019``, ...: the same on the tx2019 or ma2019 excerpt;
* ``corr30k``: generated (random Bayesian network, 30,000 x 15, seed 2024; as sds_vs_pacsynth);
* ``adult``: /work/shared/data/adult (integer-coded as in the MST/AIM papers);
* ``rare-a``, ``rare-b``, ``rare-c``: generated tables with empty and rare bins (8 columns, a
  latent-class model whose per-class value distributions are heavy-tailed Dirichlet draws,
  a 39-bin "year" with 19 bins that never occur, like the real table of issue 27), 20,000,
  50,000 and 100,000 rows, seeds 11, 12, 13 (:func:`rare_table`).

Configurations of pgm (``OURS``): the defaults (``pgm-mst``, ``pgm-aim2``: compression of rare
values on, rows allocated by randomised rounding), ``-nc`` without compression, ``-iid`` with
rows drawn independently.

mbi runs in its own environment (``--mbi-python``, default /work/venvs/mbi/bin/python;
mbi is never a dpsynth dependency) through benchmarks/mbi_peer.py, which documents
where that MST/AIM differs from the papers. Scores (dpsynth.evaluation.metrics, against the real
codes): TVD mean for k = 1, 2, 3 and a k-marginal score: the NIST SDNist k-marginal
on the decoded synthetic values for the NIST tables (PUMA x pairs for all 24, pairs for
demographic), 1000 x (1 - mean 3-way TVD) elsewhere. ``ceilings`` (per table,
benchmarks._common.ceilings): ``binned``, the score of the real table itself after
encode/decode with its schema (the binning's own loss; 1000 on codes), and ``resample``, the
score of n rows drawn with replacement from the real codes (seed 0): the i.i.d. sampling floor.
For NIST both on SDNist's scale, and under ``codes`` on the code-space scale.

Results accumulate in benchmarks/results/pgm_vs_mbi.json (a cell already there is not
re-run unless --force), so a long grid can be run in pieces::

    python benchmarks/pgm_vs_mbi.py                      # quick grid (what fits a session)
    python benchmarks/pgm_vs_mbi.py --grid full          # every data x epsilon x 3 seeds x method
    python benchmarks/pgm_vs_mbi.py --data nist-all --eps 1 --methods pgm-mst,mbi-mst --seeds 1
    python benchmarks/pgm_vs_mbi.py --ceilings-only      # (re)computes the ceilings of every table in the JSON
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import (RESULTS, SHARED_DATA, add_ceilings, ceiling_text,  # noqa: E402
                                ceilings as table_ceilings, code_score, print_table, write_json)

DELTA = 1e-9
# shared/data sits next to the project checkout; a worktree may sit one level deeper.
DATA_DIR = next((p for p in (SHARED_DATA, ROOT.parents[1] / "shared" / "data") if p.is_dir()), SHARED_DATA)
OUT_NAME = "pgm_vs_mbi"
WORK = Path(tempfile.gettempdir()) / "dpsynth_pgm_bench"
DATASETS = ("nist-demo", "nist-all", "nistfine-demo", "nistfine-all", "corr30k", "adult", "rare-a", "rare-b", "rare-c")
METHODS = ("pgm-mst", "pgm-aim", "pgm-aim2", "pgm-aim2-u4d", "pgm-aim2-i300", "pgm-mst-nt0", "pgm-aim-nt0",
           "pgm-aim2-nt0", "pgm-mst-f64", "pgm-aim-f64", "pgm-aim2-f64", "pgm-mst-nc", "pgm-mst-iid",
           "pgm-mst-nc-iid", "pgm-aim-nc", "pgm-aim2-nc", "pgm-aim2-iid", "mbi-mst", "mbi-aim")
#: dpsynth pgm parameters of each of our benchmark methods (pgm-aim2: AIM on 1- and 2-way candidates;
#: pgm-aim2-u4d: the same with 4 budget units per column instead of AIM's 16, i.e. larger rounds;
#: pgm-aim2-i300: the same with 300 estimator steps for the released model instead of 1000;
#: *-nt0: without the estimator's noise_tol stop, i.e. every fit runs its full iteration cap;
#: *-f64: every fit in float64, pgm's default before precision="single").
OURS = {"pgm-mst": {"select": "mst"}, "pgm-aim": {"select": "aim"}, "pgm-aim2": {"select": "aim", "degree": 2},
        "pgm-aim2-u4d": {"select": "aim", "degree": 2, "units_per_column": 4},
        "pgm-aim2-i300": {"select": "aim", "degree": 2, "iters": 300},
        "pgm-mst-nt0": {"select": "mst", "noise_tol": 0}, "pgm-aim-nt0": {"select": "aim", "noise_tol": 0},
        "pgm-aim2-nt0": {"select": "aim", "degree": 2, "noise_tol": 0},
        "pgm-mst-f64": {"select": "mst", "precision": "double"}, "pgm-aim-f64": {"select": "aim", "precision": "double"},
        "pgm-aim2-f64": {"select": "aim", "degree": 2, "precision": "double"},
        "pgm-mst-nc": {"select": "mst", "compress": False}, "pgm-mst-iid": {"select": "mst", "sampling": "iid"},
        "pgm-mst-nc-iid": {"select": "mst", "compress": False, "sampling": "iid"},
        "pgm-aim-nc": {"select": "aim", "compress": False},
        "pgm-aim2-nc": {"select": "aim", "degree": 2, "compress": False},
        "pgm-aim2-iid": {"select": "aim", "degree": 2, "sampling": "iid"}}
RARE = {"rare-a": (20_000, 11), "rare-b": (50_000, 12), "rare-c": (100_000, 13)}
QUICK = [  # (data, epsilon, seeds, methods): what fits one session on 2 shared cores
    ("nist-demo", 1.0, 1, ("pgm-mst", "pgm-aim", "mbi-mst", "mbi-aim")),
    ("nist-all", 1.0, 1, ("pgm-mst", "pgm-aim", "mbi-mst")),
] + [(d, e, 3, ("pgm-mst",)) for d in ("nist-demo", "nist-all") for e in (0.5, 1.0, 4.0, 10.0)]


def load(name: str) -> dict[str, Any]:
    from dpsynth.evaluation import metrics
    from dpsynth.rows.encoding import encode, read_table
    from dpsynth.schema import Schema, load_schema, schema_from_dict

    if name.startswith("nist"):
        # "<schema>-<columns>" on national2019, or "<schema>-<columns>-<file>" (tx2019, ma2019).
        parts = name.split("-")
        csv = DATA_DIR / "nist" / f"{parts[2] if len(parts) > 2 else 'national2019'}.csv"
        schema = load_schema(ROOT / "schemas" / ("nist-fine.yaml" if name.startswith("nistfine") else "nist.yaml"))
        codes = encode(read_table(csv, schema), schema).codes
        raw = pd.read_csv(csv, dtype=str, keep_default_na=False)
        if parts[1] == "demo":
            keep = list(metrics.NIST_DEMOGRAPHIC_FEATURES)
            idx = [schema.index(c) for c in keep]
            schema = Schema(name="nist-demographic", columns=tuple(schema.columns[i] for i in idx))
            codes, raw = codes[:, idx], raw[keep]
        return {"schema": schema, "codes": np.asarray(codes, dtype=np.int64), "raw": raw}
    if name == "corr30k":
        from benchmarks.sds_vs_pacsynth import correlated_table

        codes, cards = correlated_table()
        cols = [{"name": f"x{j}", "type": "categorical", "values": [str(v) for v in range(c)]} for j, c in enumerate(cards)]
        return {"schema": schema_from_dict({"name": "corr30k", "columns": cols}), "codes": codes.astype(np.int64)}
    if name == "adult":
        folder = DATA_DIR / "adult"
        sizes = json.loads((folder / "adult-domain.json").read_text())
        df = pd.read_csv(folder / "adult.csv")
        cols = [{"name": c, "type": "categorical", "values": [str(v) for v in range(int(k))]} for c, k in sizes.items()]
        return {"schema": schema_from_dict({"name": "adult", "columns": cols}),
                "codes": df[list(sizes)].to_numpy(dtype=np.int64)}
    if name in RARE:
        codes, cards = rare_table(*RARE[name])
        cols = [{"name": f"r{j}", "type": "categorical", "values": [str(v) for v in range(c)]} for j, c in enumerate(cards)]
        return {"schema": schema_from_dict({"name": name, "columns": cols}), "codes": codes}
    raise SystemExit(f"unknown data set {name!r}; known: {DATASETS} (NIST ones also with -tx2019, -ma2019)")


def rare_table(n: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """A table with empty and rare bins: 6 latent classes; per class, each column's values
    drawn from a Dirichlet(0.5) over its non-empty bins, of which about 40% are rare bins
    holding together 1% of the class's mass.
    Columns (bins, of which empty): 39 (19, the "year" of issue 27), 16 (6), 8 (0), 24 (4),
    2 (0), 12 (3), 50 (30), 5 (0)."""
    rng = np.random.default_rng(seed)
    spec = [(39, 19), (16, 6), (8, 0), (24, 4), (2, 0), (12, 3), (50, 30), (5, 0)]
    classes = 6
    z = rng.choice(classes, size=n, p=rng.dirichlet(np.full(classes, 2.0)))
    cols = []
    for size, empty in spec:
        live = np.sort(rng.choice(size, size - empty, replace=False))
        rare = rng.random(live.size) < 0.4  # rare bins: together 1% of each class's mass
        rare[0] = False
        probs = rng.dirichlet(np.full(live.size, 0.5), size=classes)
        probs[:, rare] *= 0.01 / probs[:, rare].sum(axis=1, keepdims=True).clip(1e-12) if rare.any() else 1.0
        probs[:, ~rare] *= (0.99 if rare.any() else 1.0) / probs[:, ~rare].sum(axis=1, keepdims=True)
        u = rng.random(n)
        pick = (np.cumsum(probs, axis=1)[z] < u[:, None]).sum(axis=1)
        cols.append(live[np.minimum(pick, live.size - 1)])
    return np.column_stack(cols).astype(np.int64), [s for s, _ in spec]


# --- children (one per run) ---------------------------------------------------------------


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1]) / 1024.0
    return float("nan")


def child_ours(params: str, src: Path, dst: Path) -> None:
    from dpsynth.rows.encoding import EncodedTable
    from dpsynth.methods import get_method
    from dpsynth.privacy.budget import Budget, Ledger

    z = np.load(src, allow_pickle=False)
    data = load(str(z["data"]))
    schema = data["schema"]
    budget = Budget(epsilon=float(z["epsilon"]), delta=DELTA)
    rng = np.random.default_rng(int(z["seed"]))
    t0 = time.perf_counter()
    chosen = json.loads(params)
    if "units_per_column" in chosen:
        chosen["units"] = chosen.pop("units_per_column") * len(schema.columns)
    method = get_method("pgm", chosen)
    ledger = Ledger(budget, method.plan(schema, budget))
    m = method.measure(EncodedTable(schema=schema, codes=data["codes"].astype(np.uint16)), ledger, rng)
    t1 = time.perf_counter()
    synth = method.synthesize(m, schema, None, rng)
    t2 = time.perf_counter()
    assert {c.stage for c in ledger.spent} == {c.stage for c in ledger.planned}
    np.save(dst, np.asarray(synth.codes, dtype=np.int64))
    print(json.dumps({"wall_s": t2 - t0, "measure_s": t1 - t0, "synth_s": t2 - t1, "peak_mb": _peak_mb(),
                      "rows": int(synth.codes.shape[0]), "rho_spent": ledger.rho_spent,
                      "selected": len(m.meta.get("selected", []))}))


def run_cell(data: dict[str, Any], name: str, method: str, eps: float, seed: int, args) -> dict[str, Any]:
    from dpsynth.privacy.budget import Budget

    WORK.mkdir(parents=True, exist_ok=True)
    src, dst = WORK / f"{name}-{method}-{eps}-{seed}.npz", WORK / f"{name}-{method}-{eps}-{seed}.npy"
    schema = data["schema"]
    np.savez(src, codes=data["codes"], names=np.array(schema.names), sizes=np.array(schema.cardinalities),
             rho=Budget(epsilon=eps, delta=DELTA).rho, seed=seed, data=name, epsilon=eps)
    if method.startswith("pgm"):
        cmd = [sys.executable, __file__, "--child", json.dumps(OURS[method]), str(src), str(dst)]
    else:
        cmd = [args.mbi_python, str(ROOT / "benchmarks" / "mbi_peer.py"), method.split("-")[1], str(src), str(dst)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.time_limit)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout after {args.time_limit} s"}
    if proc.returncode != 0:
        return {"status": "failed", "error": proc.stderr.strip().splitlines()[-1:] }
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["loadavg"] = list(os.getloadavg())
    res.update(evaluate(name, data, np.load(dst)))
    res["status"] = "ok"
    return res


# --- evaluation ------------------------------------------------------------------------------


def evaluate(name: str, data: dict[str, Any], synth: np.ndarray) -> dict[str, Any]:
    from benchmarks.sds_vs_pacsynth import eval_domain, nist_score
    from dpsynth.evaluation import metrics

    cards, _ = eval_domain(data["schema"])
    tv = metrics.tvd_by_k(data["codes"], synth, cards, ks=(1, 2, 3))
    out = {f"tvd{k}": tv[k]["mean"] for k in (1, 2, 3)}
    if name.startswith("nist"):
        out["kmarginal"] = nist_score(data, synth)
        out["kmarginal_codes"] = code_space_score(data, synth)
    else:
        out["kmarginal"] = 1000.0 * (1.0 - tv[3]["mean"])
    return out


def code_space_score(data: dict[str, Any], synth: np.ndarray) -> float:
    """SDNist's marginals (PUMA x every pair, or every pair without PUMA) on the schema's codes
    instead of SDNist's bins of decoded values: the scale PEERS.md's earlier MST figure (826) used."""
    from itertools import combinations

    from benchmarks.sds_vs_pacsynth import eval_domain
    from dpsynth.rows.counting import iter_marginals_many

    names = list(data["schema"].names)
    cards, _ = eval_domain(data["schema"])
    rest = [j for j, n in enumerate(names) if n != "PUMA"]
    group = (names.index("PUMA"),) if "PUMA" in names else ()
    subsets = [tuple(sorted(group + pr)) for pr in combinations(rest, 2)]
    real = data["codes"]
    tvds = [0.5 * float(np.abs(t / len(real) - q / len(synth)).sum())
            for _, (t, q) in iter_marginals_many([real, synth], cards, subsets)]
    return 1000.0 * (1.0 - float(np.mean(tvds)))


def ceiling(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """The table's non-private ceilings on the scale its runs are scored on (see the module doc)."""
    from benchmarks.sds_vs_pacsynth import eval_domain, nist_score

    codes = data["codes"]
    if name.startswith("nist"):
        out = table_ceilings(codes, lambda real, other: nist_score(data, other))
        out["codes"] = table_ceilings(codes, lambda real, other: code_space_score(data, other))
        return out
    return table_ceilings(codes, code_score(eval_domain(data["schema"])[0]))


# --- driver ----------------------------------------------------------------------------------


def cells(args) -> list[tuple[str, float, int, str]]:
    if args.data or args.eps or args.methods:
        ds = args.data.split(",") if args.data else list(DATASETS)
        es = [float(e) for e in args.eps.split(",")] if args.eps else [0.5, 1.0, 4.0, 10.0]
        ms = args.methods.split(",") if args.methods else list(METHODS)
        return [(d, e, s, m) for d in ds for e in es for s in range(args.seeds) for m in ms]
    if args.grid == "full":
        return [(d, e, s, m) for d in DATASETS for e in (0.5, 1.0, 4.0, 10.0) for s in range(3) for m in METHODS]
    return [(d, e, s, m) for d, e, n, ms in QUICK for s in range(n) for m in ms]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", choices=("quick", "full"), default="quick")
    ap.add_argument("--data"), ap.add_argument("--eps"), ap.add_argument("--methods")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--mbi-python", default="/work/venvs/mbi/bin/python")
    ap.add_argument("--time-limit", type=float, default=40 * 60)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--child", nargs=3, metavar=("PARAMS", "SRC", "DST"))
    ap.add_argument("--ceilings-only", action="store_true", help="compute the ceilings of every table in the "
                    "JSON (or --data), add them to it and report; runs no method")
    args = ap.parse_args()
    if args.ceilings_only:
        path = RESULTS / f"{OUT_NAME}.json"
        store = json.loads(path.read_text()) if path.is_file() else {}
        names = args.data.split(",") if args.data else sorted({r["data"] for r in store.get("runs", {}).values()})
        for d in names:
            print(f"ceilings of {d} ...", flush=True)
            add_ceilings(OUT_NAME, {d: ceiling(d, load(d))})
        store = json.loads(path.read_text())
        report(store.get("runs", {}), store.get("ceilings", {}))
        return
    if args.child:
        child_ours(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return
    path = RESULTS / f"{OUT_NAME}.json"
    store = json.loads(path.read_text()) if path.is_file() else {}
    runs: dict[str, Any] = store.get("runs", {})
    ceilings: dict[str, Any] = store.get("ceilings", {})
    loaded: dict[str, Any] = {}
    for d, e, s, m in cells(args):
        key = f"{d}|{e}|{s}|{m}"
        if key in runs and not args.force:
            continue
        if d not in loaded:
            loaded[d] = load(d)
            if not isinstance(ceilings.get(d), dict):
                ceilings[d] = ceiling(d, loaded[d])
        print(f"running {key} ...", flush=True)
        runs[key] = {"data": d, "epsilon": e, "seed": s, "method": m, **run_cell(loaded[d], d, m, e, s, args)}
        print(f"  {runs[key]}", flush=True)
        # Re-read before writing: several pieces of the grid may run at once.
        latest = json.loads(path.read_text()) if path.is_file() else {}
        merged_runs = {**latest.get("runs", {}), **_superseded(latest.get("runs", {}), key), key: runs[key]}
        merged_ceilings = {**latest.get("ceilings", {}), **ceilings}
        write_json(OUT_NAME, {"delta": DELTA, "ceilings": merged_ceilings, "runs": merged_runs})
        runs, ceilings = {**merged_runs, **runs}, merged_ceilings
    report(runs, ceilings)


def _superseded(runs: dict[str, Any], key: str) -> dict[str, Any]:
    """A re-run (--force) keeps the earlier result of its cell under ``<key>|before-<date>``
    (the date it was replaced), so no measured cell is ever lost."""
    old = runs.get(key)
    if old is None:
        return {}
    stem = f"{key}|before-{time.strftime('%Y-%m-%d', time.gmtime())}"
    name = next(f"{stem}-{k}" if k else stem for k in range(len(runs) + 1) if (f"{stem}-{k}" if k else stem) not in runs)
    return {name: {**old, "superseded": True}}


def report(runs: dict[str, Any], ceilings: dict[str, Any]) -> None:
    runs = {k: r for k, r in runs.items() if not r.get("superseded")}  # earlier results of re-run cells
    rows = []
    for r in sorted(runs.values(), key=lambda r: (r["data"], r["epsilon"], r["method"], r["seed"])):
        if r.get("status") != "ok":
            rows.append([r["data"], r["epsilon"], r["seed"], r["method"], r.get("status"), "", "", "", "", ""])
            continue
        rows.append([r["data"], r["epsilon"], r["seed"], r["method"], round(r["kmarginal"], 1), r["tvd1"], r["tvd2"],
                     r["tvd3"], round(r["wall_s"], 1), round(r["peak_mb"])])
    print_table(["data", "eps", "seed", "method", "k-marginal", "tvd1", "tvd2", "tvd3", "wall s", "peak MB"], rows)
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in runs.values():
        if r.get("status") == "ok":
            groups.setdefault((r["data"], r["epsilon"], r["method"]), []).append(r)
    summary = [[d, e, m, len(g), round(float(np.mean([r["kmarginal"] for r in g])), 2),
                round(min(r["kmarginal"] for r in g), 1), round(max(r["kmarginal"] for r in g), 1),
                round(float(np.mean([r["wall_s"] for r in g])), 1)] for (d, e, m), g in sorted(groups.items())]
    for d in sorted({k[0] for k in groups}):  # the ceilings beside each table's methods
        c = ceilings.get(d)
        at = max(i for i, row in enumerate(summary) if row[0] == d) + 1
        summary.insert(at, [d, "-", "ceiling binned/resample", "-", ceiling_text(c) if isinstance(c, dict) else
                            (f"{c:.1f} / -" if c is not None else "-"), "", "", ""])
    print_table(["data", "eps", "method", "n", "k-marginal mean", "min", "max", "wall s mean"], summary)
    print("ceilings: binned = the real table encoded/decoded by its schema (1000 on codes); resample = n rows "
          "drawn with replacement from the real codes (seed 0), the i.i.d. sampling floor. NIST on codes:",
          {d: ceiling_text(c.get("codes")) for d, c in ceilings.items() if isinstance(c, dict) and "codes" in c})

if __name__ == "__main__":
    main()
