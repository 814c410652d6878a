"""The release stages as plain functions over files in a private workspace.

Each stage reads the previous stage's files and writes its own: encode (raw table to
codes, cached), measure (the DP boundary, never redrawn), synthesize, validate (the
gate), the optional internal report, and publish. :mod:`dpsynth.pipeline.engine` runs
them in order; ``tasks/`` wraps each one in a Prefect task for ``flows/release.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import pyarrow.parquet as pq

from ..publish.bundle import fsync_path, publish_release, read_sign_key
from ..rows.encode_parts import encode_to_parts
from ..rows.encoding import EncodedTable
from ..measurement import Measurement, PrivacyStatement
from ..privacy.budget import Charge, Ledger, RefusedMidPlan, delta_warning, is_pure
from ..privacy.rng import seed_commitment
from ..privacy.registry import Draw, consume_draw, settle_draw
from ..rows.rowsource import DEFAULT_CHUNK_ROWS, RowSource, Runner, load_rows
from ..precheck import check_disk
from ..schema import Schema
from ..privacy.schema_source import data_derived_detail, schema_privacy, schema_source
from ..privacy.workspace_key import opaque_key
from ..rows.memory import give_back_memory  # noqa: F401 (the stages call it by this module's name)
from .cluster import POOL_MIN_BLOCKS, row_runner, synthesis_runner, warm_pool  # noqa: F401 (re-exported)
from .config import PartlySpent, ReleaseError, ReleasePlan
from .gate_stage import gate_files, gate_scan, scan_synthetic, start_gate_warm_up, synthetic_pairs, validate_stage  # noqa: F401 (re-exported)

__all__ = [
    "COMPLETE",
    "INTERNAL_LABEL",
    "complete_folder",
    "correct_to_measurement",
    "encode_release",
    "encode_stage",
    "gate_files",
    "internal_report_stage",
    "measure_stage",
    "measured_delta_warning",
    "publish_stage",
    "synthesize_stage",
    "synthetic_folder",
    "start_gate_warm_up",
    "validate_stage",
    "write_atomic",
]

COMPLETE = "COMPLETE"


def write_atomic(path: Path, data: str | bytes) -> None:
    """Writes ``data`` (text or bytes) to ``path`` through a flushed temporary file and a rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def encode_stage(data: Path, schema: Schema, workspace: Path, data_sha256: str, *,
                 chunk_rows: int = DEFAULT_CHUNK_ROWS, runner: Runner | None = None) -> Path:
    """Encodes the raw input (a file or a folder of files) to a folder of Parquet codes,
    partition by partition in chunks of ``chunk_rows`` rows; cached on (content hash, schema).

    With a Dask ``runner`` the partitions are encoded on its workers.
    """
    folder = workspace / "encoded" / opaque_key(workspace, "encode", data_sha256, schema.fingerprint())
    path = folder / "codes"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".codes.{os.getpid()}.{time.time_ns()}"
    try:
        encode_to_parts(data, schema, tmp, chunk_rows=chunk_rows, runner=runner)
        for f in tmp.iterdir():
            os.chmod(f, 0o600)  # written by Dask workers too, whose umask is not ours
            fsync_path(f)
        try:
            os.replace(tmp, path)
        except OSError:
            # Another release of the same input finished encoding first (a directory
            # cannot replace a non-empty one): its codes are the same, keep them.
            if not path.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def encode_release(plan: ReleasePlan) -> Path:
    """The encode stage for a plan's input (the form the engines call), on the config's
    Dask cluster when it names one, else on this machine's cores for a large input
    (:func:`dpsynth.rows.encode_parts.pooled`)."""
    c = plan.config
    if not c.dask_address:
        return encode_stage(Path(c.data), plan.schema, c.workspace, plan.data_sha256, chunk_rows=c.chunk_rows)
    with row_runner(c.dask_address) as runner:
        return encode_stage(Path(c.data), plan.schema, c.workspace, plan.data_sha256, chunk_rows=c.chunk_rows,
                            runner=runner)


