"""Benchmark: what stating every measured k-tuple of ``sds`` costs the release and the gate.

For each table (the demo table; NIST national2019 with its 10 demographic columns and
with all 24; tx2019 and ma2019 with all 24) at epsilon 1, one seeded sds release
(default parameters, measure + synthesize + the Great Expectations gate, no Data Docs):
the marginals the measurement states per k, the sizes of ``measurement.parquet`` and
``measurement.json``, the time of measure, save, load and the gate, the gate's verdict
and, per k, the largest TVD / threshold and the mean TVD. Run it on two commits to compare
(the JSON names the code's commit).

Usage::

    python benchmarks/sds_gate.py [--tables demo national2019/all ...] [--out sds_gate]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import SHARED_DATA as _DEFAULT_DATA, peak_rss_mb, print_table, write_json  # noqa: E402

SHARED_DATA = Path(os.environ.get("DPSYNTH_SHARED_DATA", "/work/shared/data" if Path("/work/shared/data").is_dir()
                                  else _DEFAULT_DATA))
TABLES = ("demo", "national2019/demographic", "national2019/all", "tx2019/all", "ma2019/all")
EPSILON, DELTA, SEED = 1.0, 1e-6, 0


def load(name: str, data: Path | None = None):
    """(schema, encoded table) of a benchmark table (NIST files under ``data``, default the
    shared data); None when its data is absent."""
    from dpsynth.rows.encoding import EncodedTable, encode, read_table
    from dpsynth.evaluation.nist_score import NIST_DEMOGRAPHIC_FEATURES
    from dpsynth.schema import load_schema, schema_from_dict

    if name == "demo":
        schema = load_schema(ROOT / "schemas" / "demo.yaml")
        return schema, encode(read_table(ROOT / "data" / "demo.csv", schema), schema)
    file, cols = name.split("/")
    csv = (data or SHARED_DATA) / "nist" / f"{file}.csv"
    if not csv.is_file():
        return None
    full = load_schema(ROOT / "schemas" / "nist.yaml")
    names = list(NIST_DEMOGRAPHIC_FEATURES) if cols == "demographic" else full.names
    idx = [full.index(c) for c in names]
    schema = schema_from_dict({"name": name.replace("/", "-"), "columns": [full.columns[i].to_dict() for i in idx]})
    codes = encode(read_table(csv, full), full).codes
    return schema, EncodedTable(schema=schema, codes=np.ascontiguousarray(codes[:, idx]))


def run(name: str) -> dict | None:
    """One release of ``name``: sizes, times and the gate's verdict."""
    from dpsynth.rows.encoding import decode
    from dpsynth.gate import run_gate
    from dpsynth.measurement import Measurement
    from dpsynth.methods import get_method
    from dpsynth.privacy.budget import Budget, Ledger

    loaded = load(name)
    if loaded is None:
        print(f"skipping {name}: data absent")
        return None
    schema, enc = loaded
    method, budget = get_method("sds", {}), Budget(epsilon=EPSILON, delta=DELTA)
    t0 = time.perf_counter()
    m = method.measure(enc, Ledger(budget, method.plan(schema, budget)), np.random.default_rng(SEED))
    t_measure = time.perf_counter() - t0
    out = method.synthesize(m, schema, None, np.random.default_rng(SEED + 1))
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        m.save(d)
        t_save = time.perf_counter() - t0
        sizes = {p.name: p.stat().st_size for p in Path(d).iterdir()}
        t0 = time.perf_counter()
        m = Measurement.load(d)
        t_load = time.perf_counter() - t0
    synthetic = decode(out, np.random.default_rng(SEED + 2))
    t0 = time.perf_counter()
    summary = run_gate(synthetic, out, m, None)
    t_gate = time.perf_counter() - t0
    by_k: dict[str, dict] = {}
    for e in summary["marginal_errors"]:
        k = by_k.setdefault(str(e["k"]), {"marginals": 0, "max_ratio": 0.0, "mean_tvd": 0.0})
        k["marginals"] += 1
        k["max_ratio"] = max(k["max_ratio"], e["tvd"] / e["threshold"])
        k["mean_tvd"] += e["tvd"]
    for k in by_k.values():
        k["mean_tvd"] /= max(1, k["marginals"])
    return {
        "table": name, "rows": int(enc.n), "columns": len(schema.columns), "gate_success": bool(summary["success"]),
        "failed": summary["failed"], "by_k": by_k,
        "measurement_parquet_bytes": sizes.get("measurement.parquet", 0),
        "measurement_json_bytes": sizes.get("measurement.json", 0),
        "aggregates_parquet_bytes": sizes.get("measurement-aggregates.parquet", 0),
        "seconds": {"measure": t_measure, "save": t_save, "load": t_load, "gate": t_gate},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="*", default=list(TABLES))
    ap.add_argument("--out", default="sds_gate")
    args = ap.parse_args(argv)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    results = [r for r in (run(t) for t in args.tables) if r is not None]
    rows = []
    for r in results:
        ks = " ".join(f"k{k}:{v['marginals']}/{v['max_ratio']:.2f}" for k, v in sorted(r["by_k"].items()))
        rows.append([r["table"], r["gate_success"], ks, r["measurement_parquet_bytes"], r["measurement_json_bytes"],
                     r["seconds"]["measure"], r["seconds"]["save"], r["seconds"]["load"], r["seconds"]["gate"]])
    print_table(["table", "gate", "k: marginals/max TVD ratio", "parquet B", "json B", "measure s", "save s",
                 "load s", "gate s"], rows)
    write_json(args.out, {"benchmark": "sds_gate", "commit": commit, "epsilon": EPSILON, "delta": DELTA,
                          "seed": SEED, "loadavg": list(os.getloadavg()), "peak_rss_mb": peak_rss_mb(),
                          "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
