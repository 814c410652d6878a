"""What a release depends on: its config, and the checked plan derived from it.

:class:`ReleaseConfig` is the one definition of a release's settings; the CLI, the
Prefect flow and :func:`dpsynth.release` all build it through
:meth:`ReleaseConfig.from_arguments`, and the flow's parameters are
:meth:`ReleaseConfig.to_arguments`. :func:`prepare` turns a config into a
:class:`ReleasePlan` with every public check done and no row read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..publish.bundle import read_sign_key
from ..rows.dask_runner import parse_address
from ..rows.encode_parts import input_files, input_sha256
from ..rows.encoding import check_file
from ..rows.rowsource import DEFAULT_CHUNK_ROWS
from ..methods import METHODS, get_method, params_to_dict
from ..methods.auto import AUTO, Choice, choose
from ..methods.base import Method, ParamError, convert_param
from ..precheck import check_disk, check_installed, check_options, check_rows, noise_warnings
from ..privacy.budget import Budget, Charge, Ledger, check_delta, delta_warning, is_pure
from ..privacy.rng import read_seed_file, seed_tag, stage_rng
from ..privacy.registry import check_dataset_name, check_period
from ..schema import Schema, load_schema
from ..privacy.schema_source import require_draft_charged
from ..privacy.workspace import default_workspace
from ..privacy.workspace_key import opaque_key, workspace_secret

__all__ = [
    "DEFAULT_DELTA",
    "BudgetSpent",
    "ReleaseConfig",
    "ReleaseError",
    "ReleasePlan",
    "ValidationFailed",
    "auto_choice",
    "default_workspace",
    "prepare",
    "resolve_method",
    "split_params",
]

DEFAULT_DELTA = 1e-6


class ReleaseError(RuntimeError):
    """A release that must not go on (the message never quotes a row)."""


class BudgetSpent(ReleaseError):
    """A failure after the measure stage began: the release's budget counts as spent.

    The command line exits 1 on it (never 2, which promises that nothing was measured),
    and its message says that the budget was spent.
    """

    NOTE = "the privacy budget of this release was spent"


class PartlySpent(BudgetSpent):
    """The method refused after spending only part of its plan (``sds`` after its DP record
    count): the registry holds only that part; the message says what it was."""


class ValidationFailed(BudgetSpent):
    """The gate failed: the release is not publishable (its budget was spent measuring)."""


# Fields holding a path; from_arguments accepts text for them, to_arguments gives text.
_PATH_FIELDS = ("data", "schema", "out", "seed_file", "workspace", "sign_key")
_OPTIONAL_PATHS = ("seed_file", "workspace", "sign_key")  # empty text leaves them unset


@dataclass(frozen=True, kw_only=True)
class ReleaseConfig:
    """Everything a release depends on (public parameters plus paths)."""

    data: Path
    schema: Path
    epsilon: float
    out: Path
    #: A method name, or ``auto`` (the default): chosen from the schema, epsilon and delta
    #: only, before any row is read (:func:`dpsynth.methods.auto.choose`).
    method: str = AUTO
    delta: float = DEFAULT_DELTA
    rows: int | None = None
    params: Mapping[str, str] = field(default_factory=dict)
    seed_file: Path | None = None
    name: str | None = None
    workspace: Path = field(default_factory=default_workspace)
    internal_report: bool = False
    data_docs: bool = False  # GE Data Docs of the gate in the bundle (off: 0.3 MB and seconds saved)
    gate: Mapping[str, float] = field(default_factory=dict)
    sign_key: Path | None = None
    dataset: str | None = None  # registry identity (default: the schema's name)
    period: str | None = None  # a per-period budget declared by the caller (deployments)
    period_epsilon: float | None = None
    #: Rows read at once by encode and by measure (memory bound; results do not depend on it).
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    #: Dask scheduler (``tcp://host:8786``) or ``local``/``local:N`` for a LocalCluster;
    #: None: this process. Results do not depend on it (docs/scale.md).
    dask_address: str | None = None
    #: Release on a schema whose domain was read from the rows (``drafted_from_data``):
    #: allowed only with this opt-in, and labelled NOT differentially private everywhere.
    accept_data_derived_schema: bool = False

    def __post_init__(self) -> None:
        if self.rows is not None and (isinstance(self.rows, bool) or int(self.rows) < 1):
            raise ValueError(f"rows must be a whole number >= 1, got {self.rows!r}")
        if self.name is not None:
            check_name(self.name)
        if self.dataset is not None:
            check_dataset_name(self.dataset)
        check_period(self.period, self.period_epsilon)
        if isinstance(self.chunk_rows, bool) or not isinstance(self.chunk_rows, int) or self.chunk_rows < 1:
            raise ValueError(f"chunk_rows must be a whole number >= 1, got {self.chunk_rows!r}")
        if self.dask_address is not None:
            parse_address(self.dask_address)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The config's settings, in declaration order (the flow's parameters follow them)."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_arguments(cls, **arguments: Any) -> ReleaseConfig:
        """The one mapping from loose arguments to a config (CLI, flow and API use it).

        Paths may be text; ``None`` (or empty text for an optional path) stands for a
        setting's default (the workspace's is :func:`dpsynth.privacy.workspace.default_workspace`: ``$DPSYNTH_WORKSPACE``, else one per user), and ``params``/``gate`` may be any mapping or ``None``.
        An unknown argument is refused by name.
        """
        unknown = sorted(set(arguments) - set(cls.field_names()))
        if unknown:
            raise TypeError(f"unknown release settings {unknown}; known: {list(cls.field_names())}")
        values = {k: v for k, v in arguments.items() if v is not None and not (k in _OPTIONAL_PATHS and v == "")}
        for key in _PATH_FIELDS:
            if key in values:
                values[key] = Path(values[key])
        for key in ("params", "gate"):
            if key in values:
                values[key] = dict(values[key])
        return cls(**values)

    def to_arguments(self) -> dict[str, Any]:
        """The config as plain values (paths as text), e.g. for Prefect flow parameters,
        which the Prefect API stores; ``from_arguments`` maps them back."""
        out: dict[str, Any] = {}
        for key in self.field_names():
            value = getattr(self, key)
            if key in _PATH_FIELDS:
                value = str(value) if value is not None else None
            elif isinstance(value, Mapping):
                value = dict(value)
            out[key] = value
        return out


def check_name(name: str) -> None:
    """Refuses a release name that is not a plain folder name."""
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
    #: What ``--method auto`` would choose from the schema alone (None when a method was
    #: named); the release's own choice, made after its DP record count, is in its measurement.
    choice: Choice | None = None
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
        """The generator of one stage, bound to the seed and the release material."""
        return stage_rng(self.seed, self.material, stage)

    def opaque(self, label: str) -> str:
        """A name for this release safe to hand to Prefect: keyed by the workspace secret,
        so it is not a hash of the raw input (DESIGN.md, decision 6)."""
        return opaque_key(self.config.workspace, label, self.key)

    def method(self) -> Method:
        """The configured method instance."""
        return get_method(self.method_name, self.params)

    def release_dir(self) -> Path:
        """This release's private folder in the workspace."""
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