def measure_stage(plan: ReleasePlan, codes_path: Path, draw: Draw | None = None, *,
                  chunk_rows: int | None = None, runner: Runner | None = None) -> Path:
    """The DP boundary. Returns the measurement folder; never measures twice.

    A complete measurement of this release is returned as it is (no noise drawn).
    Otherwise noise is drawn only with ``draw``, a fresh charge of this release granted
    by the registry (:func:`dpsynth.pipeline.charge_dataset`), marked used right before
    the method runs: without one, :class:`dpsynth.privacy.registry.DrawRefused` and nothing is
    measured (DESIGN.md, decision 14). A new measurement replaces any synthetic folder
    made from an earlier one of the same key.

    A method that measures counts reads the codes partition by partition (memory bounded
    by ``chunk_rows``, default the config's; on a Dask ``runner``, default the config's
    cluster, on its workers); the others get the whole table, in this process.
    """
    folder = plan.release_dir() / "measurement"
    if (folder / COMPLETE).exists():
        return folder
    if runner is None:
        with row_runner(plan.config.dask_address) as opened:
            return measure_stage(plan, codes_path, draw, chunk_rows=chunk_rows, runner=opened)
    method = plan.method()
    source = RowSource.from_parquet(codes_path, plan.schema, chunk_rows=chunk_rows or plan.config.chunk_rows,
                                    runner=runner)
    codes = source if getattr(method, "measures_counts", False) else load_rows(source, plan.method_name)
    ledger = Ledger(plan.budget, plan.charges)
    consume_draw(plan.config.workspace, draw, plan.dataset, plan.key)  # the charge, used once, then the noise
    try:
        m = method.measure(codes, ledger, plan.rng("measure"))
    except RefusedMidPlan as exc:
        raise _settled(plan, draw, ledger, exc) from None
    unspent = {c.stage for c in ledger.planned} - {c.stage for c in ledger.spent}
    if unspent:
        raise ReleaseError(f"method {plan.method_name!r} did not spend planned stages {sorted(unspent)}")
    if hasattr(method, "spent_ledger"):  # auto: its count and the chosen method's own stages
        ledger = method.spent_ledger(ledger, m)
    # synthetic tables (one per row count) made from a measurement that is gone: never
    # publish one beside this measurement
    for stale in plan.release_dir().glob("synthetic*"):
        shutil.rmtree(stale)
    if schema_source(plan.schema) == "data_derived":  # opted in: the domain came from the rows
        m = dataclasses.replace(m, statement=_data_derived_statement(plan.schema, m.statement))
    with complete_folder(folder) as tmp:
        m.save(tmp)
        (tmp / "ledger.json").write_text(json.dumps(ledger.to_dict(), indent=2, sort_keys=True) + "\n")
    del m, codes, source
    give_back_memory()  # the counting's and the method's buffers: synthesize starts from what is live
    return folder


def _settled(plan: ReleasePlan, draw: Draw | None, ledger: Ledger, exc: RefusedMidPlan) -> PartlySpent:
    """A method's refusal after part of its plan: the registry's draw lowered to the spent
    charges (the rest drew no noise), and the error that says what was spent."""
    spent = ledger.spent
    if draw is not None:
        settle_draw(plan.config.workspace, draw, spent, float(plan.budget.delta))
    what = ", ".join(c.stage for c in spent) or "nothing"
    cost = ledger.epsilon_spent() if spent else 0.0
    return PartlySpent(f"{exc}. Spent and charged to the dataset's registry: {what} (epsilon {cost:.3g} of "
                       f"{plan.budget.epsilon:g}); the rest of the budget was not spent")


def synthetic_folder(plan: ReleasePlan) -> Path:
    """The synthetic cache of a plan: one per requested row count, since a new ``--rows``
    on the same measurement is free post-processing, not a reason to reuse the old table.

    Everything else synthesize reads (measurement, method, parameters, post-processing
    options, seed) is in the release key already.
    """
    rows = plan.config.rows
    return plan.release_dir() / ("synthetic" if rows is None else f"synthetic-rows{int(rows)}")


