"""The mbi 2.0 side of benchmarks/pgm_vs_mbi.py: MST and AIM written against mbi 2.0's API.

Runs in the benchmark's own environment (``/work/venvs/mbi``: mbi, jax; never a dpsynth
dependency) as a subprocess: it reads integer codes from an ``.npz`` (codes, names,
sizes, rho, seed), writes the synthetic codes (``.npy``) and a JSON line with wall time
and peak RSS. It imports nothing from dpsynth, so both sides share only the codes and
the zCDP budget ``rho`` (the parent converts (epsilon, delta) once, the same way for both).

Following the papers (MST: McKenna, Miklau, Sheldon 2021; AIM: McKenna et al. 2022) and
their reference scripts (written for mbi 1.x); differences from those:

* MST's compressed 1-way measurement gives the merged "rare values" cell the same noise
  scale as the others (mbi 2.0's ``LinearMeasurement`` has one ``stddev``; the paper
  down-weights that cell by 1/sqrt(k)). Decompression draws uniformly among merged values,
  as the paper does.
* AIM: workload = every 3-way marginal (2-way when fewer than 3 columns), weights 1;
  candidates = its downward closure; max model size 80 MB; 16 d rounds at most;
  ``iters=1000`` per refit and for the final model (the reference script's
  ``max_iters``). The estimate is mbi 2.0's ``MirrorDescent`` in both methods.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from pathlib import Path

import numpy as np


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1]) / 1024.0
    return float("nan")


def _em(scores, eps, sensitivity, rng):
    z = eps * np.asarray(scores, dtype=float) / (2.0 * sensitivity)
    p = np.exp(z - z.max())
    return int(rng.choice(len(p), p=p / p.sum()))


def _measure(mbi, data, cliques, sigma, rng):
    out = []
    for cl in cliques:
        x = data.project(cl).datavector()
        out.append(mbi.LinearMeasurement(x + rng.normal(0, sigma, x.size), tuple(cl), stddev=sigma))
    return out


def mst(mbi, data, rho, rng, iters=(1000, 5000)):
    names = list(data.domain)
    d = len(names)
    sigma1 = math.sqrt(3 * d / (2 * rho))
    log1 = _measure(mbi, data, [(c,) for c in names], sigma1, rng)
    # Compression of rare values (noisy count below 3 sigma), as MST's compress_domain.
    mapping, new_log1 = {}, []
    for m in log1:
        y = np.asarray(m.noisy_measurement)
        sup = y >= 3 * sigma1
        col = m.clique[0]
        if sup.all() or not sup.any():
            new_log1.append(m)
            continue
        mp = np.empty(y.size, dtype=np.int64)
        mp[sup] = np.arange(int(sup.sum()))
        mp[~sup] = int(sup.sum())
        mapping[col] = mp
        new_log1.append(mbi.LinearMeasurement(np.append(y[sup], y[~sup].sum()), (col,), stddev=sigma1))
    cdata = data.compress(mapping) if mapping else data
    est = mbi.estimation.MirrorDescent().estimate(cdata.domain, new_log1, iters=iters[0])
    pairs = list(itertools.combinations(names, 2))
    gap = {p: float(np.abs(cdata.project(p).datavector() - est.project(p).datavector()).sum()) for p in pairs}
    eps = math.sqrt(8 * (rho / 3) / (d - 1))
    comp = {c: c for c in names}

    def find(x):
        while comp[x] != x:
            x = comp[x]
        return x

    chosen = []
    for _ in range(d - 1):
        cand = [p for p in pairs if find(p[0]) != find(p[1])]
        a, b = cand[_em([gap[p] for p in cand], eps, 1.0, rng)]
        comp[find(a)] = find(b)
        chosen.append((a, b))
    sigma2 = math.sqrt(3 * (d - 1) / (2 * rho))
    log2 = _measure(mbi, cdata, chosen, sigma2, rng)
    model = mbi.estimation.MirrorDescent().estimate(cdata.domain, new_log1 + log2, iters=iters[1])
    synth = model.synthetic_data()
    if mapping:
        synth = synth.decompress(mapping)
    return np.column_stack([np.asarray(synth.data[c]) for c in names])


def aim(mbi, data, rho, rng, iters=1000, max_model_mb=80.0):
    names = list(data.domain)
    d = len(names)
    k = min(3, d)
    workload = list(itertools.combinations(names, k))
    cands = sorted({s for w in workload for r in range(1, k + 1) for s in itertools.combinations(w, r)})
    weight = {r: sum(len(set(r) & set(w)) for w in workload) for r in cands}
    sens = max(weight.values())
    T, alpha = 16 * d, 0.9
    sigma = math.sqrt(T / (2 * alpha * rho))
    eps = math.sqrt(8 * (1 - alpha) * rho / T)
    used = 0.0
    log = []
    for c in names:
        log += _measure(mbi, data, [(c,)], sigma, rng)
        used += 1 / (2 * sigma**2)
    md = mbi.estimation.MirrorDescent()
    model = md.estimate(data.domain, log, iters=iters)
    truth = {r: data.project(r).datavector() for r in cands}
    last = False
    while not last:
        if rho - used < 2 * (1 / (2 * sigma**2) + eps**2 / 8):
            remaining = rho - used
            sigma = math.sqrt(1 / (2 * alpha * remaining))
            eps = math.sqrt(8 * (1 - alpha) * remaining)
            last = True
        used += 1 / (2 * sigma**2) + eps**2 / 8
        limit = max_model_mb * used / rho
        cliques = [m.clique for m in log]
        ok = [r for r in cands if mbi.junction_tree.hypothetical_model_size(data.domain, cliques + [r]) <= limit]
        est = {r: model.project(r).datavector() for r in ok}
        scores = [weight[r] * (np.abs(truth[r] - est[r]).sum() - math.sqrt(2 / math.pi) * sigma * truth[r].size)
                  for r in ok]
        r = ok[_em(scores, eps, sens, rng)]
        log += _measure(mbi, data, [r], sigma, rng)
        model = md.estimate(data.domain, log, iters=iters, warm_start=model)
        if np.abs(model.project(r).datavector() - est[r]).sum() <= math.sqrt(2 / math.pi) * sigma * truth[r].size:
            sigma /= 2
            eps *= 2
    synth = model.synthetic_data()
    return np.column_stack([np.asarray(synth.data[c]) for c in names])


def main(argv: list[str]) -> int:
    which, src, dst = argv[1], Path(argv[2]), Path(argv[3])
    import jax

    jax.config.update("jax_enable_x64", True)
    import mbi

    z = np.load(src, allow_pickle=False)
    names = [str(n) for n in z["names"]]
    domain = mbi.Domain.fromdict({n: int(s) for n, s in zip(names, z["sizes"])})
    data = mbi.Dataset({n: z["codes"][:, j].astype(np.int64) for j, n in enumerate(names)}, domain)
    rng = np.random.default_rng(int(z["seed"]))
    t0 = time.perf_counter()
    synth = (mst if which == "mst" else aim)(mbi, data, float(z["rho"]), rng)
    wall = time.perf_counter() - t0
    np.save(dst, synth.astype(np.int64))
    print(json.dumps({"wall_s": wall, "peak_mb": _peak_mb(), "rows": int(synth.shape[0])}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
