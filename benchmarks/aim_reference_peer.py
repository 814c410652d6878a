"""The peer side of benchmarks/aim_head_to_head.py: the reference mbi AIM, unmodified.

Runs in the peer's own environment (``/tmp/mbi-venv``: the mbi package of the private-pgm
repository at the commit whose ``mechanisms/aim.py`` it imports; never a dpsynth dependency)
as a subprocess. It imports ``AIM`` from that repository's ``mechanisms/aim.py`` as is
(``--mechanisms`` names the folder) and calls ``AIM(...).run(data, workload)`` with the
script's own defaults (max_model_size 80 MB, max_iters 1000, rounds 16 x columns). It reads
integer codes from an ``.npz`` (codes, names, sizes, rho, seed, epsilon, workload), writes
the synthetic codes (``.npy``) and a JSON line with wall time, peak RSS (VmHWM) and rho.

The only things set from outside the script: the data (a ``Dataset`` built from the codes and
their domain sizes instead of ``Dataset.load`` on a CSV: the same object), the workload (the
parent passes the one its ``__main__`` builds: every ``degree``-way marginal of at most
``max_cells`` cells, weight 1), the seed (the script's ``Mechanism`` draws from the global
``np.random``: ``AIM.__init__`` passes ``prng`` into the ``bounded`` slot, so ``np.random.seed``
is what seeds it) and ``rho``: the parent's zCDP rho (dpsynth's conversion of (epsilon, delta))
replaces the script's ``cdp_rho(epsilon, delta)`` so that both sides spend exactly the same
rho; both values are printed.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from pathlib import Path

import numpy as np


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1]) / 1024.0
    return float("nan")


def main(argv: list[str]) -> int:
    """``aim_reference_peer.py MECHANISMS_DIR SRC.npz DST.npy [aim|jam]``: run the reference AIM
    (or JAM, with its script's defaults and the public codes in ``SRC``) once."""
    mech_dir, src, dst = Path(argv[1]), Path(argv[2]), Path(argv[3])
    which = argv[4] if len(argv) > 4 else "aim"
    sys.path.insert(0, str(mech_dir))
    import pandas as pd
    from mbi import Dataset, Domain

    z = np.load(src, allow_pickle=False)
    names = [str(n) for n in z["names"]]
    domain = Domain(names, [int(s) for s in z["sizes"]])
    data = Dataset(pd.DataFrame(z["codes"].astype(np.int64), columns=names), domain)
    np.random.seed(int(z["seed"]))
    if which == "jam":  # jam.py's __main__: degree-3 workload, its default parameters, public data
        from jam import JAM, all_k_way  # the reference script, imported unmodified

        mech = JAM(float(z["epsilon"]), float(z["delta"]))
        public = Dataset(pd.DataFrame(z["public"].astype(np.int64), columns=names), domain)
        args = (data, public, all_k_way(domain.attrs, mech.degree))
    else:
        from aim import AIM  # the reference script, imported unmodified

        mech = AIM(float(z["epsilon"]), float(z["delta"]))
        args = (data, [(tuple(names[j] for j in cl), 1.0) for cl in z["workload"].tolist()])
    script_rho = float(mech.rho)
    mech.rho = float(z["rho"])
    t0 = time.perf_counter()
    log = io.StringIO()
    with contextlib.redirect_stdout(log):  # the script prints every round
        model, synth = mech.run(*args)
    wall = time.perf_counter() - t0
    rounds = sum(1 for line in log.getvalue().splitlines() if line.startswith(("Measuring Clique", "Round")))
    codes = synth.df[names].to_numpy(dtype=np.int64)
    np.save(dst, codes)
    print(json.dumps({"wall_s": wall, "peak_mb": _peak_mb(), "rows": int(codes.shape[0]), "rho": mech.rho,
                      "script_rho": script_rho, "rounds": rounds, "cliques": len(model.cliques)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