def synthesize_stage(plan: ReleasePlan, measurement_dir: Path, *, chunk_rows: int | None = None) -> Path:
    """Post-processing of the measurement only: synthetic codes, then values, streamed to
    ``synthetic-codes.parquet``, ``synthetic.parquet`` and ``synthetic.csv`` in blocks
    (:mod:`dpsynth.pipeline.synthetic`; cached per row count, :func:`synthetic_folder`);
    ``chunk_rows`` (default the config's) bounds the codes held at once and never changes
    the bytes.

    A method that streams (``streams_synthesis``) draws block by block; the others, and
    ``correct_marginals`` (a reweighting of the whole table), build the table in memory first.
    """
    from .synthetic import TableSampler, write_fit_record, write_synthetic

    folder = synthetic_folder(plan)
    if (folder / COMPLETE).exists():
        return folder
    m = Measurement.load(measurement_dir)
    give_back_memory()  # Arrow's pages of the read (a 10M sds measurement's: 200 MB)
    rng = plan.rng("synthesize")
    method = plan.method()
    if hasattr(method, "chosen"):  # auto: the method its measurement chose
        method = method.chosen(m)
    if getattr(method, "streams_synthesis", False) and not plan.options.get("correct_marginals"):
        if not hasattr(method, "chunks_synthesis"):  # drawn in blocks on the pool (sds's chunks: in order, here)
            warm_pool(plan.config.dask_address, plan.config.rows or m.estimated_records())
        sampler = method.sampler(m, plan.schema, plan.config.rows, rng)
    else:
        synth = method.synthesize(m, plan.schema, plan.config.rows, rng)
        if plan.options.get("correct_marginals"):
            synth = correct_to_measurement(synth, m, plan.rng("correct"))
        sampler = TableSampler(synth)
    rows = int(sampler.rows)  # the files must fit the disk: refused before a byte is written
    check_disk(rows, plan.schema, [plan.config.workspace, Path(plan.config.out)],
               what=f"the synthetic table of {rows} rows")
    with synthesis_runner(plan.config.dask_address, sampler) as runner, complete_folder(folder) as tmp:
        write_synthetic(tmp, plan.schema, sampler, rng, plan.rng("decode"),
                        chunk_rows=chunk_rows or plan.config.chunk_rows, runner=runner)
        write_fit_record(tmp, sampler)
    sampler = synth = m = None  # noqa: F841 (dropped before the memory is given back)
    give_back_memory()  # the fit's and the writer's buffers: validate and publish start from what is live
    return folder


def correct_to_measurement(synth: EncodedTable, m: Measurement, rng) -> EncodedTable:
    """Marginal correction (post-processing): reweight the synthetic rows so that their
    marginals come as close as possible to the measurement's DP marginals (QP, since
    noisy marginals are rarely exactly reachable), then resample as many rows."""
    from ..postprocess.correction import correct_marginals

    if not m.marginals:
        raise ReleaseError(
            f"correct_marginals needs a measurement with marginals; method {m.method!r} has none"
        )
    schema = synth.schema
    codes = synth.codes.astype(np.int64)
    # A marginal measured on merged values constrains the merged codes: each such column
    # is added once as a column of its cells, and the resampled rows keep only the schema's.
    merged: dict[tuple[str, tuple[int, ...]], int] = {}
    extra: list[np.ndarray] = []
    targets = {}
    for nm in m.measured:
        cols = []
        for a in nm.attrs:
            if a not in nm.groups:
                cols.append(schema.index(a))
                continue
            if (a, nm.groups[a]) not in merged:
                merged[(a, nm.groups[a])] = codes.shape[1] + len(extra)
                extra.append(np.asarray(nm.groups[a], dtype=np.int64)[codes[:, schema.index(a)]])
            cols.append(merged[(a, nm.groups[a])])
        targets[tuple(cols)] = np.clip(np.asarray(nm.counts, dtype=float), 0.0, None)
    wide = np.column_stack([codes, *extra]) if extra else codes
    result = correct_marginals(wide, targets, rng=rng, method="qp")
    out = np.asarray(result.samples)[:, :codes.shape[1]]
    return EncodedTable(schema=schema, codes=out.astype(synth.codes.dtype))