def resolve_method(config: ReleaseConfig, schema: Schema) -> tuple[str, dict[str, str], Choice | None]:
    """The method name and ``--param`` text a release runs: the config's own, or ``auto``
    with the choice it would make from the schema, epsilon and delta alone (a preview: the
    release decides after its DP record count, :mod:`dpsynth.methods.auto_method`). With
    ``auto`` only post-processing options may be passed: a method parameter needs a named method."""
    params = dict(config.params)
    if config.method != AUTO:
        return config.method, params, None
    own = sorted(k for k in params if k not in POSTPROCESS_OPTIONS)
    if own:
        raise ParamError(f"parameters {own} belong to a method: name it with --method (Python: method=...); "
                         f"--method auto only takes post-processing options {sorted(POSTPROCESS_OPTIONS)}")
    choice = choose(schema, float(config.epsilon), float(config.delta))
    return AUTO, params, choice


def auto_choice(config: ReleaseConfig) -> Choice | None:
    """What ``auto`` will choose for this config (None when a method is named): reads
    the schema file only, for the line the CLI and API print before a release."""
    if config.method != AUTO:
        return None
    return resolve_method(config, load_schema(config.schema))[2]
def _public_delta_warning(method_params: Mapping[str, Any], charges: tuple[Charge, ...],
                          delta: float) -> tuple[str, ...]:
    """Before measuring, from a row count the data owner declared public (``public_n``);
    nothing for a pure epsilon-DP plan, whose guarantee has delta 0."""
    if is_pure(charges):
        return ()
    try:
        n = int(method_params["public_n"])
    except (KeyError, TypeError, ValueError):
        return ()
    note = delta_warning(delta, n, "the declared public row count")
    return (note,) if note else ()


def parquet_rows(data: str | Path) -> int | None:
    """The input's row count from Parquet metadata (no row read), or None (CSV, or unreadable:
    the input checks that follow name the problem)."""
    try:
        files = input_files(data)
        if not all(f.suffix.lower() == ".parquet" for f in files):
            return None
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(str(f)).metadata.num_rows for f in files)
    except Exception:  # noqa: BLE001 - a public pre-check only; the file checks report errors
        return None


