"""CPU of the default release's graphical-model fits (pgm AIM), from a kept measurement.

Loads a kept release's ``measurement/`` and ``schema.yaml`` (by default the lead's 10M x 20
release of ``benchmarks/scale.py``, ``--method auto``; skipped, saying so, when absent) and runs,
each timed in CPU seconds (``time.process_time``) of this one process:

* ``released``: the released fit of synthesize (:meth:`PgmMethod.released_fit` for the
  measurement's estimated record count, as ``sampler`` calls it);
* ``aim-fits`` and ``aim-queries``: a replay of measure's AIM rounds on the published marginals:
  the first fit on the 1-way marginals (300 steps), then, per selected marginal in the order AIM
  chose it, ``project_many`` over every candidate (as a round scores them) and a warm-started refit
  (``refit_iters``) with that marginal added (a marginal chosen twice was published merged: it is
  added once, and the later round only refits). The noise of each round is the merged one, so
  this is measure's workload, not its exact run.
* ``warm`` (an experiment, not the product; needs ``aim``): the released fit started from the
  replay's last AIM model (its potentials folded into the released tree) instead of zero
  potentials: its steps, CPU, the largest TVD / limit it reached and its loss against the
  released fit's. It changes the released model's bits, so it is only reported.

``--small`` instead runs, on each small table of ``shared/data`` (``--tables``; the loader of
``benchmarks/aim_head_to_head.py``), pgm AIM with degree 2 (the default release's method) at
epsilon 1 with a fixed seed: measure, then the released fit for the table's row count, timing
each in CPU seconds, with digests of the measurement and the model (so a checkout that is only
faster prints the same). ``--tree DIR`` imports ``dpsynth`` from another checkout (the code
before), the same script timing both.

Every part prints a sha256 of what it computed (potentials and log beliefs; the queries'
answers): two code versions that print the same digests fitted the same bits. ``--label``
names the cell in ``benchmarks/results/fit_speed.json`` (cells of other labels are kept).

    PYTHONPATH=. nice -n 10 python benchmarks/fit_speed.py --label before [--parts released,aim]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

_TREE = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--tree"), None)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if _TREE:  # another checkout's dpsynth (its benchmarks package too), ahead of this one's
    sys.path.insert(0, str(Path(_TREE).resolve()))

from benchmarks._common import RESULTS, peak_rss_mb, print_table, write_json  # noqa: E402

KEPT = Path("/tmp/lead/prof/ws/releases/2039124ab8946543bd73b9c7f6fd220c")


def _sha(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _model_sha(model) -> str:
    return _sha(list(model.theta) + list(model.log_beliefs))


def _faults() -> tuple[float, float, int]:
    """User and system CPU seconds and minor page faults of this process so far: faults and
    instructions do not grow with the machine's load, CPU seconds do (the cores are shared)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, r.ru_minflt


def _usage_since(before: tuple[float, float, int]) -> dict:
    now = _faults()
    return {"user_s": round(now[0] - before[0], 2), "sys_s": round(now[1] - before[1], 2),
            "minor_faults": now[2] - before[2]}


def _released(method, m, schema, warm=None) -> tuple[dict, object]:
    usage = _faults()
    t = time.process_time()
    if warm is None:
        model, report = method.released_fit(m, schema, m.estimated_records())
    else:
        model, report = _warm_released_fit(method, m, schema, warm)
    cpu = time.process_time() - t
    from dpsynth.inference import fit_loss

    return {"cpu_s": round(cpu, 2), **_usage_since(usage), "digest": _model_sha(model), "steps": report.steps,
            "extra_steps": report.extra_steps, "ratio_at_stop": round(report.ratio_at_stop, 6),
            "ratio": round(report.ratio, 6), "met": report.met, "cells": model.tree.total_cells(),
            "loss": round(fit_loss(model, _released_observations(m, schema)[1]), 3)}, model


def _released_observations(m, schema):
    """The released fit's domain and observations (on the merged values), as released_fit builds them."""
    from dpsynth.inference.compression import compressed_domain, fold_observation
    from dpsynth.inference.measurement import domain_of, observations_of

    maps = {a: np.asarray(g, dtype=np.int64) for a, g in (m.meta.get("compression") or {}).items()}
    full = domain_of(schema)
    obs = [fold_observation(o, maps, full) for o in observations_of(m)] if maps else observations_of(m)
    return (compressed_domain(full, maps) if maps else full), obs


