"""The validate stage: the release gate (Great Expectations) on the synthetic folder, its
files scanned partition by partition in this process, the gate's worker, a pool of this
machine's cores (a large table on the local engine) or on a Dask cluster, and the warm-up
of Great Expectations while the method works. Re-exported by
:mod:`dpsynth.pipeline.stages` with the other stages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..measurement import Measurement, measured_attrs
from ..rows.rowsource import DEFAULT_CHUNK_ROWS, Runner
from ..schema import Schema
from .cluster import close_local_pool, row_runner, scan_runner
from .config import BudgetSpent, ReleasePlan, ValidationFailed

__all__ = ["COUNTS_FILE", "gate_files", "gate_scan", "scan_synthetic", "start_gate_warm_up", "synthetic_counts",
           "synthetic_pairs", "synthetic_rows", "validate_stage"]


def start_gate_warm_up() -> None:
    """Starts importing Great Expectations (3-7 s of CPU) while the method works, so the
    gate rarely waits for it: in a worker process on another core
    (:mod:`dpsynth.gate.worker`), or in a background thread of this process when no
    worker can run (``DPSYNTH_GATE_WORKER=off``, or it failed to start).

    Called once the public checks passed (the CLI starts the worker earlier: its output
    goes nowhere, so a refused request still exits with one clean line).
    """
    from ..gate import worker as gate_worker

    if not gate_worker.start():
        from ..gate.session import warm_up_in_background

        warm_up_in_background()


def synthetic_pairs(synthetic_dir: Path) -> list[tuple[Path, Path]]:
    """The synthetic table of a synthetic folder as (codes, values) Parquet file pairs in
    row order (the partitions the gate and the report scan). Today one pair; a synthesize
    stage writing several part files lists them here, pair by pair, in row order."""
    return [(synthetic_dir / "synthetic-codes.parquet", synthetic_dir / "synthetic.parquet")]


def synthetic_rows(synthetic_dir: Path) -> int:
    """The synthetic folder's row count, from its codes files' footers (no row is read)."""
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(str(c)).num_rows for c, _ in synthetic_pairs(synthetic_dir))


def scan_synthetic(schema: Schema, synthetic_dir: Path, measurement_dir: Path, chunk_rows: int,
                   runner: Runner | None = None) -> Any:
    """One pass over the synthetic folder's table, partition by partition on ``runner``
    (default: this process): what the gate needs (:class:`dpsynth.gate.scan.Scan`). Reads the
    measurement's metadata alone (which marginals to count), not its counts and tables: the
    gate's worker loads those (sds's 1,350 marginals and reported tuples: 500 MB at 10M)."""
    return _scan(schema, synthetic_dir, measured_attrs(measurement_dir), chunk_rows, runner)


def _scan(schema: Schema, synthetic_dir: Path, m: Measurement | Sequence[tuple[str, ...]], chunk_rows: int,
          runner: Runner | None) -> Any:
    from ..gate.checks import measured_subsets
    from ..gate.scan import scan_files

    return scan_files(synthetic_pairs(synthetic_dir), schema, measured_subsets(schema, m), chunk_rows=chunk_rows,
                      runner=runner)


def gate_scan(found: Any, measurement_dir: Path, rows: int | None, thresholds: Mapping[str, float] | None,
              docs: Path | None, run_name: str) -> dict[str, Any]:
    """The gate's GE run on a finished scan (:func:`scan_synthetic`); returns its summary."""
    return _gate(found, Measurement.load(measurement_dir), rows, thresholds, docs, run_name)


def _gate(found: Any, m: Measurement, rows: int | None, thresholds: Mapping[str, float] | None,
          docs: Path | None, run_name: str) -> dict[str, Any]:
    return _gate_counted(found, m, rows, thresholds, docs, run_name)[0]


def _gate_counted(found: Any, m: Measurement, rows: int | None, thresholds: Mapping[str, float] | None,
                  docs: Path | None, run_name: str) -> tuple[dict[str, Any], Any]:
    """The gate's summary, and the synthetic marginal counts it checked (a
    :class:`dpsynth.gate.scan.CodeCounts`: what the report shows)."""
    from ..gate import run_gate_scan

    return run_gate_scan(found, m, rows, thresholds, docs=docs, run_name=run_name)