INTERNAL_LABEL = "INTERNAL - NOT FOR PUBLICATION: computed from the raw data, not differentially private"


def internal_report_stage(plan: ReleasePlan, codes_path: Path, synthetic_dir: Path,
                          measurement_dir: Path | None = None, *, runner: Runner | None = None) -> Path:
    """Utility against the raw data, written only to the private workspace: a JSON summary
    in the release's folder and, for the data owner, an HTML page with every 2-way and a
    sample of 3-way marginals (``internal-reports/<release name>.html``, whose path names
    no private key). Returns the page's path.

    Both tables are counted partition by partition, ``chunk_rows`` rows at a time, on
    ``runner`` (default: the config's Dask cluster when it names one, else this process):
    memory is flat in rows and the numbers are those of the whole tables."""
    if runner is None:
        with row_runner(plan.config.dask_address) as opened:
            return internal_report_stage(plan, codes_path, synthetic_dir, measurement_dir, runner=opened)
    from ..evaluation.metrics import k_subsets, summarize_by_k
    from ..report.internal import complete_records, internal_page, internal_subsets, stream_marginals

    schema, chunk_rows = plan.schema, plan.config.chunk_rows
    real = RowSource.from_parquet(codes_path, schema, chunk_rows=chunk_rows, runner=runner)
    synth_parts = tuple(p for c, _ in synthetic_pairs(synthetic_dir)
                        for p in RowSource.from_parquet(c, schema, chunk_rows=chunk_rows).parts)
    synth = RowSource(schema=schema, parts=synth_parts, chunk_rows=chunk_rows, runner=runner)
    d = len(schema.columns)
    ks = tuple(k for k in (1, 2, 3) if k <= d)
    pairs, triples, _ = internal_subsets(d)
    keep = [(j,) for j in range(d)] + pairs + triples
    tvds, real_counts, synth_counts = stream_marginals(real, synth, k_subsets(d, ks), keep)
    measured = ({nm.attrs for nm in Measurement.load(measurement_dir).measured}
                if measurement_dir is not None else set())
    page, by_marginal = internal_page(plan.name, INTERNAL_LABEL, real_counts, synth_counts, measured)
    report = {
        "label": INTERNAL_LABEL,
        "release": plan.name,
        "tvd_by_k": {str(k): v for k, v in summarize_by_k(tvds, ks).items()},
        "complete_share": {"real": complete_records(real), "synthetic": complete_records(synth)},
        "scored_marginals": by_marginal,
    }
    write_atomic(plan.release_dir() / "internal-utility-report.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
    folder = plan.config.workspace / "internal-reports"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{plan.name}.html"
    write_atomic(path, page)
    return path


def publish_stage(
    plan: ReleasePlan,
    measurement_dir: Path,
    synthetic_dir: Path,
    validation: Mapping[str, Any],
    timings: Mapping[str, float],
    dataset: Mapping[str, Any] | None = None,
) -> Path:
    """Writes the release folder; ``dataset`` is the registry's summary for the manifest."""
    from .synthetic import synthesis_entries

    ledger = json.loads((measurement_dir / "ledger.json").read_text())
    m_meta = json.loads((measurement_dir / "measurement.json").read_text())
    files = {
        "synthetic.parquet": synthetic_dir / "synthetic.parquet",
        "synthetic.csv": synthetic_dir / "synthetic.csv",
        "measurement.parquet": measurement_dir / "measurement.parquet",
        "measurement.json": measurement_dir / "measurement.json",
    }
    for t in m_meta.get("tables", []):
        files[f"measurement-{t}.parquet"] = measurement_dir / f"measurement-{t}.parquet"
    folder = plan.release_dir()
    schema_copy = folder / "schema.yaml"
    schema_copy.write_text(plan.schema.to_yaml())
    files["schema.yaml"] = schema_copy
    files["validation.json"] = folder / "validation.json"
    data_docs = (folder / "data-docs" / "index.html").is_file()
    if data_docs:
        files["data-docs"] = folder / "data-docs"
    rows = pq.ParquetFile(str(files["synthetic.parquet"])).metadata.num_rows
    notes = [*plan.warnings, *filter(None, [measured_delta_warning(plan, measurement_dir)])]
    pure = _pure(m_meta)
    manifest = {
        "name": plan.name,
        **_method_entries(plan, m_meta),
        "schema": plan.schema.name,
        "schema_sha256": plan.schema.fingerprint(),
        "privacy": {
            "epsilon": plan.budget.epsilon,
            **_accounting(plan, ledger, m_meta),
            "rho_spent": ledger["rho_spent"],
            "epsilon_spent": ledger["epsilon_spent"],
            "ledger": ledger["stages"],
            **_privacy_statement(m_meta, pure),
            "schema": schema_privacy(plan.schema),
            **({"notes": notes} if notes else {}),
            **({"dataset": dict(dataset)} if dataset is not None else {}),
        },
        "postprocessing": dict(plan.options),
        **synthesis_entries(synthetic_dir),
        "rows": rows,
        "rows_requested": plan.config.rows,
        "seed_commitment": seed_commitment(plan.seed, plan.material),
        "validation": {k: validation[k] for k in ("success", "statistics", "thresholds") if k in validation},
        "data_docs": data_docs,
        "timings": dict(timings),
    }

    sizes = {rel: _size(Path(src)) for rel, src in files.items()}  # before publish moves files

    def report(full_manifest: Mapping[str, Any]) -> str:
        from ..report import build_report
        from .gate_stage import synthetic_counts

        m = Measurement.load(measurement_dir)
        give_back_memory()  # Arrow's pages of the read, as in synthesize
        # the charts and accuracy tables need counts only: those the gate kept, else the
        # codes read chunk by chunk on the release's row runner
        counts = synthetic_counts(plan.schema, synthetic_dir, m, plan.config.chunk_rows, folder,
                                  plan.config.dask_address)
        page = build_report(full_manifest, plan.schema, counts, m, validation, files=sizes)
        m = counts = None  # noqa: F841 (dropped before the memory is given back)
        give_back_memory()  # the counting's buffers: the files are hashed next
        return page

    key = read_sign_key(plan.config.sign_key) if plan.config.sign_key is not None else None
    with moving_out(synthetic_dir):  # the synthetic table is moved, never copied: one copy on disk
        return publish_release(Path(plan.config.out), plan.name, files, manifest, extra={"report.html": report},
                               sign_key=key, move=MOVED)


def _method_entries(plan: ReleasePlan, m_meta: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's method, its parameters and, for ``auto``, its choice and the DP record
    count it chose with (both from the measurement: what this release's draw decided)."""
    auto = (m_meta.get("meta") or {}).get("auto")
    if plan.method_name != "auto" or not auto:
        return {"method": plan.method_name, "method_requested": plan.config.method, "parameters": plan.params}
    return {
        "method": m_meta["method"],
        "method_requested": "auto",
        "auto_params": _in_field_order(m_meta["method"], auto["choice"]["params"]),
        "auto_reason": auto["choice"]["reason"],
        "auto_record_count": {"value": auto["record_count"], "stddev": auto["record_count_stddev"],
                              "mechanism": auto["mechanism"], "stage": auto["stage"],
                              "share_of_budget": auto["count_share"]},
        "parameters": dict(m_meta.get("params") or {}),
    }


def _in_field_order(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` in the order the method's parameter class declares them (JSON sorts keys)."""
    from ..methods import METHODS

    order = [f.name for f in dataclasses.fields(METHODS[method].params_type)]
    return {k: params[k] for k in sorted(params, key=lambda k: order.index(k) if k in order else len(order))}


def measured_delta_warning(plan: ReleasePlan, measurement_dir: Path) -> str | None:
    """A warning when the release's delta is above 1/(the DP record count): known once
    measured (post-processing of the measurement). The engine says it on stderr, publish
    repeats it as a manifest note; not said twice when a public row count said it already."""
    if is_pure(plan.charges) or any(note.startswith(f"delta {plan.budget.delta:g} is above")
                                    for note in plan.warnings):
        return None  # pure epsilon-DP has delta 0; or a public row count said it already
    records = Measurement.load(measurement_dir).estimated_records()
    return delta_warning(plan.budget.delta, records, "the record count as the DP measurement estimates it")


def _size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _data_derived_statement(schema: Schema, method: PrivacyStatement) -> PrivacyStatement:
    """The statement of a release on a data-derived schema: NOT DP whatever the method's."""
    detail = data_derived_detail(schema) + (f"; {method.detail}" if method.detail else "")
    kind = "heuristic" if method.kind == "dp" else method.kind
    return PrivacyStatement(kind=kind, neighbours=method.neighbours, detail=detail)


def _pure(m_meta: Mapping[str, Any]) -> bool:
    """A DP measurement whose every charge is pure epsilon: pure epsilon-DP, delta 0."""
    st = PrivacyStatement.from_dict(m_meta["statement"])
    return st.differentially_private and is_pure(Charge.from_dict(c) for c in m_meta.get("charges", []))


def _accounting(plan: ReleasePlan, ledger: Mapping[str, Any], m_meta: Mapping[str, Any]) -> dict[str, Any]:
    """delta, rho and how the stages compose: zCDP converted with CKS, or, when every charge
    is pure epsilon, pure epsilon-DP with delta 0 (the configured delta changed nothing)."""
    if _pure(m_meta):
        return {"delta": 0.0, "rho": None, "pure_epsilon": True, "delta_requested": plan.budget.delta,
                "accounting": "pure epsilon-DP: the stages' epsilons add up (basic composition); delta 0"}
    return {"delta": plan.budget.delta, "rho": plan.budget.rho,
            "accounting": "zCDP, converted with Canonne-Kamath-Steinke (2020)"}


def _privacy_statement(m_meta: Mapping[str, Any], pure: bool = False) -> dict[str, Any]:
    """The manifest's statement fields, from the measurement's typed statement."""
    st = PrivacyStatement.from_dict(m_meta["statement"])
    out: dict[str, Any] = {"differentially_private": st.differentially_private, "guarantee": st.kind,
                           "headline": st.headline(pure)}
    if st.neighbours:
        out["neighbours"] = st.neighbours
    if st.detail:
        out["statement"] = st.detail
    return out


#: The synthetic files publish moves into the release (on the same filesystem) instead of copying.
MOVED = ("synthetic.parquet", "synthetic.csv")


@contextmanager
def moving_out(synthetic_dir: Path) -> Iterator[None]:
    """The synthetic folder stops being a complete cache before publish moves its files out:
    a crash from here on leaves it incomplete, so a rerun draws it again (post-processing
    of the kept measurement: the same bytes, no charge). When the files are still there
    afterwards (a failed publish moved them back; an output folder on another filesystem
    got copies), the folder is marked complete again."""
    marker = synthetic_dir / COMPLETE
    marker.unlink(missing_ok=True)
    fsync_path(synthetic_dir)
    try:
        yield
    finally:
        if all((synthetic_dir / name).is_file() for name in MOVED):
            marker.write_text("")
            fsync_path(synthetic_dir)


@contextmanager
def complete_folder(folder: Path) -> Iterator[Path]:
    """Fills a temporary sibling of ``folder``, marks it complete, flushes it to disk and
    renames it into place: a crash leaves either nothing or a complete folder."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
    try:
        yield tmp
        (tmp / COMPLETE).write_text("")
        for p in tmp.iterdir():
            fsync_path(p)
        fsync_path(tmp)
        if (folder / COMPLETE).exists():  # never replace (nor delete) a complete folder
            shutil.rmtree(tmp, ignore_errors=True)
            return
        if folder.exists():  # an incomplete leftover (no COMPLETE marker)
            shutil.rmtree(folder)
        os.rename(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