def _warm_released_fit(method, m, schema, warm):
    """released_fit's fit to the gate's target, started from ``warm`` (the experiment)."""
    import dpsynth.methods.pgm as pgm
    from dpsynth.evaluation.predicted import allowed_tvds
    from dpsynth.inference import FitTarget

    est = sys.modules["dpsynth.inference.estimate"]
    dom, obs = _released_observations(m, schema)
    rows = m.estimated_records()
    opts = method._options(method.params.iters, schema)
    target = FitTarget(limits={frozenset(a): pgm.GATE_FIT_SHARE * t for a, t in allowed_tvds(m, rows).items()},
                       most_steps=pgm.gate_fit_steps(method.params.iters, rows), window=pgm.GATE_FIT_WINDOW,
                       min_gain=pgm.GATE_FIT_MIN_GAIN)
    return est._fit(dom, obs, None, opts, (), warm, target)


def _aim_replay(method, m, schema) -> dict:
    from dpsynth.inference.measurement import domain_of, observations_of

    maps = {a: np.asarray(g, dtype=np.int64) for a, g in (m.meta.get("compression") or {}).items()}
    method._maps, method._domain = maps, domain_of(schema)
    names = schema.names
    by_attrs = {o.attrs: o for o in observations_of(m)}
    obs = [by_attrs[(n,)] for n in names]
    cands = method._aim_candidates(schema)
    queries = [tuple(names[j] for j in r) for r in cands]
    fit_cpu = query_cpu = 0.0
    usage = _faults()
    t = time.process_time()
    model = method._fit(schema, obs, iters=300)
    fit_cpu += time.process_time() - t
    out, digests, answers = [], [], []
    for attrs in m.meta["selected"]:
        attrs = tuple(attrs)
        t = time.process_time()
        est = model.project_many(queries)
        query_cpu += time.process_time() - t
        answers.append(_sha(est))
        if attrs in by_attrs and by_attrs[attrs] not in out:
            out.append(by_attrs[attrs])
        t = time.process_time()
        model = method._fit(schema, obs + out, iters=method.params.refit_iters, warm=model)
        fit_cpu += time.process_time() - t
        digests.append(_model_sha(model))
    return {"fits": 1 + len(m.meta["selected"]), "fit_cpu_s": round(fit_cpu, 2), "query_cpu_s": round(query_cpu, 2),
            "together": _usage_since(usage),
            "fits_digest": _sha([np.frombuffer("".join(digests).encode(), dtype=np.uint8)]),
            "queries_digest": _sha([np.frombuffer("".join(answers).encode(), dtype=np.uint8)]),
            "last_cells": model.tree.total_cells()}, model


SMALL = ("car", "asia", "nist-ma2019", "nist-tx2019", "nist-national2019", "adult", "mushroom")


