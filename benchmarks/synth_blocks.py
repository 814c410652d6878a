"""The CPU of the default release's synthetic blocks: drawn, decoded and written, by phase.

Fits the pgm sampler once (``select=aim degree=2``, what ``--method auto`` chose for the
10M x 20 table of ``scale.py``) from a kept release's ``measurement/`` and ``schema.yaml``
(default: the lead's kept 10M release; the script says so and exits 0 when it is absent),
then draws, decodes and writes ``--blocks`` blocks of 65,536 rows into one part's three
files with :func:`dpsynth.pipeline.synthetic._write_blocks`, the pool workers' loop, in
this process. CPU seconds (``time.process_time``) in total and by phase:

* ``sample``: the sampler's ``sample`` (the model's forward sampling, merged values spread);
* ``decode``: codes to values (``decode``, or ``_decoded`` where ``synthetic.py`` has it);
* ``parquet``: ``ParquetWriter.write_table`` of the codes and the values;
* ``csv``: the CSV lines (``write_csv`` or ``csv_block``, whichever ``synthetic.py`` calls);
* ``rest``: everything else (the Arrow tables built and cast, the files written).

The sha256 of each written file is printed and kept: the same seed must give the same
digests before and after a change. Run it from one tree against another's ``dpsynth`` to
compare them (``--label`` names the cell)::

    PYTHONPATH=/tmp/base python benchmarks/synth_blocks.py --label before --cache /tmp/s.pkl
    PYTHONPATH=. python benchmarks/synth_blocks.py --label after --cache /tmp/s.pkl

``--cache`` keeps the fitted sampler pickled (the fit takes ~25 CPU s and is not what is
measured); a cache written by one tree is read by the other only if their classes pickle
alike, so give each tree its own cache when they differ. Cells are appended to
``benchmarks/results/synth_blocks.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "synth_blocks.json"
KEPT = Path("/tmp/lead/prof/ws/releases/2039124ab8946543bd73b9c7f6fd220c")
FILES = ("codes", "values", "csv")


class _Clock:
    """CPU seconds spent inside wrapped callables, by phase (the outermost wrapper counts)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self._inside = False

    def wrap(self, phase: str, fn):
        def timed(*args, **kwargs):
            if self._inside:
                return fn(*args, **kwargs)
            self._inside = True
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[phase] = self.spent.get(phase, 0.0) + time.process_time() - t
                self._inside = False
        return timed


class _TimedSampler:
    """The fitted sampler with its ``sample`` timed (the job's only view of it)."""

    def __init__(self, sampler, clock: _Clock) -> None:
        self.rows = sampler.rows
        self.sample = clock.wrap("sample", sampler.sample)


def fitted(release: Path, cache: Path | None):
    """The pgm sampler of the kept release (from ``cache`` when it holds one) and its fit's CPU s."""
    if cache is not None and cache.is_file():
        with open(cache, "rb") as f:
            return pickle.load(f), 0.0
    from dpsynth.measurement import Measurement
    from dpsynth.methods import get_method
    from dpsynth.schema.parse import load_schema

    t = time.process_time()
    sampler = get_method("pgm", {"select": "aim", "degree": "2"}).sampler(
        Measurement.load(release / "measurement"), load_schema(release / "schema.yaml"), None, np.random.default_rng(1))
    spent = time.process_time() - t
    if cache is not None:
        with open(cache, "wb") as f:
            pickle.dump(sampler, f)
    return sampler, spent


