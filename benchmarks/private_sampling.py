"""Benchmark: private sampling (dpsynth.methods.private_sampling) as the reduced space grows.

Two Boolean tables, d = 2:
  * asia: ../shared/data/asia/asia.csv, 20,000 rows, the 8 yes/no columns as 8 bits;
  * tree24: generated, 20,000 rows x 24 bits from a random tree-shaped Bayesian network
    (seed 0: root ~ Bernoulli(0.3), every other bit copies a random earlier bit and flips
    it with probability drawn from [0.1, 0.4]).
For m = 256 ... 20,000 the script runs Algorithm 2 once in heuristic mode with k = n and
reports: tries until the reduced space is well conditioned, sigma_min / threshold, LP
(shrinkage) and QP (proximal point) wall times, lambda, the epsilon Theorem 12.2 gives
for k = n, and the max / mean absolute error of all 1- and 2-way marginals of the k
synthetic rows against the data. "bootstrap" is the error of k rows resampled from the
data itself: the sampling-noise floor. m is not grown further once a solve takes longer
than --timeout seconds (default 120).

delta = 0.05 and 0.005 (--deltas); Delta = 2^p ||f_n||_inf as in the practical paper
(computed from the rows, so not private: a benchmark choice, not a release setting).

    .venv/bin/python benchmarks/private_sampling.py            # a few minutes on 2 cores
    .venv/bin/python benchmarks/private_sampling.py --max-m 2048

Writes benchmarks/results/private_sampling.json and prints a table.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_table, write_json  # noqa: E402

from dpsynth.methods.private_sampling import (  # noqa: E402
    ConditioningError,
    PrivateSamplingParams,
    empirical_sup_density,
    epsilon_for_k,
    max_k,
    n_walsh,
    private_sample,
)

M_VALUES = [256, 512, 1024, 2048, 5000, 10000, 20000]
D = 2


def shared_data() -> Path | None:
    here = Path(__file__).resolve().parents[2] / "shared" / "data"
    if here.is_dir():
        return here
    env = os.environ.get("DPSYNTH_SHARED_DATA")
    return Path(env) if env and Path(env).is_dir() else None


def load_asia() -> np.ndarray | None:
    root = shared_data()
    if root is None:
        return None
    import pandas as pd

    df = pd.read_csv(root / "asia" / "asia.csv", dtype=str, keep_default_na=False)
    return (df == "yes").to_numpy(dtype=np.uint8)


def make_tree_table(n: int, p: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = np.empty((n, p), dtype=np.uint8)
    X[:, 0] = rng.random(n) < 0.3
    for j in range(1, p):
        parent = int(rng.integers(0, j))
        flip = rng.uniform(0.1, 0.4)
        X[:, j] = X[:, parent] ^ (rng.random(n) < flip)
    return X


def marginal_errors(Y: np.ndarray, X: np.ndarray) -> dict[str, float]:
    """Max and mean |difference| over all cells of all 1- and 2-way marginals."""
    one = np.abs(Y.mean(axis=0) - X.mean(axis=0))  # the 0-cell differs by the same amount
    two = []
    for i, j in itertools.combinations(range(X.shape[1]), 2):
        cy = np.bincount(2 * Y[:, i] + Y[:, j], minlength=4) / len(Y)
        cx = np.bincount(2 * X[:, i] + X[:, j], minlength=4) / len(X)
        two.append(np.abs(cy - cx))
    two_arr = np.concatenate(two)
    return {"err1_max": float(one.max()), "err1_mean": float(one.mean()), "err2_max": float(two_arr.max()), "err2_mean": float(two_arr.mean())}


def run_dataset(name: str, X: np.ndarray, delta: float, m_values: list[int], timeout: float, seed: int) -> dict[str, Any]:
    n, p = X.shape
    finf = empirical_sup_density(X)
    Delta = max(2.0**p * finf, 1.0 + 2 * delta)
    L = n_walsh(p, D)
    boot = marginal_errors(X[np.random.default_rng(seed).integers(0, n, size=n)], X)
    rows: list[dict[str, Any]] = []
    stopped = None
    for m in m_values:
        eps = epsilon_for_k(n, p, D, m, delta, Delta, n)
        row: dict[str, Any] = {"m": m, "epsilon_for_k_eq_n": eps, "max_k_at_eps_1": max_k(n, p, D, m, delta, Delta, 1.0)}
        if m < L:
            row["skipped"] = f"m < L = {L}: never well conditioned"
            rows.append(row)
            print(f"[{name}] m={m}: skipped (m < L = {L})", flush=True)
            continue
        params = PrivateSamplingParams(d=D, m=m, delta=delta, Delta=Delta, k=n, gamma=0.1, max_tries=20, heuristic=True)
        t0 = time.perf_counter()
        try:
            res = private_sample(X, params, np.random.default_rng([seed, m]))
        except ConditioningError as exc:
            row["skipped"] = str(exc)
            rows.append(row)
            continue
        diag = res.diagnostics
        row.update(
            tries=diag.conditioning_tries,
            sigma_min=diag.sigma_min,
            sigma_threshold=diag.sigma_threshold,
            lp_seconds=diag.lp_seconds,
            qp_seconds=diag.qp_seconds,
            total_seconds=time.perf_counter() - t0,
            lam=diag.lam,
            lp_status=diag.lp_status,
            qp_status=diag.qp_status,
            **marginal_errors(res.samples, X),
        )
        rows.append(row)
        print(
            f"[{name}] m={m}: LP {diag.lp_seconds:.1f}s QP {diag.qp_seconds:.1f}s lambda={diag.lam:.3f} "
            f"err2_max={row['err2_max']:.4f}",
            flush=True,
        )
        if max(diag.lp_seconds, diag.qp_seconds) > timeout:
            stopped = f"stopped after m = {m}: a solve took more than {timeout:.0f} s"
            break
    return {
        "n": n,
        "p": p,
        "d": D,
        "n_walsh": L,
        "delta": delta,
        "Delta": Delta,
        "f_inf": finf,
        "bootstrap_errors": boot,
        "rows": rows,
        "stopped": stopped,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-m", type=int, default=max(M_VALUES))
    ap.add_argument("--timeout", type=float, default=120.0, help="stop growing m after a solve this slow (s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--p", type=int, default=24, help="bits of the generated table (20-30)")
    ap.add_argument("--deltas", default="0.05,0.005", help="comma-separated delta values")
    args = ap.parse_args(argv)
    m_values = [m for m in M_VALUES if m <= args.max_m]
    datasets: dict[str, np.ndarray] = {}
    asia = load_asia()
    if asia is None:
        print("asia: ../shared/data absent, skipped")
    else:
        datasets["asia"] = asia
    datasets[f"tree{args.p}"] = make_tree_table(20_000, args.p, args.seed)
    results: dict[str, Any] = {}
    t_all = time.perf_counter()
    deltas = [float(v) for v in args.deltas.split(",")]
    for name, X in datasets.items():
        for delta in deltas:
            key = f"{name} delta={delta:g}"
            results[key] = run_dataset(key, X, delta, m_values, args.timeout, args.seed)
    headers = ["data", "m", "tries", "sig/thr", "LP s", "QP s", "lambda", "eps(k=n)", "err1 max", "err1 mean", "err2 max", "err2 mean"]
    table = []
    for name, res in results.items():
        for r in res["rows"]:
            if "skipped" in r:
                table.append([name, r["m"], "-", "-", "-", "-", "-", f"{r['epsilon_for_k_eq_n']:.2e}", "skipped: m < L", "", "", ""])
                continue
            table.append(
                [
                    name,
                    r["m"],
                    r["tries"],
                    f"{r['sigma_min'] / r['sigma_threshold']:.1f}",
                    f"{r['lp_seconds']:.2f}",
                    f"{r['qp_seconds']:.2f}",
                    f"{r['lam']:.3f}",
                    f"{r['epsilon_for_k_eq_n']:.2e}",
                    f"{r['err1_max']:.4f}",
                    f"{r['err1_mean']:.4f}",
                    f"{r['err2_max']:.4f}",
                    f"{r['err2_mean']:.4f}",
                ]
            )
        b = res["bootstrap_errors"]
        table.append([name, "bootstrap", "", "", "", "", "", "", f"{b['err1_max']:.4f}", f"{b['err1_mean']:.4f}", f"{b['err2_max']:.4f}", f"{b['err2_mean']:.4f}"])
    print()
    print_table(headers, table)
    for name, res in results.items():
        print(f"{name}: n={res['n']} p={res['p']} L={res['n_walsh']} Delta={res['Delta']:.4g}; {res['stopped'] or 'all m done'}")
    write_json(
        "private_sampling",
        {
            "benchmark": "private_sampling",
            "settings": {"d": D, "deltas": deltas, "k": "n", "mode": "heuristic", "m_values": m_values, "timeout_s": args.timeout, "seed": args.seed},
            "wall_seconds": time.perf_counter() - t_all,
            "datasets": results,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
