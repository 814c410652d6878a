"""Synthesize's writing alone: draw, decode and write ``synthetic-codes.parquet``,
``synthetic.parquet`` and ``synthetic.csv`` for the 20-column table of ``scale.py``.

Runs :func:`dpsynth.pipeline.synthetic.write_synthetic` with a cheap uniform sampler (the
cost measured is decoding, formatting and writing, which dominates synthesize) in a fresh
process per mode, under ``nice``:

* ``serial``: this process, one block after the other;
* ``pool-N``: a pool of N spawned processes (the default for large tables);
* ``dask-N``: a Dask LocalCluster of N single-threaded workers.

Wall seconds, CPU seconds of the process tree (steadier on a shared machine), the peak
resident memory of the tree and the load average at the start of each cell; every mode's
files are compared by sha256 with the serial ones (they must be equal).

    python benchmarks/synth_write.py --rows 2000000 --modes serial,pool-2,dask-2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import print_table, write_json  # noqa: E402

FILES = ("synthetic-codes.parquet", "synthetic.parquet", "synthetic.csv")


class UniformSampler:
    """Every code drawn uniformly and independently (picklable: module level)."""

    def __init__(self, rows: int, cards: tuple[int, ...]) -> None:
        self.rows, self.cards = rows, cards

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` records."""
        return np.column_stack([rng.integers(0, c, n) for c in self.cards])


def child(rows: int, mode: str, out: Path) -> None:
    """One mode in this process; prints RESULT with its wall seconds and digests."""
    from benchmarks.scale import schema
    from dpsynth.pipeline.synthetic import write_synthetic

    s = schema()
    sampler = UniformSampler(rows, tuple(s.cardinalities))
    t0 = time.perf_counter()

    def run(runner=None) -> None:
        write_synthetic(out, s, sampler, np.random.default_rng(1), np.random.default_rng(2),
                        chunk_rows=1 << 20, runner=runner)

    if mode == "serial":
        run()
    elif mode.startswith("pool-"):
        from dpsynth.rows.pool_runner import pool

        with pool(int(mode.split("-")[1])) as runner:
            run(runner)
    else:
        from dpsynth.rows.dask_runner import connect

        with connect(f"local:{int(mode.split('-')[1])}") as runner:
            run(runner)
    wall = time.perf_counter() - t0
    digests = {f: hashlib.sha256((out / f).read_bytes()).hexdigest()[:16] for f in FILES}
    print("RESULT " + json.dumps({"wall_s": round(wall, 2), "digests": digests}), flush=True)


def run_one(rows: int, mode: str, work: Path) -> dict:
    """A mode in a fresh process: wall, CPU of the tree, peak RSS sum, load."""
    from benchmarks.scale import _children_cpu, _sample  # the tree sampler of scale.py

    import threading

    out = work / mode
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    load = os.getloadavg()
    cpu0 = _children_cpu()
    proc = subprocess.Popen(["nice", sys.executable, __file__, "--child", "--rows", str(rows), "--mode", mode,
                             "--out", str(out)], stdout=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    peaks: dict = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(proc, peaks, stop), daemon=True)
    sampler.start()
    stdout, _ = proc.communicate()
    stop.set()
    sampler.join()
    res = {"rows": rows, "mode": mode, "cpu_s": round(_children_cpu() - cpu0, 1),
           "peak_rss_mb_sum": round(peaks.get("sum", 0) / (1 << 20)), "loadavg_before": [round(x, 2) for x in load]}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            res.update(json.loads(line.split(" ", 1)[1]))
    if proc.returncode:
        res["error"] = f"exit {proc.returncode}"
    res["bytes"] = sum((out / f).stat().st_size for f in FILES if (out / f).exists())
    shutil.rmtree(out, ignore_errors=True)
    return res


def main() -> None:
    """Runs the modes and writes benchmarks/results/synth_write.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--modes", default="serial,pool-2,dask-2")
    ap.add_argument("--work", default="/tmp/dpsynth-synth-write")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--mode")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.child:
        child(args.rows, args.mode, Path(args.out))
        return
    results = [run_one(args.rows, m, Path(args.work)) for m in args.modes.split(",")]
    shutil.rmtree(args.work, ignore_errors=True)
    base = next((r.get("digests") for r in results if r["mode"] == "serial"), None)
    for r in results:
        r["same_bytes_as_serial"] = None if base is None else r.get("digests") == base
    print_table(["rows", "mode", "wall s", "CPU s", "peak MB", "same bytes", "load"],
                [[r["rows"], r["mode"], r.get("wall_s", r.get("error")), r["cpu_s"], r["peak_rss_mb_sum"],
                  r["same_bytes_as_serial"], r["loadavg_before"][0]] for r in results])
    write_json("synth_write", {"results": results, "note": "CPU s: user+system of the process tree; "
                               "shared 2-core machine, see the load average"})


if __name__ == "__main__":
    main()
