"""Import cost and install size of dpsynth (issue 15).

Times ``import <module>`` in fresh interpreters (median of ``--runs``), lists the heavy
dependencies each import loads, and, given ``--venv``, the size and package count of
that environment's site-packages. Run it under the benchmark lock:

    flock /work/wt/bench.lock python benchmarks/import_footprint.py --label after \
        --venv /tmp/venv-runtime --out benchmarks/results/import_footprint.json

``--root`` picks the checkout whose ``dpsynth`` is imported (PYTHONPATH), so two
checkouts can be compared in one run.

``--cells car:0.1,asia:1`` measures instead where the memory of the head-to-head's process
goes (benchmarks/aim_child.py, run by aim_head_to_head.py, whose peak RSS is compared with mbi AIM's;
issue 27 section 2): a fresh interpreter reads its VmRSS and VmHWM (/proc/self/status) after
the interpreter's start, numpy, numpy.random, the child's module, each import the child makes,
and each step of its run (``child_ours``'s ``mark``), and lists the modules each step loaded.
``--env KEY=VALUE`` (repeatable) sets a variable in that process only: a measurement, e.g.
``OPENBLAS_NUM_THREADS=1``. Results go to ``--out`` under ``--label`` as above::

    python benchmarks/import_footprint.py --label rss-after --cells car:0.1,car:1,asia:0.1,asia:1 \
        --out benchmarks/results/import_footprint.json
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


_RSS_PROBE = """
import json, sys
def reading(step, before=frozenset()):
    status = dict(line.split(':', 1) for line in open('/proc/self/status'))
    mb = lambda k: round(int(status[k].split()[0]) / 1024.0, 2)
    new = ', '.join(sorted({m if m.startswith('dpsynth.') else m.split('.')[0] for m in set(sys.modules) - before}))
    STEPS.append({'step': step, 'rss_mb': mb('VmRSS'), 'hwm_mb': mb('VmHWM'), 'modules': len(sys.modules), 'new': new})
    return frozenset(sys.modules)
STEPS = []
seen = reading('the interpreter')
import numpy
seen = reading('numpy', seen)
import numpy.random
seen = reading('numpy.random', seen)
from pathlib import Path
from benchmarks import aim_child
seen = reading('the child module (aim_child.py)', seen)
def mark(step):
    global seen
    seen = reading(step, seen)
aim_child.child_ours(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), mark)
print(json.dumps(STEPS))
"""


def rss_steps(python: str, root: Path, table: str, eps: float, seed: int, method: str,
              env_extra: dict[str, str]) -> dict:
    """VmRSS/VmHWM after each step of the head-to-head's child on one cell (see the module doc)."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks import aim_head_to_head as h2h

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "cell.npz", Path(tmp) / "cell.npy"
        h2h.write_cell_input(src, h2h.load(table), eps, seed)
        env = {**os.environ, "PYTHONPATH": str(root), **env_extra}
        out = subprocess.run([python, "-c", _RSS_PROBE, json.dumps(h2h.OURS[method]), str(src), str(dst)], env=env,
                             cwd=root, capture_output=True, text=True, timeout=600, check=True)
        steps = json.loads(out.stdout.strip().splitlines()[-1])
        # a second run under -X importtime (its own process: the readings above are without it)
        timed = subprocess.run([python, "-X", "importtime", "-c", _RSS_PROBE, json.dumps(h2h.OURS[method]), str(src),
                                str(dst)], env=env, cwd=root, capture_output=True, text=True, timeout=600, check=True)
    return {"table": table, "epsilon": eps, "seed": seed, "method": method, "env": env_extra,
            "peak_mb": max(s["hwm_mb"] for s in steps), "loadavg": os.getloadavg()[0], "steps": steps,
            "import_s": import_seconds(timed.stderr)}


def import_seconds(importtime: str) -> dict[str, float]:
    """Seconds of ``-X importtime``'s outermost imports, summed by top-level package (cumulative,
    so each import's own imports count with it), largest first."""
    total: dict[str, float] = {}
    for line in importtime.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|")
        if name.startswith(" ") and not name.startswith("  ") and cumulative.strip().isdigit():  # outermost only
            root = name.strip().split(".")[0]
            total[root] = total.get(root, 0.0) + int(cumulative) / 1e6
    return dict(sorted(((k, round(v, 4)) for k, v in total.items()), key=lambda kv: -kv[1]))


def print_rss(rows: list[dict]) -> None:
    """The steps as rows, one column of VmHWM (MB) per cell; the modules each step loaded (first cell's)."""
    print(f"{'after':50} " + " ".join(f"{r['table'] + ' ' + format(r['epsilon'], 'g'):>14}" for r in rows)
          + "  new top-level modules (first cell)")
    for i, s in enumerate(rows[0]["steps"]):
        new = ", ".join(n for n in s["new"].split(", ") if n and not n.startswith("dpsynth"))
        cells = " ".join(f"{r['steps'][i]['hwm_mb']:14.1f}" if i < len(r["steps"]) else f"{'-':>14}" for r in rows)
        print(f"{s['step'][:50]:50} {cells}  {(new[:90] + '...') if len(new) > 90 else new}")


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
    ap.add_argument("--cells", help="table:epsilon,...: the head-to-head child's RSS step by step instead")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--method", default="pgm-aim2", help="with --cells: one of aim_head_to_head.OURS")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="with --cells: set in the measured process only (a measurement)")
    args = ap.parse_args()
    if args.cells:
        env_extra = dict(e.split("=", 1) for e in args.env)
        cells = [(t, float(e)) for t, e in (c.split(":") for c in args.cells.split(","))]
        rows = [rss_steps(args.python, args.root, t, e, args.seed, args.method, env_extra) for t, e in cells]
        print(f"{args.label}: VmHWM (MB) of the head-to-head child after each step, seed {args.seed}, "
              f"{args.method}{' ' + str(env_extra) if env_extra else ''}, load {os.getloadavg()[0]:.1f}")
        print_rss(rows)
        print("import seconds (-X importtime, outermost imports by package, first cell): "
              + ", ".join(f"{k} {v:.3f}" for k, v in list(rows[0]["import_s"].items())[:8]))
        result = {"label": args.label, "root": str(args.root), "python": args.python, "rss": rows}
        if args.out:
            old = json.loads(args.out.read_text()) if args.out.exists() else []
            args.out.write_text(json.dumps([*[o for o in old if o.get("label") != args.label], result], indent=2)
                                + "\n")
        return
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
