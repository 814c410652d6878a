"""Benchmark: sds's synthesize step above the expansion switch, in one process (issue 25, session 41).

Loads a measurement folder saved by a release (``<workspace>/.../measurement``, as the CLI's
measure stage wrote it for ``benchmarks/scale.py``'s table) and runs what the synthesize stage
runs in the driver for an expanded release: ``SdsMethod.sampler`` (the pool's draw, latent
pool, fit, update or last pass, copies) and every part of the :class:`ExpandedSampler`
(``np.repeat`` + permutation), with a fixed generator (``--seed``; not the release's, so the
bytes are this script's own, compared between commits). Writing Parquet is not run (the
release's cells in scale.json give that stage's total).

Reports CPU seconds of the sampler's build and of the parts, the peak RSS, the fit record, and
a digest of the pool, the copies and every part in order: two commits that give the same
digest drew the same release. With ``--profile FILE`` the run is under cProfile (timed in CPU
seconds of the process, as the machine is shared); the top
functions by cumulative and own time are printed. Results append to
results/sds_synth_profile.json by (label, rows, seed).

    python benchmarks/sds_synth_profile.py MEASUREMENT_DIR --rows 10000000 --label before --profile /tmp/p.prof
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import RESULTS, peak_rss_mb, write_json  # noqa: E402


def run(folder: str, rows: int, seed: int) -> dict:
    from benchmarks.scale import schema as scale_schema
    from dpsynth.measurement import Measurement
    from dpsynth.methods.sds import SdsMethod

    schema = scale_schema()
    m = Measurement.load(folder)
    rng = np.random.default_rng(seed)
    c0 = time.process_time()
    s = SdsMethod().sampler(m, schema, rows, rng)
    build = time.process_time() - c0
    h = hashlib.sha256()
    for a in (np.ascontiguousarray(getattr(s, "pool", np.zeros(0))), np.asarray(getattr(s, "counts", np.zeros(0)))):
        h.update(a.tobytes())
    c0 = time.process_time()
    left = int(s.rows)
    while left > 0:
        part = np.ascontiguousarray(s.sample(min(left, 1 << 20), rng))
        h.update(part.tobytes())
        left -= part.shape[0]
    parts = time.process_time() - c0
    fit = getattr(s, "fit", {})
    return {"rows": rows, "seed": seed, "sampler_cpu_s": round(build, 2), "parts_cpu_s": round(parts, 2),
            "peak_rss_mb": round(peak_rss_mb()), "loadavg": [round(x, 2) for x in os.getloadavg()],
            "digest": h.hexdigest()[:16], "fit": fit}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("measurement")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label", default="")
    ap.add_argument("--profile")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    if a.profile:
        prof = cProfile.Profile(time.process_time)  # CPU seconds: the machine is shared
        res = prof.runcall(run, a.measurement, a.rows, a.seed)
        prof.dump_stats(a.profile)
        for key in ("cumulative", "tottime"):
            pstats.Stats(prof).sort_stats(key).print_stats(a.top)
    else:
        res = run(a.measurement, a.rows, a.seed)
    res = {"label": a.label, "profiled": bool(a.profile), **res}
    print("RESULT", json.dumps(res))
    path = RESULTS / "sds_synth_profile.json"
    cells = json.loads(path.read_text())["cells"] if path.exists() else []
    cells = [c for c in cells if (c["label"], c["rows"], c["seed"], c["profiled"]) != (a.label, a.rows, a.seed, bool(a.profile))]
    write_json("sds_synth_profile", {"cells": [*cells, res]})


if __name__ == "__main__":
    main()
