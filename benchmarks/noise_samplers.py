"""Cost of the exact noise samplers (issue 23, section 6) against the float ones they replaced.

Seconds per 1e6 draws of ``discrete_gaussian`` and ``discrete_laplace`` (exact: CKS 2020
Algorithms 1-3 on integers, dpsynth/privacy/exact.py) at several scales, beside a private
copy of the float samplers dpsynth used before (``rng.geometric`` and an ``np.exp``
acceptance: close to, not exactly, the stated law) and OpenDP's exact samplers (not
seedable; timed on 1e4 draws and extrapolated to 1e6: said so in the output).
Each time is the median of ``--reps`` runs in this process, as process CPU time (steadier on
a shared machine) and wall time. The load average before and after is recorded; compare
columns of one run, not across runs.

    PYTHONPATH=. python benchmarks/noise_samplers.py [--n 1000000] [--reps 3] [--no-opendp]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import print_table, write_json  # noqa: E402
from dpsynth.privacy.noise import discrete_gaussian, discrete_laplace  # noqa: E402

SCALES = (1.0, 10.0, 100.0, 1e4)
OPENDP_N = 10_000


def _old_laplace(scale: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """The float sampler before issue 23: difference of two numpy geometrics."""
    p = -math.expm1(-1.0 / scale)
    return rng.geometric(p, size=size).astype(np.int64) - rng.geometric(p, size=size).astype(np.int64)


def _old_gaussian(sigma: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """The float sampler before issue 23: CKS rejection with an np.exp acceptance test."""
    t, s2 = math.floor(sigma) + 1.0, sigma * sigma
    out, filled = np.empty(size, dtype=np.int64), 0
    while filled < size:
        need = size - filled
        batch = int(need * 1.6) + 16
        y = _old_laplace(t, batch, rng)
        keep = y[rng.random(batch) < np.exp(-((np.abs(y) - s2 / t) ** 2) / (2.0 * s2))]
        take = min(need, keep.size)
        out[filled : filled + take] = keep[:take]
        filled += take
    return out


def _opendp(kind: str, scale: float) -> Callable[[int], object] | None:
    try:
        import opendp.prelude as dp
    except ImportError:
        return None
    dp.enable_features("contrib")
    make = dp.m.make_gaussian if kind == "gaussian" else dp.m.make_laplace
    metric = dp.l2_distance(T=int) if kind == "gaussian" else dp.l1_distance(T=int)
    meas = make(dp.vector_domain(dp.atom_domain(T=int)), metric, scale=scale)
    return lambda n: meas([0] * n)


def _time(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    """Median (wall, CPU) seconds of ``reps`` calls; CPU time is the steadier under contention."""
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-opendp", action="store_true")
    args = ap.parse_args()
    load_before = os.getloadavg()
    rows, records = [], []
    per = 1e6 / args.n
    for kind, exact_fn, old_fn in (("gaussian", discrete_gaussian, _old_gaussian),
                                   ("laplace", discrete_laplace, _old_laplace)):
        for scale in SCALES:
            rng = np.random.default_rng(0)
            w_exact, c_exact = (v * per for v in _time(lambda: exact_fn(scale, args.n, rng), args.reps))
            w_old, c_old = (v * per for v in _time(lambda: old_fn(scale, args.n, rng), args.reps))
            od = None if args.no_opendp else _opendp(kind, scale)
            w_od, c_od = (v * 1e6 / OPENDP_N for v in _time(lambda: od(OPENDP_N), 1)) if od else (None, None)
            rows.append((kind, scale, c_exact, c_old, c_exact / c_old, "-" if c_od is None else c_od,
                         w_exact, w_old, "-" if w_od is None else w_od))
            records.append({"sampler": kind, "scale": scale,
                            "exact_cpu_s_per_1e6": c_exact, "exact_wall_s_per_1e6": w_exact,
                            "old_float_cpu_s_per_1e6": c_old, "old_float_wall_s_per_1e6": w_old,
                            "cpu_slowdown_vs_old": c_exact / c_old,
                            "opendp_cpu_s_per_1e6_from_1e4": c_od, "opendp_wall_s_per_1e6_from_1e4": w_od})
    print_table(["sampler", "sigma/scale", "exact cpu", "old float cpu", "x old", "OpenDP cpu*",
                 "exact wall", "old wall", "OpenDP wall*"], rows)
    print(f"seconds per 1e6 draws, median of {args.reps}; *OpenDP: one run of {OPENDP_N} draws x {1e6 / OPENDP_N:.0f}")
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f} (2 cores shared: timings are noisy)")
    write_json("noise_samplers", {
        "n": args.n, "reps": args.reps,
        "timing": "median of reps, seconds per 1e6 draws; process CPU time and wall time",
        "opendp_note": f"OpenDP timed once on {OPENDP_N} draws and multiplied by {1e6 / OPENDP_N:.0f}",
        "load_average_before": load_before[0], "load_average_after": load_after[0],
        "contention": "shared 2-core machine with several agents running; compare within this run",
        "results": records})


if __name__ == "__main__":
    main()