def run(release: Path, blocks: int, cache: Path | None, folder: Path) -> dict:
    """One cell: ``blocks`` blocks drawn, decoded and written; CPU by phase and the files' digests."""
    import pyarrow.parquet as pq

    from dpsynth.pipeline import synthetic as syn
    from dpsynth.schema.parse import load_schema

    schema = load_schema(release / "schema.yaml")
    sampler, fit_s = fitted(release, cache)
    travels = len(pickle.dumps(sampler))  # what a pool worker receives: the sampler before any draw
    clock = _Clock()
    sizes = syn.block_sizes(sampler.rows)[:blocks]
    rng = np.random.default_rng(20261127)
    job = syn.BlockJob(schema=schema, sampler=_TimedSampler(sampler, clock), draw=syn.BlockRngs(rng),
                       values_rng=syn.BlockRngs(rng), sizes=tuple(sizes), chunk_rows=1 << 20,
                       block_rows=syn.BLOCK_ROWS)
    writer_write = pq.ParquetWriter.write_table
    phase_of = {"decode": "decode", "_decoded": "decode", "write_csv": "csv", "csv_block": "csv"}
    patched = {name: getattr(syn, name) for name in phase_of if hasattr(syn, name)}
    pq.ParquetWriter.write_table = clock.wrap("parquet", writer_write)
    for name, fn in patched.items():
        setattr(syn, name, clock.wrap(phase_of[name], fn))
    paths = syn._files(folder, "part-00000")
    try:
        t = time.process_time()
        rows = syn._write_blocks(job, range(len(sizes)), syn._Writers(paths, schema, header=False), report=False)
        total = time.process_time() - t
    finally:
        pq.ParquetWriter.write_table = writer_write
        for name, fn in patched.items():
            setattr(syn, name, fn)
    phases = {p: round(clock.spent.get(p, 0.0), 3) for p in ("sample", "decode", "parquet", "csv")}
    phases["rest"] = round(total - sum(phases.values()), 3)
    digests = {k: hashlib.sha256(paths[k].read_bytes()).hexdigest() for k in FILES}
    return {"blocks": len(sizes), "rows": rows, "cpu_s": round(total, 3), "cpu_s_per_block": round(total / len(sizes), 4),
            "cpu_s_by_phase": phases, "fit_cpu_s": round(fit_s, 1), "sampler_pickle_bytes": travels,
            "sampler_pickle_bytes_after_draws": len(pickle.dumps(sampler)),
            "sha256": digests, "load_1min": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--release", type=Path, default=KEPT, help="a kept release folder (measurement/, schema.yaml)")
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=1, help="cells in a row (the same blocks again)")
    ap.add_argument("--cache", type=Path, default=None, help="pickle of the fitted sampler (read if present)")
    ap.add_argument("--label", default="", help="the cell's name (e.g. before, after)")
    ap.add_argument("--no-save", action="store_true", help="print only; append nothing to the results")
    args = ap.parse_args(argv)
    if not (args.release / "measurement").is_dir() or not (args.release / "schema.yaml").is_file():
        print(f"synth_blocks: no kept release at {args.release} (measurement/ and schema.yaml): nothing measured")
        return 0
    import dpsynth

    cells = []
    for k in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="synth-blocks-") as tmp:
            cell = run(args.release, args.blocks, args.cache, Path(tmp))
        cell = {"label": args.label, "dpsynth": str(Path(dpsynth.__file__).parent), **cell}
        cells.append(cell)
        print(f"{args.label or '-'} #{k}: {cell['blocks']} blocks, {cell['cpu_s']:.3f} CPU s "
              f"({cell['cpu_s_per_block']:.4f}/block), load {cell['load_1min']}")
    head = ["label", "blocks", "cpu_s", "per_block", "sample", "decode", "parquet", "csv", "rest", "load", "codes/values/csv sha256"]
    from benchmarks._common import print_table
    print_table(head, [[c["label"], c["blocks"], c["cpu_s"], c["cpu_s_per_block"], *c["cpu_s_by_phase"].values(),
                        c["load_1min"], "/".join(c["sha256"][f][:10] for f in FILES)] for c in cells])
    if not args.no_save:
        old = json.loads(RESULT.read_text()) if RESULT.is_file() else {"cells": []}
        old["cells"].extend(cells)
        RESULT.parent.mkdir(parents=True, exist_ok=True)
        RESULT.write_text(json.dumps(old, indent=2) + "\n")
        print(f"appended {len(cells)} cell(s) to {RESULT}")
    return 0


if __name__ == "__main__":
    sys.path.append(str(ROOT))  # after PYTHONPATH: the dpsynth measured is the one it names
    sys.exit(main())
