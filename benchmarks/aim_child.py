"""The process of ours in benchmarks/aim_head_to_head.py: one run of a dpsynth method on a cell's codes.

``python benchmarks/aim_child.py PARAMS SRC DST`` reads the cell (``SRC``, the ``.npz`` that
``aim_head_to_head.write_cell_input`` writes for the peer, and beside it the same codes as
``.npy`` and the names, sizes, seed, epsilon, delta and rho as JSON: :func:`plain_input`), runs the method,
writes the synthetic codes to ``DST`` and prints one JSON line (wall time, peak RSS, rows, rho).
Its peak RSS (VmHWM) is the figure the head-to-head compares with mbi AIM's process (issue 27
section 2), so this module imports what running the method needs and nothing of the harness:
before, the child was the harness itself (``aim_head_to_head.py --child``), whose imports
(argparse, tempfile and through it shutil, bz2 and lzma, the scoring helpers) and the compiling
of its source as ``__main__`` were part of that peak, and so was numpy's zip reader (benchmarks/import_footprint.py ``--cells``
measures each step; docs/pgm.md, "Where our peak memory goes").
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np


def plain_input(src: Path) -> tuple[Path, Path]:
    """The cell's codes (``.npy``) and the rest (JSON) beside the cell's ``.npz`` (which the peer
    reads): read without numpy's zip reader, whose zipfile, shutil, bz2 and lzma are 0.75 MB."""
    return src.with_name(src.stem + "-codes.npy"), src.with_name(src.stem + "-cell.json")


def child_ours(params: str, src: Path, dst: Path, mark: Callable[[str], None] = lambda step: None) -> None:
    """Run dpsynth pgm with ``params`` on the codes in ``src``; write the synthetic codes to ``dst``.
    A ``"method"`` key in ``params`` names another dpsynth method (``auto``'s other choices).
    ``mark(step)`` is called after each step (benchmarks/import_footprint.py reads the process's
    memory there)."""
    from dpsynth.methods import get_method
    mark("dpsynth.methods")
    from dpsynth.privacy.budget import Budget, Ledger
    mark("dpsynth.privacy.budget")
    from dpsynth.rows.table import EncodedTable
    mark("dpsynth.rows.table")
    from dpsynth.schema import schema_from_dict
    mark("dpsynth.schema")

    z = json.loads(plain_input(src)[1].read_text())
    cols = [{"name": str(n), "type": "categorical", "values": [str(v) for v in range(int(s))]}
            for n, s in zip(z["names"], z["sizes"])]
    schema = schema_from_dict({"name": "aim-h2h", "columns": cols})
    budget = Budget(epsilon=float(z["epsilon"]), delta=float(z["delta"]))
    assert abs(budget.rho - float(z["rho"])) < 1e-12
    rng = np.random.default_rng(int(z["seed"]))
    codes = np.load(plain_input(src)[0], allow_pickle=False).astype(np.uint16, copy=False)
    mark("the codes, the schema, the budget, the generator")
    t0 = time.perf_counter()
    chosen = json.loads(params)
    method = get_method(chosen.pop("method", "pgm"), chosen)
    mark("the method (its modules)")
    ledger = Ledger(budget, method.plan(schema, budget))
    mark("the plan")
    m = method.measure(EncodedTable(schema=schema, codes=codes), ledger, rng)
    mark("measure")
    synth = method.synthesize(m, schema, None, rng)
    mark("synthesize")
    wall = time.perf_counter() - t0
    np.save(dst, synth.codes)  # in the method's own code dtype: the harness scores them as int64
    mark("the synthetic codes written")
    peak = next(float(line.split()[1]) / 1024.0 for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmHWM:"))
    print(json.dumps({"wall_s": wall, "peak_mb": peak, "rows": int(synth.codes.shape[0]), "rho": ledger.rho_spent,
                      "selected": len(m.meta.get("selected", []))}))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's dpsynth
    child_ours(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
