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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


def _released(method, m, schema) -> dict:
    t = time.process_time()
    model, report = method.released_fit(m, schema, m.estimated_records())
    cpu = time.process_time() - t
    return {"cpu_s": round(cpu, 2), "digest": _model_sha(model), "steps": report.steps,
            "extra_steps": report.extra_steps, "ratio": round(report.ratio, 6), "cells": model.tree.total_cells()}


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
            "fits_digest": _sha([np.frombuffer("".join(digests).encode(), dtype=np.uint8)]),
            "queries_digest": _sha([np.frombuffer("".join(answers).encode(), dtype=np.uint8)]),
            "last_cells": model.tree.total_cells()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", type=Path, default=KEPT, help="a kept release folder (measurement/, schema.yaml)")
    ap.add_argument("--label", default="run", help="the cell's name in results/fit_speed.json")
    ap.add_argument("--parts", default="released,aim", help="released, aim or both (comma-separated)")
    args = ap.parse_args()
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
        cell["released"] = _released(method, m, schema)
    if "aim" in parts:
        cell["aim"] = _aim_replay(get_method(m.method, params), m, schema)
    cell["load_1min_after"] = round(os.getloadavg()[0], 2)
    cell["peak_rss_mb"] = round(peak_rss_mb(), 1)
    rows = []
    if "released" in cell:
        r = cell["released"]
        rows.append(("released fit", r["cpu_s"], r["digest"], f"{r['steps']} steps, ratio {r['ratio']}"))
    if "aim" in cell:
        a = cell["aim"]
        rows.append(("aim fits", a["fit_cpu_s"], a["fits_digest"], f"{a['fits']} fits"))
        rows.append(("aim queries", a["query_cpu_s"], a["queries_digest"], f"{a['fits'] - 1} project_many"))
    print_table(("part", "cpu_s", "digest", "what"), rows)
    print(f"load (1 min) {cell['load_1min_before']} -> {cell['load_1min_after']}, peak RSS {cell['peak_rss_mb']} MB")
    path = RESULTS / "fit_speed.json"
    cells = json.loads(path.read_text()).get("cells", []) if path.is_file() else []
    cells = [c for c in cells if c.get("label") != args.label] + [cell]
    write_json("fit_speed", {"cells": cells})
    return 0


if __name__ == "__main__":
    sys.exit(main())
