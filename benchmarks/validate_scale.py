"""The validate stage alone at 1M and 10M rows: CPU seconds and peak memory of the gate.

Writes a synthetic table of ``rows`` records (the 20-column schema of
``benchmarks/scale.py``; codes drawn block by block with a dependence between
neighbouring columns) with the synthesize stage's writer, measures it with ``pgm`` (MST:
1- and 2-way noisy marginals, what the gate checks against), then runs the gate on it
(``dpsynth.pipeline.stages.gate_files``: the scan of the Parquet files and the GE run)
in a fresh process under ``nice``, once per code tree given (``--trees``: this tree, and
for instance the main branch's to compare). Reports the process's CPU seconds, wall
seconds and peak resident memory (``ru_maxrss``: the scan and GE together, what the gate
worker holds during a release), with the load average at the start.

    python benchmarks/validate_scale.py --rows 1000000,10000000 --trees .,/work/main

Results: benchmarks/results/validate_scale.json.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


class _Sampler:
    """Codes with a dependence between neighbouring columns (not uniform noise)."""

    def __init__(self, cards: tuple[int, ...], rows: int):
        self.cards, self.rows = np.asarray(cards), rows

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` records of codes."""
        base = rng.integers(0, 1 << 30, size=n)
        cols = [(base // (1 + 3 * j) + rng.integers(0, 2, size=n)) % c for j, c in enumerate(self.cards)]
        return np.stack(cols, axis=1).astype(np.uint8)


def make(rows: int, folder: Path) -> Path:
    """A synthetic folder of ``rows`` records and its measurement folder; returns the latter."""
    from dpsynth.methods.pgm import PgmMethod
    from dpsynth.pipeline.synthetic import write_synthetic
    from dpsynth.privacy.budget import Budget, Ledger
    from dpsynth.rows.rowsource import RowSource
    from scale import schema

    sch = schema()
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "synthetic").mkdir(parents=True)
    write_synthetic(folder / "synthetic", sch, _Sampler(sch.cardinalities, rows), np.random.default_rng(1),
                    np.random.default_rng(2), chunk_rows=1 << 20)
    method = PgmMethod()
    budget = Budget(epsilon=1.0, delta=1e-6)
    source = RowSource.from_parquet(folder / "synthetic" / "synthetic-codes.parquet", sch)
    m = method.measure(source, Ledger(budget, method.plan(sch, budget)), np.random.default_rng(3))
    m.save(folder / "measurement")
    return folder / "measurement"


def child(folder: Path, rows: int) -> None:
    """The gate on the folder, in this process; prints one RESULT line."""
    import dpsynth
    from dpsynth.pipeline import stages
    from scale import schema  # after dpsynth: the tree on PYTHONPATH is the one measured

    kwargs = {"chunk_rows": 1 << 20} if "chunk_rows" in inspect.signature(stages.gate_files).parameters else {}
    t0, c0 = time.perf_counter(), time.process_time()
    summary = stages.gate_files(schema(), folder / "synthetic", folder / "measurement", rows, None, None, "b", **kwargs)
    res = {"wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(time.process_time() - c0, 2),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
           "success": summary["success"], "rows_checked": summary["statistics"]["rows"],
           "dpsynth": str(Path(dpsynth.__file__).parents[1])}
    print("RESULT " + json.dumps(res), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1000000,10000000")
    ap.add_argument("--trees", default=".", help="code trees to run the gate from (PYTHONPATH), comma separated")
    ap.add_argument("--work", default="/tmp/dpsynth-validate-scale")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--folder")
    args = ap.parse_args()
    if args.child:
        child(Path(args.folder), int(args.rows))
        return
    sys.path.insert(0, str(ROOT))
    from benchmarks._common import print_table, write_json

    results = []
    for rows in (int(x) for x in args.rows.split(",")):
        folder = Path(args.work) / f"rows-{rows}"
        t0 = time.perf_counter()
        make(rows, folder)
        made = round(time.perf_counter() - t0, 1)
        for tree in args.trees.split(","):
            path = str(Path(tree).resolve())
            load = os.getloadavg()[0]
            out = subprocess.run(["nice", sys.executable, __file__, "--child", "--rows", str(rows), "--folder",
                                  str(folder)], capture_output=True, text=True,
                                 env={**os.environ, "PYTHONPATH": path})
            res = {"rows": rows, "tree": path, "load_before": round(load, 2), "make_s": made}
            lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
            res.update(json.loads(lines[-1].split(" ", 1)[1]) if lines else {"error": out.stderr[-400:]})
            results.append(res)
            print(json.dumps(res), flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    print_table(["rows", "tree", "wall s", "CPU s", "peak MB", "passed", "load"],
                [[r["rows"], r["tree"], r.get("wall_s", ""), r.get("cpu_s", ""), r.get("peak_rss_mb", ""),
                  r.get("success", r.get("error", "")), r["load_before"]] for r in results])
    write_json("validate_scale", {"results": results})


if __name__ == "__main__":
    main()
