"""The release stages as plain functions over files in a private workspace.

``tasks/`` wraps each stage in a Prefect task and ``flows/release.py`` orchestrates
them; :func:`run_release` runs the same stages in order without Prefect, for use
inside other pipelines and for tests of the library alone.

Workspace layout (private: it holds codes of raw rows; never publish it)::

    WORKSPACE/
      encoded/<HMAC of data sha256 and schema>/codes.parquet   encode cache
      releases/<release key>/
        measurement/      measurement.parquet, measurement.json, ledger.json, COMPLETE
        synthetic/        synthetic-codes.parquet, synthetic.parquet, synthetic.csv
        validation.json
      names/<release name>.json                           name -> release key
      names/<release name>.lock                           held (flock) for a whole run
      registry.sqlite                                     lifetime budget per dataset
      secret.key                                          keys the release key and names derived from the input

A measurement folder is written to a temporary name and renamed once complete, so a
crash never leaves a half measurement, and a completed one is never redrawn: a
re-run of the same release reuses it and the ledger is charged once (DESIGN.md,
decision 5). A release name can carry only one measurement: re-using it with
different inputs is refused before anything is measured, and a run holds its name
exclusively from claim to publish (decision 11). Before measuring, the release is
charged to its dataset in the lifetime registry (decision 10, :mod:`dpsynth.registry`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from .bundle import fsync_path, publish_release, read_sign_key
from .encoding import EncodedTable, check_file, decode, encode, file_sha256, read_table, write_csv
from .guidance import assess
from .methods import METHODS, get_method, params_to_dict
from .measurement import Measurement, PrivacyStatement
from .methods.base import Method, convert_param
from .precheck import check_options, check_rows, noise_warnings
from .privacy.budget import Budget, Charge, Ledger
from .privacy.rng import read_seed_file, seed_commitment, seed_tag, stage_rng
from .registry import DatasetState, charge, check_dataset_name, check_period
from .schema import Schema, load_schema
from .workspace import LockBusy, exclusive_lock
from .workspace_key import opaque_key, workspace_secret

__all__ = [
    "DEFAULT_DELTA",
    "ReleaseConfig",
    "ReleasePlan",
    "ReleaseError",
    "BudgetSpent",
    "ValidationFailed",
    "prepare",
    "claim_name",
    "charge_dataset",
    "utility_warning",
    "encode_stage",
    "measure_stage",
    "synthesize_stage",
    "validate_stage",
    "publish_stage",
    "run_release",
    "internal_report_stage",
    "default_workspace",
]

DEFAULT_DELTA = 1e-6
COMPLETE = "COMPLETE"


class ReleaseError(RuntimeError):
    """A release that must not go on (the message never quotes a row)."""


class BudgetSpent(ReleaseError):
    """A failure after the measure stage began: the release's budget counts as spent.

    The command line exits 1 on it (never 2, which promises that nothing was measured),
    and its message says that the budget was spent.
    """

    NOTE = "the privacy budget of this release was spent"


@contextmanager
def spent_on_failure(stage: str) -> Iterator[None]:
    """Turns any failure inside ``stage`` (the measure stage or later) into :class:`BudgetSpent`.

    The first line of the original message is kept (our messages never quote a row).
    """
    try:
        yield
    except BudgetSpent:
        raise
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BudgetSpent(f"{stage} failed after measuring, {BudgetSpent.NOTE}: {reason}") from exc


def default_workspace() -> Path:
    return Path(os.environ.get("DPSYNTH_WORKSPACE", ".dpsynth/workspace"))


@dataclass(frozen=True, kw_only=True)
class ReleaseConfig:
    """Everything a release depends on (public parameters plus paths)."""

    data: Path
    schema: Path
    method: str
    epsilon: float
    out: Path
    delta: float = DEFAULT_DELTA
    rows: int | None = None
    params: Mapping[str, str] = field(default_factory=dict)
    seed_file: Path | None = None
    name: str | None = None
    workspace: Path = field(default_factory=default_workspace)
    internal_report: bool = False
    gate: Mapping[str, float] = field(default_factory=dict)
    sign_key: Path | None = None
    dataset: str | None = None  # registry identity (default: the schema's name)
    period: str | None = None  # a per-period budget declared by the caller (deployments)
    period_epsilon: float | None = None

    def __post_init__(self) -> None:
        if self.rows is not None and (isinstance(self.rows, bool) or int(self.rows) < 1):
            raise ValueError(f"rows must be a whole number >= 1, got {self.rows!r}")
        if self.name is not None:
            _check_name(self.name)
        if self.dataset is not None:
            check_dataset_name(self.dataset)
        check_period(self.period, self.period_epsilon)


def _check_name(name: str) -> None:
    if not name or name.startswith(".") or any(ch in name for ch in "/\\\0") or len(name) > 200:
        raise ValueError(f"release name {name!r} must be a plain folder name")


@dataclass(frozen=True, kw_only=True)
class ReleasePlan:
    """The public, checked form of a config: computed before any row is read."""

    config: ReleaseConfig
    schema: Schema
    method_name: str
    params: dict[str, Any]
    budget: Budget
    charges: tuple[Charge, ...]
    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    seed: bytes | None = field(repr=False)
    data_sha256: str = field(repr=False)

    @cached_property
    def material(self) -> bytes:
        """Digest of everything the release depends on (private: it covers the input's hash).

        Stage generators and the seed commitment are bound to it (DESIGN.md, decision 9).
        """
        text = json.dumps(
            {
                "name": self.name,
                "data": self.data_sha256,
                "schema": self.schema.fingerprint(),
                "method": self.method_name,
                "params": self.params,
                "options": dict(self.options),
                "epsilon": self.budget.epsilon,
                "delta": self.budget.delta,
            },
            sort_keys=True,
        )
        return hashlib.sha256(b"dpsynth/release/v2\x00" + text.encode()).digest()

    @cached_property
    def key(self) -> str:
        """Release key: names the workspace folder, cache entries and the registry row.

        A keyed hash (under the workspace's secret) of the release material and the seed's
        identity, so nothing outside the workspace can test a guessed input against it.
        Private all the same: never published or logged.
        """
        secret = workspace_secret(self.config.workspace)
        msg = b"dpsynth/release-key/v2\x00" + self.material + seed_tag(self.seed).encode()
        return hmac.new(secret, msg, hashlib.sha256).hexdigest()[:32]

    @property
    def dataset(self) -> str:
        """The registry's dataset identity: declared, or the schema's name (never the rows)."""
        return self.config.dataset or self.schema.name

    def rng(self, stage: str) -> np.random.Generator:
        return stage_rng(self.seed, self.material, stage)

    def opaque(self, label: str) -> str:
        """A name for this release safe to hand to Prefect: keyed by the workspace secret,
        so it is not a hash of the raw input (DESIGN.md, decision 6)."""
        return opaque_key(self.config.workspace, label, self.key)

    def method(self) -> Method:
        return get_method(self.method_name, self.params)

    def release_dir(self) -> Path:
        return self.config.workspace / "releases" / self.key


# Post-processing options any method accepts through --param (they cost no privacy).
POSTPROCESS_OPTIONS = {"correct_marginals": bool}


def split_params(method: str, params: Mapping[str, str], rows: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separates post-processing options from method parameters; passes --rows to methods
    whose measurement itself is the rows (e.g. private sampling's k)."""
    method_params = {k: v for k, v in params.items() if k not in POSTPROCESS_OPTIONS}
    options = {
        key: convert_param(key, str(params[key]).strip(), typ)
        for key, typ in POSTPROCESS_OPTIONS.items()
        if key in params
    }
    cls = METHODS.get(method)
    rows_key = cls.takes_rows_as if cls is not None else None
    if rows_key and rows_key not in method_params and rows is not None:
        method_params[rows_key] = str(rows)
    return method_params, options


def prepare(config: ReleaseConfig) -> ReleasePlan:
    """All public checks: schema, method, parameters, post-processing options, budget
    plan, memory of the synthetic table, seed, the input's columns and types, name.

    Raises before any budget is spent; reads no row (only the file's header or Parquet
    schema, and its hash).
    """
    schema = load_schema(config.schema)
    schema.require_reviewed()  # an unreviewed `schema infer` draft: refused before any row is read
    method_params, options = split_params(config.method, config.params, config.rows)
    method = get_method(config.method, method_params)
    check_options(type(method), options)
    budget = Budget(epsilon=float(config.epsilon), delta=float(config.delta))
    charges = method.plan(schema, budget)
    Ledger(budget, charges)  # refuses a plan over budget
    check_rows(config.rows, schema)
    seed = read_seed_file(config.seed_file) if config.seed_file is not None else None
    if config.sign_key is not None:
        read_sign_key(config.sign_key)  # refused now, not at publishing
    if not Path(config.data).is_file():
        raise ReleaseError(f"input {config.data}: no such file")
    check_file(config.data, schema)
    name = config.name or f"{schema.name}-{method.name}-eps{config.epsilon:g}"
    _check_name(name)
    target = Path(config.out) / name
    if target.exists():
        raise ReleaseError(f"release {target} already exists: releases are never overwritten")
    plan = ReleasePlan(
        config=config,
        schema=schema,
        method_name=method.name,
        params=params_to_dict(method.params),
        options=options,
        warnings=noise_warnings(charges, budget.epsilon),
        budget=budget,
        charges=charges,
        name=name,
        seed=seed,
        data_sha256=file_sha256(config.data),
    )
    return plan


@contextmanager
def claim_name(plan: ReleasePlan) -> Iterator[None]:
    """Holds the release name exclusively for the block (claim, measure, publish).

    An OS lock (``flock`` on ``names/<name>.lock``) that a second run of the same name
    finds taken at once; the OS releases it when the holder dies, so a crashed run's name
    is free again and its complete measurement is kept. Under the lock, a name already
    bound to another complete measurement is refused (DESIGN.md, decision 11).
    """
    names = plan.config.workspace / "names"
    try:
        with exclusive_lock(names / f"{plan.name}.lock"):
            target = Path(plan.config.out) / plan.name
            if target.exists():  # published while this run was preparing
                raise ReleaseError(f"release {target} already exists: releases are never overwritten")
            _bind_name(plan, names / f"{plan.name}.json")
            yield
    except LockBusy:
        raise ReleaseError(
            f"release name {plan.name!r} is being built by another run right now; nothing was measured "
            "(wait for it to finish, or choose another --name)"
        ) from None


def _bind_name(plan: ReleasePlan, record: Path) -> None:
    """One release name, one measurement: refuse a name already measured differently."""
    if record.exists():
        key = json.loads(record.read_text())["key"]
        if key != plan.key and (plan.config.workspace / "releases" / key / "measurement" / COMPLETE).exists():
            raise ReleaseError(
                f"release name {plan.name!r} was already measured with other inputs or parameters; "
                "a second measurement would spend the budget again: choose a new --name"
            )
    _write_atomic(record, json.dumps({"key": plan.key}) + "\n")


def utility_warning(plan: ReleasePlan, measurement_dir: Path) -> str | None:
    """The small-sample guard's warning when the measurement predicts a release below the
    independent-columns baseline (public information only; see :mod:`dpsynth.guidance`)."""
    advice = assess(Measurement.load(measurement_dir), plan.schema)
    return advice.message if advice is not None and advice.below_baseline else None


def charge_dataset(plan: ReleasePlan) -> DatasetState:
    """Charges the release to its dataset's lifetime registry before it measures.

    Raises :class:`dpsynth.registry.RegistryRefused` past the dataset's cap; a retry of
    the same release (same key) is not charged again.
    """
    limit = (plan.config.period, float(plan.config.period_epsilon)) if plan.config.period else None
    return charge(plan.config.workspace, plan.dataset, plan.key, plan.name, plan.charges,
                  float(plan.budget.delta), limit=limit)  # type: ignore[arg-type]


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# --- stages -------------------------------------------------------------------


def encode_stage(data: Path, schema: Schema, workspace: Path, data_sha256: str) -> Path:
    """Encodes the raw table to codes; cached on (content hash, schema)."""
    folder = workspace / "encoded" / opaque_key(workspace, "encode", data_sha256, schema.fingerprint())
    path = folder / "codes.parquet"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    enc = encode(read_table(data, schema), schema)
    tmp = folder / f".codes.{os.getpid()}.parquet"
    enc.to_parquet(tmp)
    os.replace(tmp, path)
    return path


def measure_stage(plan: ReleasePlan, codes_path: Path) -> Path:
    """The DP boundary. Returns the measurement folder; never measures twice."""
    folder = plan.release_dir() / "measurement"
    if (folder / COMPLETE).exists():
        return folder
    codes = EncodedTable.from_parquet(codes_path, plan.schema)
    ledger = Ledger(plan.budget, plan.charges)
    m = plan.method().measure(codes, ledger, plan.rng("measure"))
    unspent = {c.stage for c in ledger.planned} - {c.stage for c in ledger.spent}
    if unspent:
        raise ReleaseError(f"method {plan.method_name!r} did not spend planned stages {sorted(unspent)}")
    with _complete_folder(folder) as tmp:
        m.save(tmp)
        (tmp / "ledger.json").write_text(json.dumps(ledger.to_dict(), indent=2, sort_keys=True) + "\n")
    return folder


def synthesize_stage(plan: ReleasePlan, measurement_dir: Path) -> Path:
    """Post-processing of the measurement only: synthetic codes, then values."""
    folder = plan.release_dir() / "synthetic"
    if (folder / COMPLETE).exists():
        return folder
    m = Measurement.load(measurement_dir)
    rng = plan.rng("synthesize")
    synth = plan.method().synthesize(m, plan.schema, plan.config.rows, rng)
    if plan.options.get("correct_marginals"):
        synth = correct_to_measurement(synth, m, plan.rng("correct"))
    with _complete_folder(folder) as tmp:
        synth.to_parquet(tmp / "synthetic-codes.parquet")
        table = decode(synth, plan.rng("decode"))
        table.to_parquet(tmp / "synthetic.parquet", index=False, compression="zstd")
        write_csv(table, plan.schema, tmp / "synthetic.csv")
    return folder


def correct_to_measurement(synth: EncodedTable, m: Measurement, rng) -> EncodedTable:
    """Marginal correction (post-processing): reweight the synthetic rows so that their
    marginals come as close as possible to the measurement's DP marginals (QP, since
    noisy marginals are rarely exactly reachable), then resample as many rows."""
    from .postprocess import correct_marginals

    if not m.marginals:
        raise ReleaseError(
            f"correct_marginals needs a measurement with marginals; method {m.method!r} has none"
        )
    schema = synth.schema
    targets = {
        tuple(schema.index(c) for c in attrs): np.clip(np.asarray(counts, dtype=float), 0.0, None)
        for attrs, counts in m.marginals.items()
    }
    result = correct_marginals(synth.codes.astype(np.int64), targets, rng=rng, method="qp")
    return EncodedTable(schema=schema, codes=np.asarray(result.samples).astype(synth.codes.dtype))


def validate_stage(plan: ReleasePlan, synthetic_dir: Path, measurement_dir: Path) -> dict[str, Any]:
    """The Great Expectations gate: record validity and accuracy against the DP measurement.

    The result is kept in the private workspace; a failed gate raises and nothing is
    published. Data Docs are rendered for the bundle only when the gate passes.
    """
    from .gate import run_gate

    m = Measurement.load(measurement_dir)
    codes = EncodedTable.from_parquet(synthetic_dir / "synthetic-codes.parquet", plan.schema)
    table = pd.read_parquet(synthetic_dir / "synthetic.parquet")
    folder = plan.release_dir()
    docs = folder / "data-docs"
    if docs.exists():
        shutil.rmtree(docs)
    summary = run_gate(table, codes, m, plan.config.rows, dict(plan.config.gate) or None, docs=docs)
    _write_atomic(folder / "validation.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    if not summary["success"]:
        worst = sorted(
            (e for e in summary["marginal_errors"] if e["tvd"] > e["threshold"]),
            key=lambda e: e["threshold"] - e["tvd"],
        )
        detail = f" (marginals over threshold: {', '.join(e['marginal'] for e in worst[:5])})" if worst else ""
        raise ValidationFailed(
            f"validation failed: {', '.join(summary['failed'])}{detail}; nothing was published, "
            f"{BudgetSpent.NOTE} (details: validation.json in the private workspace's release folder, "
            f"which {plan.config.workspace / 'names' / (plan.name + '.json')} names)"
        )
    return summary


class ValidationFailed(BudgetSpent):
    """The gate failed: the release is not publishable (its budget was spent measuring)."""


INTERNAL_LABEL = "INTERNAL - NOT FOR PUBLICATION: computed from the raw data, not differentially private"


def internal_report_stage(plan: ReleasePlan, codes_path: Path, synthetic_dir: Path) -> Path:
    """Utility against the raw data, written only to the private workspace."""
    from .metrics import complete_share, tvd_by_k

    real = EncodedTable.from_parquet(codes_path, plan.schema)
    synth = EncodedTable.from_parquet(synthetic_dir / "synthetic-codes.parquet", plan.schema)
    ks = tuple(k for k in (1, 2, 3) if k <= len(plan.schema.columns))
    missing = plan.schema.missing_codes
    report = {
        "label": INTERNAL_LABEL,
        "release": plan.name,
        "tvd_by_k": {str(k): v for k, v in tvd_by_k(real.codes, synth.codes, plan.schema.cardinalities, ks).items()},
        "complete_share": {"real": complete_share(real.codes, missing), "synthetic": complete_share(synth.codes, missing)},
    }
    path = plan.release_dir() / "internal-utility-report.json"
    _write_atomic(path, json.dumps(report, indent=2, sort_keys=True) + "\n")
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
    if (folder / "data-docs").is_dir():
        files["data-docs"] = folder / "data-docs"
    rows = pq.ParquetFile(str(files["synthetic.parquet"])).metadata.num_rows
    manifest = {
        "name": plan.name,
        "method": plan.method_name,
        "parameters": plan.params,
        "schema": plan.schema.name,
        "schema_sha256": plan.schema.fingerprint(),
        "privacy": {
            "epsilon": plan.budget.epsilon,
            "delta": plan.budget.delta,
            "rho": plan.budget.rho,
            "rho_spent": ledger["rho_spent"],
            "epsilon_spent": ledger["epsilon_spent"],
            "accounting": "zCDP, converted with Canonne-Kamath-Steinke (2020)",
            "ledger": ledger["stages"],
            **_privacy_statement(m_meta),
            **({"notes": list(plan.warnings)} if plan.warnings else {}),
            **({"dataset": dict(dataset)} if dataset is not None else {}),
        },
        "postprocessing": dict(plan.options),
        "rows": rows,
        "rows_requested": plan.config.rows,
        "seed_commitment": seed_commitment(plan.seed, plan.material),
        "validation": {k: validation[k] for k in ("success", "statistics", "thresholds") if k in validation},
        "timings": dict(timings),
    }

    def report(full_manifest: Mapping[str, Any]) -> str:
        from .report import build_report

        codes = EncodedTable.from_parquet(synthetic_dir / "synthetic-codes.parquet", plan.schema)
        return build_report(full_manifest, plan.schema, codes, Measurement.load(measurement_dir), validation)

    key = read_sign_key(plan.config.sign_key) if plan.config.sign_key is not None else None
    return publish_release(Path(plan.config.out), plan.name, files, manifest, extra={"report.html": report},
                           sign_key=key)


def _privacy_statement(m_meta: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's statement fields, from the measurement's typed statement."""
    st = PrivacyStatement.from_dict(m_meta["statement"])
    out: dict[str, Any] = {"differentially_private": st.differentially_private, "guarantee": st.kind,
                           "headline": st.headline()}
    if st.neighbours:
        out["neighbours"] = st.neighbours
    if st.detail:
        out["statement"] = st.detail
    return out


@contextmanager
def _complete_folder(folder: Path) -> Iterator[Path]:
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


def run_release(config: ReleaseConfig, progress: Callable[[str], None] | None = None) -> Path:
    """All stages in order, without Prefect. Returns the published folder.

    ``progress`` receives one line per stage start and end (names and seconds only).
    """
    timings: dict[str, float] = {}
    say = progress or (lambda line: None)

    def timed(stage: str, fn, *args):
        say(f"{stage}: started")
        t0 = time.perf_counter()
        out = fn(*args)
        timings[stage] = round(time.perf_counter() - t0, 6)
        say(f"{stage}: done in {timings[stage]:.2f} s")
        return out

    plan = timed("prepare", prepare, config)
    for warning in plan.warnings:
        say(f"warning: {warning}")
    with claim_name(plan):
        codes = timed("encode", encode_stage, Path(config.data), plan.schema, config.workspace, plan.data_sha256)
        dataset = charge_dataset(plan)
        with spent_on_failure("measure"):
            mdir = timed("measure", measure_stage, plan, codes)
        if (advice := utility_warning(plan, mdir)) is not None:  # before anything is published
            say(f"warning: {advice}")
        with spent_on_failure("synthesize"):
            sdir = timed("synthesize", synthesize_stage, plan, mdir)
        with spent_on_failure("validate"):
            summary = timed("validate", validate_stage, plan, sdir, mdir)
        if config.internal_report:
            with spent_on_failure("internal report"):
                timed("internal_report", internal_report_stage, plan, codes, sdir)
        with spent_on_failure("publish"):
            return publish_stage(plan, mdir, sdir, summary, timings, dataset.to_manifest())