def _gate_scan_counted(found: Any, measurement_dir: Path, *args: Any) -> tuple[dict[str, Any], Any]:
    """:func:`gate_scan`, with the counts (what the validate stage asks the gate worker for)."""
    return _gate_counted(found, Measurement.load(measurement_dir), *args)


def _gate_files_counted(schema: Schema, synthetic_dir: Path, measurement_dir: Path, *args: Any,
                        chunk_rows: int = DEFAULT_CHUNK_ROWS) -> tuple[dict[str, Any], Any]:
    """:func:`gate_files`, with the counts (what the validate stage asks the gate worker for)."""
    m = Measurement.load(measurement_dir)
    return _gate_counted(_scan(schema, synthetic_dir, m, chunk_rows, None), m, *args)


def gate_files(schema: Schema, synthetic_dir: Path, measurement_dir: Path, rows: int | None,
               thresholds: Mapping[str, float] | None, docs: Path | None, run_name: str, *,
               chunk_rows: int = DEFAULT_CHUNK_ROWS) -> dict[str, Any]:
    """The gate on a synthetic folder and its measurement folder (what the validate stage
    sends to the gate worker when rows are read in this process), scanning the synthetic
    files partition by partition (:func:`scan_synthetic`); returns the gate's summary. The
    measurement is loaded once for both (at 20 columns, sds's 1,350 marginals: 1-2 s of CPU)."""
    m = Measurement.load(measurement_dir)
    return _gate(_scan(schema, synthetic_dir, m, chunk_rows, None), m, rows, thresholds, docs, run_name)


