"""Benchmark: sds synthesis whole (one table) against chunked (issue 25), same measurement.

A generated 20-column table (benchmarks/sds_matrix.py's random Bayesian network, 2..10
categories, 20% numeric, 10% structural missing cells) of ``--rows`` records is measured
once by ``sds`` (epsilon 1); its release-size synthetic table is then drawn twice from
that measurement: whole (the sampler, refit and raking over the whole table, as before
chunking) and chunked (:mod:`dpsynth.methods.sds.chunked`, chunks of
``chunk_rows_for(20)`` records; ``--chunk-rows`` forces another size). Reported per cell:
the gate's verdict (sds_matrix.gate_verdict), the mean TVD of the 1-, 2- and 3-way
marginals against the real table, CPU seconds and the peak RSS growth of synthesis
(ru_maxrss, measured in a fresh process per draw), and the load average. The pre-spend
guard is off (what would the gate say?). ``--table scale`` draws benchmarks/scale.py's
table (20 columns sharing one latent factor) instead; ``--refit`` lists the refits to
compare (``dpsynth.methods.sds.method.REFIT_MODE``: reweight, update, finish), each cell
in its own process.

    python benchmarks/sds_chunked.py --rows 200000,600000
    python benchmarks/sds_chunked.py --table scale --rows 1000000 --hows chunked --refit finish
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


def _table(rows: int, seed: int, kind: str = "gen"):
    """``gen``: sds_matrix's random network (generator seed 7100 + seed); ``scale``:
    benchmarks/scale.py's table (20 columns sharing one latent factor; seed 2026 + seed,
    so seed 0 is the table scale.py releases)."""
    from benchmarks.sds_matrix import Table, make_table

    if kind == "scale":
        from benchmarks.scale import _piece, schema as scale_schema
        from dpsynth.rows.encoding import encode

        sch = scale_schema()
        return Table(f"scale:{rows}x20", "generated", "held-out", sch,
                     encode(_piece(rows, np.random.default_rng(2026 + seed)), sch).codes)
    schema, codes = make_table(rows, 20, 10, 0.2, 0.1, seed=7100 + seed, name="chunked")
    return Table(f"gen:{rows}x20", "generated", "held-out", schema, codes)


def child(rows: int, how: str, seed: int, chunk_rows: int | None, kind: str = "gen") -> dict:
    """One draw in this process: measure, then synthesize whole or chunked; scores."""
    from benchmarks.sds_matrix import DELTA, gate_verdict, score
    from dpsynth.methods.sds import SdsMethod, chunked
    from dpsynth.privacy.budget import Budget, Ledger
    from dpsynth.rows.encoding import EncodedTable

    import dpsynth.methods.sds.method as sds_method

    sds_method.REFIT_MODE = os.environ.get("SDS_REFIT", "reweight")
    import dpsynth.methods.sds.guard as guard

    guard.MIN_PAIR_THRESHOLD = guard.MIN_PAIR_THRESHOLD_EXPANDED = 0.0  # the pre-spend refusal off: what would the gate say?
    table = _table(rows, seed, kind)
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
    from benchmarks.sds_matrix import gate_margins

    margins = gate_margins(synth, m, np.random.default_rng(0))
    return {"table": kind, "rows": rows, "how": how, "seed": seed, "refit": sds_method.REFIT_MODE, "synth_rows": int(codes.shape[0]), "published": ok,
            "failed": failed, **{k: v for k, v in margins.items() if k.startswith("max_ratio")}, **{k: round(v, 5) for k, v in score(table, synth.codes).items()},
            "synth_cpu_s": round(cpu, 1), "synth_wall_s": round(wall, 1),
            "peak_rss_mb": round(peak / 1024), "synth_rss_growth_mb": round((peak - base) / 1024),
            "loadavg": list(os.getloadavg())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="200000")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--hows", default="whole,chunked")
    ap.add_argument("--chunk-rows", type=int, default=0)
    ap.add_argument("--out", default="sds_chunked", help="results/<out>.json")
    ap.add_argument("--table", choices=["gen", "scale"], default="gen")
    ap.add_argument("--refit", default="reweight,update", help="sds refits to compare (REFIT_MODE)")
    ap.add_argument("--child", nargs=3)
    args = ap.parse_args()
    if args.child:
        rows, how, seed = args.child
        print(json.dumps(child(int(rows), how, int(seed), args.chunk_rows or None, args.table)))
        return
    cells = []
    for rows in (int(x) for x in args.rows.split(",")):
        for seed in (int(s) for s in args.seeds.split(",")):
            for how, refit in ((h, r) for h in args.hows.split(",") for r in args.refit.split(",")):
                cmd = ["nice", sys.executable, __file__, "--child", str(rows), how, str(seed),
                       "--chunk-rows", str(args.chunk_rows), "--table", args.table]
                env = {**os.environ, "PYTHONPATH": str(ROOT), "SDS_REFIT": refit}
                out = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if out.returncode:
                    cells.append({"rows": rows, "how": how, "refit": refit, "seed": seed, "error": out.stderr[-400:]})
                else:
                    cells.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(json.dumps(cells[-1]), flush=True)
    headers = ["rows", "how", "refit", "seed", "published", "k2 ratio", "k3 ratio", "tvd1", "tvd2", "tvd3", "cpu s", "wall s", "RSS growth MB",
               "load"]
    print_table(headers, [[c["rows"], c["how"], c.get("refit", ""), c["seed"], c.get("published", c.get("error", "")[:40]),
                           c.get("max_ratio_k2", ""), c.get("max_ratio_k3", ""),
                           c.get("tvd1", ""), c.get("tvd2", ""), c.get("tvd3", ""), c.get("synth_cpu_s", ""),
                           c.get("synth_wall_s", ""), c.get("synth_rss_growth_mb", ""),
                           f"{c['loadavg'][0]:.1f}" if "loadavg" in c else ""] for c in cells])
    write_json(args.out, {"epsilon": 1.0, "columns": 20, "table": args.table, "cells": cells})


if __name__ == "__main__":
    main()
