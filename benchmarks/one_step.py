"""The one-step paper's simulations (Awan and Cai), plus a row of method ``one-step`` on NIST.

Run: ``python -m benchmarks.one_step [--quick] [--only burr,loglinear,beta,tulap]``.
Prints one table per experiment, writes ``benchmarks/results/one_step.json`` and PNG
figures where the paper has figures (``one_step_loglinear.png``, ``one_step_beta.png``,
``one_step_tulap.png``). Replicate counts are bounded by a time budget per cell; every
proportion comes with its Monte Carlo standard error.

1. Burr XII (2, 4), n = 100 / 1,000 / 10,000: power of the K-S test (level 0.05) against
   the true Burr for the real sample X, the bootstrap Z and the one-step sample Y
   (paper's Table 1: 0.047-0.050, 0.149-0.154, 0.049-0.054).
2. Log-linear on the Maine 1991 table (all two-way interactions, fitted model as truth),
   n = 1e2 .. 1e5: mean squared error of the cell probabilities fitted from X (MLE), Z and Y.
3. DP beta: Beta(5, 3), epsilon 1, n = 1e3 .. 1e6: MSE of (a, b) for the non-private MLE,
   the DP estimator, the bootstrap and one-step samples built from the DP estimate, with the
   noise calibrated for the paper's neighbours (replace one record) and for add/remove.
4. Tulap two-proportion test, n = m = 200, theta_X = 0.3, epsilon 1: p-values under the
   null (KS against uniform) and power against theta_Y, one-step vs bootstrap; ``tulap_level``:
   10,000 null tests at 300 and 1,000 Monte Carlo draws, whether the test holds its level.
The method's releases beside pgm, sds and the baseline: ``benchmarks/one_step_releases.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any, Callable

import numpy as np
from scipy import stats

from benchmarks._common import RESULTS, print_table, write_json
from dpsynth.onestep.dp import dp_beta
from dpsynth.onestep.engine import one_step
from dpsynth.onestep.families import Beta, BurrXII, burr_cdf, burr_quantile
from dpsynth.onestep.loglinear import LogLinear
from dpsynth.onestep.tulap import release_counts, two_proportions_test

MAINE = np.array([7287, 996, 11587, 759, 3246, 973, 6134, 757,
                  10381, 812, 10969, 380, 6123, 1084, 6693, 513], dtype=float).reshape(2, 2, 2, 2)
PAPER_TABLE1 = {"X": (0.0471, 0.0464, 0.0503), "Z": (0.1524, 0.1541, 0.1493), "Y": (0.0544, 0.0489, 0.0485)}


def _replicate(run: Callable[[np.random.Generator], Any], rng: np.random.Generator, budget_s: float,
               max_reps: int, min_reps: int = 20) -> list[Any]:
    out, start = [], time.perf_counter()
    while len(out) < max_reps and (len(out) < min_reps or time.perf_counter() - start < budget_s):
        out.append(run(rng))
    return out


def _se(p: float, r: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / r)


# --- 1. Burr ---------------------------------------------------------------------------

def burr(quick: bool) -> dict[str, Any]:
    model, theta = BurrXII(), np.array([2.0, 4.0])
    cdf = lambda x: burr_cdf(x, 2.0, 4.0)  # noqa: E731
    rows, out = [], {}
    for i, n in enumerate((100, 1000, 10000)):
        def run(rng: np.random.Generator) -> tuple[bool, bool, bool]:
            x = burr_quantile(rng.random(n), 2.0, 4.0)
            r = one_step(model, model.estimate(x), model.seed(n, rng))
            return tuple(stats.kstest(s, cdf).pvalue < 0.05 for s in (x, r.bootstrap, r.sample))
        res = np.array(_replicate(run, np.random.default_rng(100 + n), 15 if quick else 70, 10000))
        power = res.mean(axis=0)
        reps = len(res)
        out[str(n)] = {"replicates": reps, **{k: {"power": float(p), "mc_se": _se(p, reps), "paper": PAPER_TABLE1[k][i]}
                                              for k, p in zip("XZY", power)}}
        rows.append([n, reps] + [f"{p:.3f} ± {_se(p, reps):.3f} ({PAPER_TABLE1[k][i]:.3f})"
                                 for k, p in zip("XZY", power)])
    print("\n1. Burr XII (2, 4): K-S power at 0.05, ours ± MC s.e. (paper's Table 1)")
    print_table(["n", "reps", "real X", "bootstrap Z", "one-step Y"], rows)
    return out


# --- 2. Log-linear ----------------------------------------------------------------------

def loglinear(quick: bool) -> dict[str, Any]:
    model = LogLinear(shape=MAINE.shape)
    truth = model.table(model.theta_of(MAINE / MAINE.sum()))
    rows, out = [], {}
    for n in (100, 1000, 10000, 100000):
        def run(rng: np.random.Generator) -> tuple[float, float, float]:
            x = model.sample_table(truth, rng.random(n))
            theta_hat = model.estimate(x)
            r = one_step(model, theta_hat, model.seed(n, rng))
            fitted = [model.table(t) for t in (theta_hat, r.theta_z, model.estimate(r.sample))]
            return tuple(float(np.sum((p - truth) ** 2)) for p in fitted)
        res = np.array(_replicate(run, np.random.default_rng(200 + n), 5 if quick else 25, 200))
        mse, se = res.mean(axis=0), res.std(axis=0, ddof=1) / math.sqrt(len(res))
        out[str(n)] = {"replicates": len(res), **{k: {"mse": float(m), "mc_se": float(s)}
                                                  for k, m, s in zip(("mle", "bootstrap", "one_step"), mse, se)}}
        rows.append([n, len(res)] + [f"{m:.3g} ± {s:.1g}" for m, s in zip(mse, se)]
                    + [f"{mse[1] / mse[0]:.2f}", f"{mse[2] / mse[0]:.2f}"])
    print("\n2. Log-linear, Maine 1991 (fitted all-two-way model as truth): MSE of cell probabilities")
    print_table(["n", "reps", "MLE", "bootstrap", "one-step", "boot/MLE", "one-step/MLE"], rows)
    print("   (paper's Figure 1(a): one-step approaches the MLE; the bootstrap stays about 2x above)")
    _plot_lines(out, ("mle", "bootstrap", "one_step"), "mse", "n", "mean squared error",
                "Log-linear (Maine 1991)", "one_step_loglinear.png")
    return out


# --- 3. DP beta -------------------------------------------------------------------------

def dp_beta_sim(quick: bool) -> dict[str, Any]:
    """The paper's setting replaces one record with n public: the two centred sums move by
    2 Delta in l1, so ``dp`` uses ``neighbours="replace-one"``; ``dp_add_remove`` is the
    calibration the method ``one-step`` uses (add/remove, half the noise), shown beside it."""
    truth, eps = np.array([5.0, 3.0]), 1.0
    model = Beta(lower=1.0)
    rows, out = [], {}
    names = ("mle", "dp", "bootstrap", "one_step", "dp_add_remove", "one_step_add_remove")
    for n in (1000, 10000, 100000, 1000000):
        def run(rng: np.random.Generator) -> tuple[float, ...]:
            x = rng.beta(5.0, 3.0, n)
            ests = [model.estimate(x)]
            for neighbours in ("replace-one", "add-remove"):
                dp = dp_beta(x, eps, n, rng, neighbours=neighbours)
                theta_dp = np.array([dp.a, dp.b])
                r = one_step(model, theta_dp, model.seed(n, rng))
                ests += [theta_dp, r.theta_z, model.estimate(r.sample)]
            ests = ests[:4] + [ests[4], ests[6]]  # the add/remove bootstrap is not reported
            return tuple(float(np.sum((e - truth) ** 2)) for e in ests)
        budget = (6 if quick else 35) if n < 10**6 else (10 if quick else 60)
        res = np.array(_replicate(run, np.random.default_rng(300 + n), budget, 200, min_reps=5 if quick else 20))
        mse, se = res.mean(axis=0), res.std(axis=0, ddof=1) / math.sqrt(len(res))
        out[str(n)] = {"replicates": len(res), **{k: {"mse": float(m), "mc_se": float(s)} for k, m, s in zip(names, mse, se)}}
        rows.append([n, len(res)] + [f"{m:.3g} ± {s:.1g}" for m, s in zip(mse, se)] + [f"{mse[3] / mse[1]:.2f}"])
    print("\n3. DP beta, Beta(5, 3), epsilon 1: MSE of (a, b); DP calibrated for replace-one (the paper's "
          "neighbours) and, last two, for add/remove")
    print_table(["n", "reps", "MLE", "DP", "bootstrap", "one-step", "DP add/remove", "one-step add/remove",
                 "one-step/DP"], rows)
    print("   (paper's Figure 1(b): DP and one-step reach the MLE's curve; the bootstrap does not)")
    _plot_lines(out, ("mle", "dp", "bootstrap", "one_step"), "mse", "n", "mean squared error of (a, b)",
                "DP beta, Beta(5, 3), epsilon 1 (replace-one)", "one_step_beta.png")
    out["neighbours"] = ("dp, bootstrap, one_step: replace one record, n public (the paper's setting, joint l1 "
                         "sensitivity 2 Delta); *_add_remove: add or remove one record (Delta; the method's calibration)")
    return out


def tulap_level(quick: bool) -> dict[str, Any]:
    """Does the one-step Tulap test hold its level? Many null tests (theta_X = theta_Y = 0.3,
    n = m = 200, epsilon 1) at the quick and the full Monte Carlo size; the rate of p <= 0.05
    with its standard error and an exact binomial test of rate = 0.05."""
    n = m = 200
    eps, theta = 1.0, 0.3
    out: dict[str, Any] = {}
    rows = []
    for reps_mc, seed in ((300, 600), (1000, 601)):
        rng = np.random.default_rng(seed)
        tests = 2000 if quick else 10000
        p = np.empty((tests, 2))
        for i in range(tests):
            xn, yn = release_counts(rng.binomial(n, theta), n, rng.binomial(m, theta), m, eps, rng)
            r = two_proportions_test(xn, n, yn, m, eps, rng, replicates=reps_mc)
            p[i] = (r.p_one_step, r.p_bootstrap)
        cell: dict[str, Any] = {"tests": tests}
        for j, name in enumerate(("one_step", "bootstrap")):
            hits = int(np.sum(p[:, j] <= 0.05))
            rate = hits / tests
            exact = stats.binomtest(hits, tests, 0.05).pvalue
            cell[name] = {"rejection_rate_0.05": rate, "mc_se": _se(rate, tests), "binomial_p_vs_0.05": float(exact)}
            rows.append([reps_mc, tests, name, f"{rate:.4f} ± {_se(rate, tests):.4f}", f"{exact:.2g}"])
        out[str(reps_mc)] = cell
    print(f"\n4b. Tulap test under H0 (theta = 0.3, n = m = 200, epsilon 1): P(p <= 0.05)")
    print_table(["MC replicates", "tests", "p-value", "P(p <= 0.05)", "binomial p vs 0.05"], rows)
    return out


# --- 4. Tulap test ----------------------------------------------------------------------

def tulap_sim(quick: bool) -> dict[str, Any]:
    n = m = 200
    eps, theta_x = 1.0, 0.3
    reps_mc = 300 if quick else 1000

    def pvalues(theta_y: float, count: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(count):
            xn, yn = release_counts(rng.binomial(n, theta_x), n, rng.binomial(m, theta_y), m, eps, rng)
            r = two_proportions_test(xn, n, yn, m, eps, rng, replicates=reps_mc)
            out.append((r.p_one_step, r.p_bootstrap))
        return np.array(out)

    null = pvalues(theta_x, 300 if quick else 2000, 400)
    res: dict[str, Any] = {"null": {"tests": len(null), "mc_replicates_per_test": reps_mc}}
    rows = []
    for j, name in enumerate(("one_step", "bootstrap")):
        ks = stats.kstest(null[:, j], "uniform")
        size = float(np.mean(null[:, j] <= 0.05))
        res["null"][name] = {"ks_statistic": float(ks.statistic), "ks_pvalue": float(ks.pvalue),
                             "rejection_rate_0.05": size, "mc_se": _se(size, len(null))}
        rows.append([name, f"{ks.statistic:.3f}", f"{ks.pvalue:.2g}", f"{size:.3f} ± {_se(size, len(null)):.3f}"])
    print(f"\n4. Tulap test, n = m = 200, theta_X = 0.3, epsilon 1: p-values under H0 ({len(null)} tests)")
    print_table(["p-value", "KS D vs U(0,1)", "KS p", "P(p <= 0.05)"], rows)
    grid = np.round(np.arange(0.30, 0.5001, 0.025), 3)
    power_rows, power = [], {}
    for i, ty in enumerate(grid):
        pv = pvalues(float(ty), 150 if quick else 600, 500 + i)
        pw = (pv <= 0.05).mean(axis=0)
        power[str(ty)] = {"one_step": float(pw[0]), "bootstrap": float(pw[1]), "tests": len(pv)}
        power_rows.append([f"{ty:.3f}", len(pv), f"{pw[0]:.3f} ± {_se(pw[0], len(pv)):.3f}",
                           f"{pw[1]:.3f} ± {_se(pw[1], len(pv)):.3f}"])
    res["power"] = power
    print("   power at level 0.05 (paper's Figure 2(b): one-step above the bootstrap)")
    print_table(["theta_Y", "tests", "one-step", "bootstrap"], power_rows)
    _plot_tulap(null, grid, power)
    return res


# --- plots ------------------------------------------------------------------------------

def _can_plot() -> bool:
    """matplotlib is not a dependency of dpsynth: without it the figures are skipped, the
    numbers are still written."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("   (matplotlib is not installed: figure not redrawn)")
        return False
    return True