def _small(tables: list[str], label: str) -> int:
    """Measure and released fit of pgm AIM (degree 2) on each small table, CPU and digests."""
    from benchmarks.aim_head_to_head import load
    from dpsynth.methods import get_method
    from dpsynth.privacy import Budget, Ledger
    from dpsynth.rows.encoding import EncodedTable
    from dpsynth.schema import schema_from_dict

    out, rows = [], []
    for name in tables:
        cols, codes, sizes = load(name)
        schema = schema_from_dict({"name": name, "columns": [
            {"name": c, "type": "categorical", "values": [str(i) for i in range(k)]} for c, k in zip(cols, sizes)]})
        table = EncodedTable(schema=schema, codes=codes.astype(np.int64))
        method = get_method("pgm", {"select": "aim", "degree": "2"})
        budget = Budget(epsilon=1.0, delta=1e-9)
        rng = np.random.default_rng(2026)
        t = time.process_time()
        m = method.measure(table, Ledger(budget, method.plan(schema, budget)), rng)
        measure_cpu = time.process_time() - t
        t = time.process_time()
        model, report = method.released_fit(m, schema, codes.shape[0])
        fit_cpu = time.process_time() - t
        cell = {"table": name, "rows": int(codes.shape[0]), "columns": len(cols), "measure_cpu_s": round(measure_cpu, 3),
                "released_fit_cpu_s": round(fit_cpu, 3), "steps": report.steps if report else None,
                "measured_cells": int(sum(nm.counts.size for nm in m.measured)),
                "measurement_digest": _sha([nm.counts for nm in m.measured]), "model_digest": _model_sha(model)}
        out.append(cell)
        rows.append((name, cell["measure_cpu_s"], cell["released_fit_cpu_s"], cell["steps"],
                     cell["measurement_digest"], cell["model_digest"]))
    print_table(("table", "measure cpu s", "fit cpu s", "steps", "measurement", "model"), rows)
    path = RESULTS / "fit_speed.json"
    cells = json.loads(path.read_text()).get("cells", []) if path.is_file() else []
    cells = [c for c in cells if c.get("label") != label] + [
        {"label": label, "tree": _TREE or "this checkout", "load_1min": round(os.getloadavg()[0], 2), "small": out}]
    write_json("fit_speed", {"cells": cells})
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", type=Path, default=KEPT, help="a kept release folder (measurement/, schema.yaml)")
    ap.add_argument("--label", default="run", help="the cell's name in results/fit_speed.json")
    ap.add_argument("--parts", default="released,aim", help="released, aim, warm (needs aim), comma-separated")
    ap.add_argument("--small", action="store_true", help="the small tables instead of the kept release")
    ap.add_argument("--tables", default=",".join(SMALL))
    ap.add_argument("--tree", help="import dpsynth from this checkout instead (the code before)")
    args = ap.parse_args()
    if args.small:
        return _small([t for t in args.tables.split(",") if t], args.label)
    if not (args.release / "measurement").is_dir() or not (args.release / "schema.yaml").is_file():
        print(f"skipped: no kept release at {args.release} (measurement/ and schema.yaml); "
              "pass --release with a release kept by benchmarks/scale.py")
        return 0
    from dpsynth.measurement import Measurement
    from dpsynth.methods import get_method
    from dpsynth.schema.parse import load_schema

    m = Measurement.load(args.release / "measurement")
    schema = load_schema(args.release / "schema.yaml")
    params = {k: str(v) for k, v in m.params.items() if v is not None}
    method = get_method(m.method, params)
    parts = [p for p in args.parts.split(",") if p]
    cell: dict = {"label": args.label, "release": str(args.release), "columns": len(schema.names),
                  "load_1min_before": round(os.getloadavg()[0], 2)}
    if "released" in parts:
        cell["released"] = _released(method, m, schema)[0]
    if "aim" in parts:
        cell["aim"], last = _aim_replay(get_method(m.method, params), m, schema)
        if "warm" in parts:
            cell["warm_released"] = _released(method, m, schema, warm=last)[0]
    cell["load_1min_after"] = round(os.getloadavg()[0], 2)
    cell["peak_rss_mb"] = round(peak_rss_mb(), 1)
    rows = []
    if "released" in cell:
        r = cell["released"]
        rows.append(("released fit", r["cpu_s"], r["digest"], f"{r['steps']} steps, ratio {r['ratio']}, loss {r['loss']}, "
                     f"user/sys {r['user_s']}/{r['sys_s']} s, {r['minor_faults']:,} minor faults"))
    if "aim" in cell:
        a = cell["aim"]
        rows.append(("aim fits", a["fit_cpu_s"], a["fits_digest"], f"{a['fits']} fits"))
        rows.append(("aim queries", a["query_cpu_s"], a["queries_digest"], f"{a['fits'] - 1} project_many"))
        u = a["together"]
        rows.append(("aim together", u["user_s"] + u["sys_s"], "", f"user/sys {u['user_s']}/{u['sys_s']} s, "
                     f"{u['minor_faults']:,} minor faults"))
    if "warm_released" in cell:
        r = cell["warm_released"]
        rows.append(("released fit, warm (experiment)", r["cpu_s"], r["digest"],
                     f"{r['steps']} steps, ratio {r['ratio']}, loss {r['loss']}"))
    print_table(("part", "cpu_s", "digest", "what"), rows)
    print(f"load (1 min) {cell['load_1min_before']} -> {cell['load_1min_after']}, peak RSS {cell['peak_rss_mb']} MB")
    path = RESULTS / "fit_speed.json"
    cells = json.loads(path.read_text()).get("cells", []) if path.is_file() else []
    cells = [c for c in cells if c.get("label") != args.label] + [cell]
    write_json("fit_speed", {"cells": cells})
    return 0


if __name__ == "__main__":
    sys.exit(main())