@dataclass(frozen=True)
class PublicChecks:
    """What :func:`check_public` established (and :func:`prepare` builds the plan from)."""

    schema: Schema
    method: Method
    options: dict[str, Any]
    budget: Budget
    charges: tuple[Charge, ...]
    seed: bytes | None
    name: str
    method_params: Mapping[str, Any]
    choice: Any = None  # auto's choice (dpsynth.methods.auto.Choice), None for a named method


def check_public(config: ReleaseConfig) -> PublicChecks:
    """Every public check of :func:`prepare` except hashing the input: schema, method,
    parameters, post-processing options, budget plan, memory of the synthetic table, seed,
    the input's columns and types (and a CSV cut in its last row), name. Cheap: the CLI
    runs it before starting Prefect, so a typo is refused at once on every engine."""
    schema = load_schema(config.schema)
    # a data-derived domain (`schema infer` without DP): refused before any row is read or
    # anything charged, unless the caller opted in to a release labelled NOT DP
    schema.require_reviewed(bool(config.accept_data_derived_schema))
    require_draft_charged(schema, Path(config.workspace), config.dataset or schema.name)
    if config.delta != 0:  # delta 0: a pure epsilon-DP policy (only pure-epsilon methods run)
        check_delta(config.delta)
    method_name, params, choice = resolve_method(config, schema)  # auto: schema, epsilon, delta only
    method_params, options = split_params(method_name, params, config.rows)
    method = get_method(method_name, method_params)
    check_options(type(method), options)
    check_installed(type(method), options, config.dask_address)
    budget = Budget(epsilon=float(config.epsilon), delta=float(config.delta))
    if budget.pure and not type(method).pure_epsilon:
        pure = sorted(n for n in METHODS if getattr(METHODS[n], "pure_epsilon", False))
        raise ParamError(f"--delta 0 asks for pure epsilon-DP, which method {method.name!r} does not give: "
                         f"pass --method auto (the default) or one of {pure}, or a --delta above 0")
    charges = method.plan(schema, budget)
    Ledger(budget, charges)  # refuses a plan over budget
    streams = (getattr(method, "streams_synthesis", False) and getattr(method, "chunks_synthesis", True)
               and not options.get("correct_marginals"))
    chunk = method.synthesis_chunk_rows(schema) if streams and hasattr(method, "synthesis_chunk_rows") else None
    input_rows = parquet_rows(config.data) if config.rows is None else None
    check_rows(config.rows, schema, streams=streams, input_rows=None if streams and chunk is None else input_rows,
               bytes_per_cell=getattr(method, "synthesis_bytes_per_cell", None), chunk_rows=chunk)
    check_disk(config.rows if config.rows is not None else input_rows, schema, [config.workspace, Path(config.out)],
               what=None if config.rows is not None else f"a synthetic table as large as the input ({input_rows} rows)")
    seed = read_seed_file(config.seed_file) if config.seed_file is not None else None
    if config.sign_key is not None:
        read_sign_key(config.sign_key)  # refused now, not at publishing
    if not Path(config.data).exists():
        raise ReleaseError(f"input {config.data}: no such file")
    for f in input_files(config.data):
        check_file(f, schema)
    check_dataset_name(config.dataset or schema.name)  # the registry's identity, refused now if misspelt
    name = config.name or f"{schema.name}-{method.name}-eps{config.epsilon:g}"
    check_name(name)
    target = Path(config.out) / name
    if target.exists():
        raise ReleaseError(f"release {target} already exists: releases are never overwritten; pass another --name")
    return PublicChecks(schema=schema, method=method, options=options, budget=budget, charges=tuple(charges),
                        seed=seed, name=name, method_params=method_params, choice=choice)


def prepare(config: ReleaseConfig) -> ReleasePlan:
    """All public checks (:func:`check_public`), then the input's hash: the release plan.

    Raises before any budget is spent; reads no row (only the file's header or Parquet
    schema, and its hash).
    """
    c = check_public(config)
    schema, method, options, budget, charges, seed, name = (c.schema, c.method, c.options, c.budget, c.charges,
                                                            c.seed, c.name)
    return ReleasePlan(
        config=config,
        schema=schema,
        method_name=method.name,
        params=params_to_dict(method.params),
        options=options,
        warnings=noise_warnings(charges, budget.epsilon) + _public_delta_warning(c.method_params, charges,
                                                                                     budget.delta),
        budget=budget,
        charges=charges,
        name=name,
        choice=c.choice,
        seed=seed,
        data_sha256=input_sha256(config.data),
    )
