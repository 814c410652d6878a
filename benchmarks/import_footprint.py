"""Import cost and install size of dpsynth (issue 15).

Times ``import <module>`` in fresh interpreters (median of ``--runs``), lists the heavy
dependencies each import loads, and, given ``--venv``, the size and package count of
that environment's site-packages. Run it under the benchmark lock:

    flock /work/wt/bench.lock python benchmarks/import_footprint.py --label after \
        --venv /tmp/venv-runtime --out benchmarks/results/import_footprint.json

``--root`` picks the checkout whose ``dpsynth`` is imported (PYTHONPATH), so two
checkouts can be compared in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

MODULES = ("dpsynth", "dpsynth.cli", "dpsynth.api", "dpsynth.report", "dpsynth.orchestration.release")
HEAVY = ("prefect", "great_expectations", "matplotlib", "scipy", "pandas", "pyarrow", "cvxpy", "sqlalchemy")
_PROBE = ("import json, sys, time; t = time.perf_counter(); import {m}; dt = time.perf_counter() - t; "
          "print(json.dumps([dt, sorted({{k.split('.')[0] for k in sys.modules}} & set({heavy!r}))]))")


def time_import(python: str, root: Path, module: str, runs: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(root)}
    times, heavy = [], []
    for _ in range(runs):
        try:
            out = subprocess.run([python, "-c", _PROBE.format(m=module, heavy=HEAVY)], env=env, cwd="/",
                                 capture_output=True, text=True, timeout=300, check=True)
        except subprocess.CalledProcessError:
            return {"module": module, "error": "import failed"}
        dt, heavy = json.loads(out.stdout.strip().splitlines()[-1])
        times.append(dt)
    return {"module": module, "median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
            "heavy_loaded": heavy}


def venv_size(venv: Path) -> dict:
    (site,) = venv.glob("lib/python3*/site-packages")
    total = sum(p.stat().st_size for p in site.rglob("*") if p.is_file() and not p.is_symlink())
    dists = [p for p in site.glob("*.dist-info")]
    top = sorted(p.name for p in site.iterdir() if p.name in ("flows", "tasks"))
    return {"venv": str(venv), "site_packages_mb": round(total / 1e6, 1), "distributions": len(dists),
            "top_level_flows_or_tasks": top}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True)
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--venv", type=Path, action="append", default=[])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = [time_import(args.python, args.root, m, args.runs) for m in MODULES]
    result = {"label": args.label, "root": str(args.root), "python": args.python, "runs": args.runs,
              "loadavg": os.getloadavg(), "imports": rows, "venvs": [venv_size(v) for v in args.venv]}
    print(f"{args.label}: import time (median of {args.runs}, fresh interpreter), load {os.getloadavg()[0]:.1f}")
    print(f"{'module':34} {'median s':>9} {'min s':>7}  heavy dependencies loaded")
    for r in rows:
        if "error" in r:
            print(f"{r['module']:34} {'—':>9} {'—':>7}  {r['error']}")
        else:
            print(f"{r['module']:34} {r['median_s']:9.3f} {r['min_s']:7.3f}  {', '.join(r['heavy_loaded']) or '-'}")
    for v in result["venvs"]:
        print(f"{v['venv']}: site-packages {v['site_packages_mb']} MB, {v['distributions']} distributions, "
              f"top-level flows/tasks: {v['top_level_flows_or_tasks'] or 'none'}")
    if args.out:
        old = json.loads(args.out.read_text()) if args.out.exists() else []
        args.out.write_text(json.dumps([*[o for o in old if o.get("label") != args.label], result], indent=2) + "\n")


if __name__ == "__main__":
    main()
