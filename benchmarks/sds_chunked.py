"""Benchmark: sds synthesis whole (one table) against chunked (issue 25), same measurement.

A generated 20-column table (benchmarks/sds_matrix.py's random Bayesian network, 2..10
categories, 20% numeric, 10% structural missing cells) of ``--rows`` records is measured
once by ``sds`` (epsilon 1); its release-size synthetic table is then drawn twice from
that measurement: whole (the sampler, refit and raking over the whole table, as before
chunking) and chunked (:mod:`dpsynth.methods.sds.chunked`, chunks of
``chunk_rows_for(20)`` records; ``--chunk-rows`` forces another size). Reported per cell:
the gate's verdict (sds_matrix.gate_verdict), the mean TVD of the 1-, 2- and 3-way
marginals against the real table, CPU seconds and the peak RSS growth of synthesis
(ru_maxrss, measured in a fresh process per draw), and the load average.

    python benchmarks/sds_chunked.py --rows 200000,600000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import print_table, write_json  # noqa: E402


def _table(rows: int, seed: int):
    from benchmarks.sds_matrix import Table, make_table

    schema, codes = make_table(rows, 20, 10, 0.2, 0.1, seed=seed, name="chunked")
    return Table(f"gen:{rows}x20", "generated", "held-out", schema, codes)


def child(rows: int, how: str, seed: int, chunk_rows: int | None) -> dict:
    """One draw in this process: measure, then synthesize whole or chunked; scores."""
    from benchmarks.sds_matrix import DELTA, gate_verdict, score
    from dpsynth.methods.sds import SdsMethod, chunked
    from dpsynth.privacy.budget import Budget, Ledger
    from dpsynth.rows.encoding import EncodedTable

    table = _table(rows, 7100 + seed)
    method = SdsMethod()
    budget = Budget(epsilon=1.0, delta=DELTA)
    ledger = Ledger(budget, method.plan(table.schema, budget))
    r_measure, r_synth, r_decode = (np.random.default_rng(s) for s in np.random.SeedSequence([seed, 17]).spawn(3))
    m = method.measure(EncodedTable(schema=table.schema, codes=table.codes), ledger, r_measure)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c0, t0 = time.process_time(), time.perf_counter()
    if how == "whole":
        codes = method.synthesize(m, table.schema, None, r_synth).codes
    else:
        if chunk_rows:
            chunked.chunk_rows_for = lambda columns: int(chunk_rows)  # type: ignore[assignment]
        sampler = method.sampler(m, table.schema, None, r_synth)
        assert isinstance(sampler, chunked.ChunkedSampler), "the release is a single chunk"
        from dpsynth.pipeline.synthetic import block_sizes

        codes = np.concatenate([sampler.sample(n, r_synth) for n in block_sizes(sampler.rows)])
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    synth = EncodedTable(schema=table.schema, codes=np.ascontiguousarray(codes).astype(np.uint8))
    ok, failed = gate_verdict(synth, m, r_decode)
    return {"rows": rows, "how": how, "seed": seed, "synth_rows": int(codes.shape[0]), "published": ok,
            "failed": failed, **{k: round(v, 5) for k, v in score(table, synth.codes).items()},
            "synth_cpu_s": round(cpu, 1), "synth_wall_s": round(wall, 1),
            "peak_rss_mb": round(peak / 1024), "synth_rss_growth_mb": round((peak - base) / 1024),
            "loadavg": list(os.getloadavg())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="200000")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--hows", default="whole,chunked")
    ap.add_argument("--chunk-rows", type=int, default=0)
    ap.add_argument("--child", nargs=3)
    args = ap.parse_args()
    if args.child:
        rows, how, seed = args.child
        print(json.dumps(child(int(rows), how, int(seed), args.chunk_rows or None)))
        return
    cells = []
    for rows in (int(x) for x in args.rows.split(",")):
        for seed in (int(s) for s in args.seeds.split(",")):
            for how in args.hows.split(","):
                cmd = ["nice", sys.executable, __file__, "--child", str(rows), how, str(seed),
                       "--chunk-rows", str(args.chunk_rows)]
                out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
                if out.returncode:
                    cells.append({"rows": rows, "how": how, "seed": seed, "error": out.stderr[-400:]})
                else:
                    cells.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(json.dumps(cells[-1]), flush=True)
    headers = ["rows", "how", "seed", "published", "tvd1", "tvd2", "tvd3", "cpu s", "wall s", "RSS growth MB",
               "load"]
    print_table(headers, [[c["rows"], c["how"], c["seed"], c.get("published", c.get("error", "")[:40]),
                           c.get("tvd1", ""), c.get("tvd2", ""), c.get("tvd3", ""), c.get("synth_cpu_s", ""),
                           c.get("synth_wall_s", ""), c.get("synth_rss_growth_mb", ""),
                           f"{c['loadavg'][0]:.1f}" if "loadavg" in c else ""] for c in cells])
    write_json("sds_chunked", {"epsilon": 1.0, "columns": 20, "cells": cells})


if __name__ == "__main__":
    main()
