"""Cost of the exact noise samplers (issue 23, section 6) against the float ones they replaced.

Seconds per 1e6 draws of ``discrete_gaussian`` and ``discrete_laplace`` (exact: CKS 2020
Algorithms 1-3 on integers, dpsynth/privacy/exact.py) at several scales, beside a private
copy of the float samplers dpsynth used before (``rng.geometric`` and an ``np.exp``
acceptance: close to, not exactly, the stated law) and OpenDP's exact samplers (not
seedable; timed on 1e4 draws and extrapolated to 1e6: said so in the output).
Each time is the median of ``--reps`` runs in this process. The machine is shared: the
load average before and after is recorded; compare columns of one run, not across runs.

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


def _time(fn: Callable[[], object], reps: int) -> float:
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


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
            t_exact = _time(lambda: exact_fn(scale, args.n, rng), args.reps) * per
            t_old = _time(lambda: old_fn(scale, args.n, rng), args.reps) * per
            od = None if args.no_opendp else _opendp(kind, scale)
            t_od = _time(lambda: od(OPENDP_N), 1) * (1e6 / OPENDP_N) if od else None
            rows.append((kind, scale, t_exact, t_old, t_exact / t_old, "-" if t_od is None else t_od))
            records.append({"sampler": kind, "scale": scale, "exact_s_per_1e6": t_exact,
                            "old_float_s_per_1e6": t_old, "slowdown_vs_old": t_exact / t_old,
                            "opendp_s_per_1e6_extrapolated_from_1e4": t_od})
    print_table(["sampler", "sigma/scale", "exact s/1e6", "old float s/1e6", "x old",
                 f"OpenDP s/1e6 (from {OPENDP_N})"], rows)
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f} (2 cores shared: timings are noisy)")
    write_json("noise_samplers", {
        "n": args.n, "reps": args.reps, "timing": "median of reps, seconds per 1e6 draws",
        "opendp_note": f"OpenDP timed once on {OPENDP_N} draws and multiplied by {1e6 / OPENDP_N:.0f}",
        "load_average_before": load_before[0], "load_average_after": load_after[0],
        "contention": "shared 2-core machine with several agents running; compare within this run",
        "results": records})


if __name__ == "__main__":
    main()