def _plot_lines(out: dict[str, Any], keys: tuple[str, ...], field: str, xlabel: str, ylabel: str,
                title: str, filename: str) -> None:
    if not _can_plot():
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = sorted(int(k) for k in out)
    fig, ax = plt.subplots(figsize=(5, 4))
    for k in keys:
        ax.loglog(ns, [out[str(n)][k][field] for n in ns], marker="o", label=k.replace("_", "-"))
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend()
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(RESULTS / filename, dpi=110)
    plt.close(fig)


def _plot_tulap(null: np.ndarray, grid: np.ndarray, power: dict[str, Any]) -> None:
    if not _can_plot():
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 4))
    u = np.linspace(0, 1, 201)
    for j, name in enumerate(("one-step", "bootstrap")):
        a.plot(u, [(null[:, j] <= v).mean() for v in u], label=name)
        b.plot(grid, [power[str(t)][name.replace("-", "_")] for t in grid], marker="o", label=name)
    a.plot(u, u, "k:", label="U(0, 1)")
    a.set(xlabel="p", ylabel="empirical CDF of p-values", title="H0: theta_X = theta_Y = 0.3")
    b.set(xlabel="theta_Y", ylabel="power at 0.05", title="theta_X = 0.3, n = m = 200, eps 1")
    a.legend()
    b.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "one_step_tulap.png", dpi=110)
    plt.close(fig)


EXPERIMENTS = {"burr": burr, "loglinear": loglinear, "beta": dp_beta_sim, "tulap": tulap_sim,
               "tulap_level": tulap_level}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small time budgets (smoke test)")
    ap.add_argument("--only", default=",".join(EXPERIMENTS), help="comma-separated subset")
    args = ap.parse_args()
    results: dict[str, Any] = {}
    for name in args.only.split(","):
        t0 = time.perf_counter()
        results[name] = EXPERIMENTS[name](args.quick)
        results[name + "_seconds"] = time.perf_counter() - t0
        print(f"   ({name}: {results[name + '_seconds']:.0f} s)")
    name = "one_step" + ("_quick" if args.quick else "")
    previous = RESULTS / f"{name}.json"
    if previous.is_file():  # a partial run (--only) updates the other experiments' numbers in place
        old = json.loads(previous.read_text())
        old.pop("machine", None)
        results = {**old, **results}
    write_json(name, {**results, "quick": args.quick})


if __name__ == "__main__":
    main()