def validate_stage(plan: ReleasePlan, synthetic_dir: Path, measurement_dir: Path) -> dict[str, Any]:
    """The Great Expectations gate: record validity and accuracy against the DP measurement.

    The result is kept in the private workspace; a failed gate raises and nothing is
    published. Data Docs are rendered for the bundle only when the config asks for them
    (``data_docs``) and the gate passes.
    """
    from ..gate import worker as gate_worker
    from .stages import write_atomic

    folder = plan.release_dir()
    docs = folder / "data-docs"
    if docs.exists():
        shutil.rmtree(docs)
    # GE runs in the warm worker when there is one (its GE is imported and its context
    # made), else here; the same functions either way. The rows are read by the workers of
    # the Dask cluster (with an address) or, for a large table, of this machine's pool
    # (scan_runner), and only the scan (counts and witness values) reaches the gate; a
    # small table is read by the gate's worker itself.
    c = plan.config
    args = (c.rows, dict(c.gate) or None, docs if c.data_docs else None, plan.name)
    if c.dask_address:
        with row_runner(c.dask_address) as runner:
            found = scan_synthetic(plan.schema, synthetic_dir, measurement_dir, c.chunk_rows, runner)
        summary, counts = gate_worker.call(_gate_scan_counted, found, measurement_dir, *args)
    else:
        rows = synthetic_rows(synthetic_dir)
        with scan_runner(rows) as runner:
            if runner is not None:  # partitions for every worker (never larger than chunk_rows)
                part_rows = min(c.chunk_rows, -(-rows // int(runner.workers)))
                found = scan_synthetic(plan.schema, synthetic_dir, measurement_dir, part_rows, runner)
        close_local_pool()  # the release's last use of its pool: publish need not carry its workers
        if runner is not None:
            summary, counts = gate_worker.call(_gate_scan_counted, found, measurement_dir, *args)
        else:
            summary, counts = gate_worker.call(_gate_files_counted, plan.schema, synthetic_dir, measurement_dir,
                                               *args, chunk_rows=c.chunk_rows)
    write_atomic(folder / "validation.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    if summary["success"] and counts is not None:  # for the report: publish need not count them again
        write_atomic(folder / COUNTS_FILE, _counts_bytes(counts, _codes_digests(synthetic_dir)))
    if not summary["success"]:
        worst = sorted(
            (e for e in summary["marginal_errors"] if e["tvd"] > e["threshold"]),
            key=lambda e: e["threshold"] - e["tvd"],
        )
        detail = f" (marginals over threshold: {', '.join(e['marginal'] for e in worst[:5])})" if worst else ""
        raise ValidationFailed(
            f"validation failed: {', '.join(summary['failed'])}{detail}; nothing was published, "
            f"{BudgetSpent.NOTE} (details: validation.json in the private workspace's release folder, "
            f"which {plan.config.workspace / 'names' / (plan.name + '.json')} names). To publish: raise "
            f"--epsilon, coarsen or drop columns in the schema, try another --method (pgm, marginals), or, "
            f"having read validation.json, relax a check with --gate KEY=VALUE"
        )
    return summary


# --- the gate's counts, kept for the report ---------------------------------------------

#: The synthetic marginal counts the gate checked, kept in the release's private folder for
#: the report (publish reads them instead of counting the codes again: 3 CPU s per million
#: rows for sds's 1,350 marginals), with the digests of the codes files they were counted from.
COUNTS_FILE = "gate-counts.npz"  # not "synthetic*": measure removes those folders


def _codes_digests(synthetic_dir: Path) -> list[str]:
    from ..rows.encoding import file_sha256

    return [file_sha256(c) for c, _ in synthetic_pairs(synthetic_dir)]


def _counts_bytes(counts: Any, digests: Sequence[str]) -> bytes:
    """``counts`` (a CodeCounts) as an ``.npz`` file's bytes: one array per subset, in order,
    and a JSON header naming the subsets, the row count and the codes files' digests."""
    import io

    import numpy as np

    keys = list(counts.counts)
    head = {"digests": list(digests), "subsets": [list(k) for k in keys], "n": int(counts.n)}
    arrays = {f"t{i}": np.asarray(counts.counts[k], dtype=np.int64) for i, k in enumerate(keys)}
    buf = io.BytesIO()
    np.savez(buf, head=np.array(json.dumps(head)), **arrays)
    return buf.getvalue()


def _kept_counts(path: Path, schema: Schema, subsets: Sequence[tuple[int, ...]], digests: Sequence[str]) -> Any:
    """The counts kept at ``path`` when they were counted from codes files of these
    ``digests`` for exactly these ``subsets``; else None."""
    import numpy as np

    from ..gate.scan import CodeCounts

    try:
        with np.load(path, allow_pickle=False) as z:
            head = json.loads(str(z["head"]))
            keys = [tuple(int(j) for j in k) for k in head["subsets"]]
            wanted = list(dict.fromkeys(tuple(sorted(s)) for s in subsets))
            if head["digests"] != list(digests) or sorted(keys) != sorted(wanted):
                return None
            at = {k: i for i, k in enumerate(keys)}
            counts = {k: z[f"t{at[k]}"] for k in wanted}  # in the order counting them gives
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return CodeCounts(schema=schema, n=int(head["n"]), counts=counts)


def synthetic_counts(schema: Schema, synthetic_dir: Path, m: Measurement, chunk_rows: int, folder: Path,
                     dask_address: str | None = None) -> Any:
    """The synthetic table's counts of the 1-way and measured marginals (a
    :class:`dpsynth.gate.scan.CodeCounts`, what the report needs): those the gate kept in the
    release's ``folder`` when they match the synthetic codes files byte for byte, else counted
    from the codes, partition by partition on the release's row runner (a Dask cluster's
    workers when ``dask_address`` names one)."""
    from ..gate.checks import measured_subsets
    from ..gate.scan import CodeCounts

    codes_files = [c for c, _ in synthetic_pairs(synthetic_dir)]
    kept = folder / COUNTS_FILE
    if kept.is_file():
        found = _kept_counts(kept, schema, measured_subsets(schema, m), _codes_digests(synthetic_dir))
        if found is not None:
            return found
    with row_runner(dask_address) as runner:
        return CodeCounts.of_file(codes_files, schema, m, chunk_rows, runner)
