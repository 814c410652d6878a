"""Marginal correction (post-processing) applied to the ``sds`` output on NIST national2019.

For epsilon 4 and 1: measure with ``sds`` (reporting length 3), synthesize, then apply
the pipeline's ``correct_marginals`` option (reweight the synthetic rows towards the
measurement's DP marginals with the QP of dpsynth.postprocess.correction, then resample). TVD by
marginal size against the real data before and after, and the correction's wall time.
The sds measurement exposes its DP 1-way marginals as dense tables; its 2- and 3-way
aggregates are sparse tuples that leave empty cells out, so they are not used as
targets here.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import SHARED_DATA, print_table, write_json  # noqa: E402
from dpsynth.rows.encoding import encode, read_table  # noqa: E402
from dpsynth.methods import get_method  # noqa: E402
from dpsynth.evaluation.metrics import tvd_by_k  # noqa: E402
from dpsynth.pipeline import correct_to_measurement  # noqa: E402
from dpsynth.privacy import Budget, Ledger  # noqa: E402
from dpsynth.schema import load_schema  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    data = SHARED_DATA / "nist" / "national2019.csv"
    if not data.exists():
        raise SystemExit(f"{data} is absent")
    schema = load_schema(ROOT / "schemas" / "nist.yaml")
    real = encode(read_table(data, schema), schema)
    rows, results = [], []
    for eps in (4.0, 1.0):
        rng = np.random.default_rng(int(eps * 1000))
        method = get_method("sds", {"reporting_length": "3"})
        budget = Budget(epsilon=eps, delta=1e-6)
        m = method.measure(real, Ledger(budget, method.plan(schema, budget)), rng)
        synth = method.synthesize(m, schema, None, rng)
        t0 = time.perf_counter()
        fixed = correct_to_measurement(synth, m, rng)
        seconds = time.perf_counter() - t0
        before = tvd_by_k(real.codes, synth.codes, schema.cardinalities, (1, 2, 3))
        after = tvd_by_k(real.codes, fixed.codes, schema.cardinalities, (1, 2, 3))
        for label, t in (("sds", before), ("sds + correction", after)):
            rows.append([eps, label, t[1]["mean"], t[1]["max"], t[2]["mean"], t[2]["max"], t[3]["mean"], t[3]["max"],
                         seconds if label != "sds" else 0.0])
        results.append({"epsilon": eps, "before": before, "after": after, "correction_seconds": seconds,
                        "targets": [list(k) for k in m.marginals]})
    print("marginal correction on sds output, NIST national2019 (27,253 x 24), targets: DP 1-way marginals")
    print_table(["eps", "synthetic", "tvd1 mean", "tvd1 max", "tvd2 mean", "tvd2 max", "tvd3 mean", "tvd3 max",
                 "correct s"], rows)
    write_json("correction_on_sds", {"data": "national2019", "results": results})


if __name__ == "__main__":
    main()
