"""Encode on a process pool against encode in this process, on the scale benchmark's raw table.

Takes the first ``--files`` Parquet files (about 1M rows and 23 MB each) of the raw folder
that ``benchmarks/scale.py --keep-data`` left in ``--work`` (``raw-<rows>``), and encodes
them with ``dpsynth.rows.encode_parts.encode_to_parts`` twice per count, alternating:
serially (``$DPSYNTH_SYNTH_WORKERS=1``) and as a release would (the pool from
``POOL_MIN_BYTES`` of input). Reports wall and CPU seconds (this process and its children)
and whether both wrote the same bytes of codes. Sets ``POOL_MIN_BYTES`` and shows what it
decides: the pool pays once its wall time is below the serial one.

    python benchmarks/encode_pool.py --work /tmp/lead-scale --rows 10000000 --files 1,2,3,4,10

Writes ``benchmarks/results/encode_pool.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._common import print_table, write_json  # noqa: E402


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def _run(src: Path, out: Path, workers: str) -> tuple[float, float, str]:
    from benchmarks.scale import schema
    from dpsynth.rows.encode_parts import encode_to_parts

    os.environ["DPSYNTH_SYNTH_WORKERS"] = workers
    shutil.rmtree(out, ignore_errors=True)
    t, c = time.perf_counter(), _cpu()
    encode_to_parts(src, schema(), out)
    wall, cpu = time.perf_counter() - t, _cpu() - c
    return wall, cpu, _digest(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="/tmp/dpsynth-scale")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--files", default="1,2,3,4,10")
    args = ap.parse_args()
    raw = Path(args.work) / f"raw-{args.rows}"
    files = sorted(raw.glob("*.parquet"))
    if not files:
        sys.exit(f"no raw table in {raw}: run benchmarks/scale.py --rows {args.rows} --keep-data --work {args.work}")
    from dpsynth.rows.encode_parts import POOL_MIN_BYTES

    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.files.split(",")):
            src = Path(tmp) / f"in-{n}"
            src.mkdir()
            for f in files[:n]:
                os.symlink(f, src / f.name)
            size = sum(f.stat().st_size for f in files[:n])
            serial = _run(src, Path(tmp) / "serial", "1")
            cores = _run(src, Path(tmp) / "pool", "")
            cells.append({"files": n, "input_mb": round(size / 2**20, 1), "pooled": size >= POOL_MIN_BYTES and n > 1,
                          "serial_wall_s": round(serial[0], 2), "serial_cpu_s": round(serial[1], 2),
                          "default_wall_s": round(cores[0], 2), "default_cpu_s": round(cores[1], 2),
                          "same_bytes": serial[2] == cores[2], "load": round(os.getloadavg()[0], 2)})
            print(cells[-1], flush=True)
    print_table(["files", "input MB", "pool", "serial wall", "serial CPU", "default wall", "default CPU", "same", "load"],
                [[c["files"], c["input_mb"], c["pooled"], c["serial_wall_s"], c["serial_cpu_s"], c["default_wall_s"],
                  c["default_cpu_s"], c["same_bytes"], c["load"]] for c in cells])
    write_json("encode_pool", {"pool_min_bytes": POOL_MIN_BYTES, "cells": cells})


if __name__ == "__main__":
    main()
