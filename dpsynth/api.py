"""The Python API: one call for a release, one to open a published release.

``release`` accepts a DataFrame or a file and a schema (object, dict or file), and runs
the library pipeline (:func:`dpsynth.pipeline.run_release`, the same stages the CLI and
the Prefect flow run). A DataFrame is written as Parquet into the private workspace,
never into the output folder. ``load_release`` verifies a release (hashes, schema,
ledger) before it returns it, and refuses one that does not check out.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import pandas as pd

from .publish.bundle import MANIFEST, sha256_file
from .rows.encoding import DataError
from .pipeline import DEFAULT_DELTA, ReleaseConfig, default_workspace, no_cap_warning, run_release
from .pipeline.config import auto_choice
from .pipeline.messages import public_errors
from .pipeline.stages import write_atomic
from .privacy.budget import Charge, Ledger, stated_budget
from .progress import Console, fmt, note, reporting
from .privacy.rng import MIN_SEED_BYTES
from .privacy.registry import registry_path
from .schema import Schema, load_schema, schema_from_dict
from .privacy.workspace import private_workspace
from .privacy.workspace_key import opaque_key

__all__ = ["Release", "ReleaseVerificationError", "ReleaseWarning", "load_release", "release"]


class ReleaseVerificationError(ValueError):
    """A release folder whose files, schema or ledger do not match its manifest."""


class ReleaseWarning(UserWarning):
    """A release went through but something deserves attention (no lifetime cap on the
    dataset, a predicted loss to independent columns, ...): the CLI's ``warning:`` lines."""


class _ApiConsole(Console):
    """Progress lines on stderr (none when quiet); warnings as :class:`ReleaseWarning`."""

    def warning(self, text: str) -> None:
        """Issues ``text`` through :mod:`warnings` (the caller's filters decide what is shown)."""
        warnings.warn(text, ReleaseWarning, stacklevel=2)

    def note(self, text: str) -> None:
        """Shown with the progress lines (the registry is also on ``Release.registry``)."""
        if self._show:
            super().note(text)


@dataclass(frozen=True, kw_only=True)
class Release:
    """A published release, read back: the synthetic table, its manifest and ledger."""

    path: Path
    manifest: Mapping[str, Any]
    synthetic: pd.DataFrame
    ledger: Ledger
    report_path: Path
    #: The privacy registry this run charged (a private local path, never published);
    #: None for a release opened with :func:`load_release`.
    registry: Path | None = None

    @property
    def name(self) -> str:
        """The release's name (its folder's name)."""
        return str(self.manifest["name"])

    @property
    def epsilon_spent(self) -> float:
        """The epsilon the release's ledger spent, as its manifest states it (exact; shown rounded)."""
        return float(self.manifest["privacy"]["epsilon_spent"])

    def __repr__(self) -> str:
        """One short line: name, method, rows, epsilon spent of the budget (rounded), folder."""
        privacy = self.manifest.get("privacy", {})
        budget = privacy.get("epsilon")
        spent = fmt(self.epsilon_spent) + (f" of {fmt(budget)}" if budget is not None else "")
        dp = "" if privacy.get("differentially_private", True) else ", NOT DP"
        return (f"Release({self.name!r}, method={self.manifest.get('method')!r}, rows={len(self.synthetic):,}, "
                f"epsilon_spent={spent}{dp}, path='{self.path}')")

    __str__ = __repr__


def release(
    data: pd.DataFrame | str | os.PathLike[str],
    schema: Schema | Mapping[str, Any] | str | os.PathLike[str],
    *,
    epsilon: float,
    method: str = "auto",
    delta: float = DEFAULT_DELTA,
    rows: int | None = None,
    params: Mapping[str, Any] | None = None,
    seed: bytes | str | os.PathLike[str] | None = None,
    name: str | None = None,
    out: str | os.PathLike[str] = "releases",
    workspace: str | os.PathLike[str] | None = None,
    gate: Mapping[str, float] | None = None,
    internal_report: bool = False,
    accept_data_derived_schema: bool = False,
    quiet: bool = False,
    **settings: Any,
) -> Release:
    """Runs a DP release and returns it, read back from the published folder.

    ``seed`` is the secret for a reproducible build: bytes (at least 16) or the path of a
    seed file. Every public problem (schema, unreviewed draft, method, parameter, budget,
    name) raises before any budget is spent; the error names what to change. Only a
    :class:`dpsynth.pipeline.BudgetSpent` means this release's budget was spent; no
    exception names a file of the private workspace. Any other
    release setting (``sign_key``, ``dataset``, ``data_docs=True`` to also publish the
    gate's Great Expectations Data Docs, ...: the fields of
    :class:`dpsynth.pipeline.ReleaseConfig`) passes through ``settings``. The workspace
    defaults to the user's (:func:`dpsynth.privacy.workspace.default_workspace`), as on the CLI.
    A schema still marked ``drafted_from_data`` (read from the rows) is refused, naming its
    columns, unless ``accept_data_derived_schema=True``: the release is then labelled NOT
    differentially private.

    Progress (what ``auto`` chose, stage lines, counters of long stages) goes to stderr as on
    the command line; ``quiet=True`` silences it. Warnings (e.g. a dataset without a lifetime
    privacy cap) are issued as :class:`ReleaseWarning` either way.
    """
    ws = Path(workspace) if workspace is not None else default_workspace()
    schema_obj = _as_schema(schema)
    schema_obj.require_reviewed(accept_data_derived_schema)  # before the data is touched
    # Owner-only, whatever the umask: the frame's Parquet copy, the schema, the seed file too.
    # No workspace path, key or input name in what is raised.
    with public_errors(ws), private_workspace(ws):
        data_file = _as_data_file(data, ws, schema_obj)
        # A DataFrame's file in the workspace is "data" in every message.
        names = {} if isinstance(data, (str, os.PathLike)) else {str(data_file): "data"}
        with public_errors(ws, names), _seed_file(seed, ws) as seed_path:
            config = ReleaseConfig.from_arguments(
                data=data_file, schema=_schema_file(schema, schema_obj, ws), method=method,
                epsilon=epsilon, delta=delta, rows=rows, params=params, seed_file=seed_path, name=name, out=out,
                workspace=ws, internal_report=internal_report, gate=gate,
                accept_data_derived_schema=accept_data_derived_schema, **settings,
            )
            with reporting(_ApiConsole(show=not quiet)):
                choice = auto_choice(config)
                if choice is not None:
                    note(choice.preview())
                folder = run_release(config)
    out = replace(_read_release(folder), registry=registry_path(ws).absolute())
    dataset = out.manifest.get("privacy", {}).get("dataset") or {}
    if dataset and dataset.get("cap_epsilon") is None:
        warnings.warn(no_cap_warning(dataset), ReleaseWarning, stacklevel=2)
    return out


def load_release(path: str | os.PathLike[str]) -> Release:
    """Opens a published release after verifying it (``dpsynth verify``); refuses a
    release whose files do not match its manifest, or whose ledger is over budget."""
    from .publish.verify import verify_release

    folder = Path(path)
    problems = verify_release(folder)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ReleaseVerificationError(
            f"release {folder} does not verify: {problems[0]}{more}. It was changed after publication "
            "or is incomplete: do not use it; fetch it again from its publisher, or run "
            f"`dpsynth verify {folder}` to list every problem"
        )
    return _read_release(folder)


def _read_release(folder: Path) -> Release:
    folder = folder.absolute()
    manifest = json.loads((folder / MANIFEST).read_text())
    privacy = manifest["privacy"]
    ledger = Ledger(stated_budget(privacy),
                    [Charge.from_dict(s) for s in privacy["ledger"]])
    for stage in privacy["ledger"]:
        if stage.get("spent", True):
            ledger.spend(stage["stage"])
    return Release(path=folder, manifest=manifest, synthetic=pd.read_parquet(folder / "synthetic.parquet"),
                   ledger=ledger, report_path=folder / "report.html")


# --- inputs --------------------------------------------------------------------


def _as_schema(schema: Schema | Mapping[str, Any] | str | os.PathLike[str]) -> Schema:
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, Mapping):
        return schema_from_dict(schema, source="schema")
    if isinstance(schema, (str, os.PathLike)):
        return load_schema(schema)
    raise TypeError(f"schema must be a dpsynth Schema, a dict or a path to a YAML file, got {type(schema).__name__}")


def _schema_file(raw: Any, schema: Schema, workspace: Path) -> Path:
    """The schema as a file for the pipeline: a given path as is, else written to the workspace."""
    if isinstance(raw, (str, os.PathLike)):
        return Path(raw)
    folder = workspace / "schemas"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{schema.fingerprint()[:24]}.yaml"
    if not path.exists():
        write_atomic(path, schema.to_yaml().encode())
    return path


def _as_data_file(data: Any, workspace: Path, schema: Schema) -> Path:
    """A path as is; a DataFrame as Parquet in the private workspace, named by a keyed hash
    of its content under the workspace secret (the same frame gives the same file, so a
    re-run reuses the cached measurement; the name is no hash of the raw input)."""
    if isinstance(data, (str, os.PathLike)):
        return Path(data)
    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"data must be a pandas DataFrame or a path to a .csv/.parquet file, got {type(data).__name__}")
    bad = [c for c in data.columns if not isinstance(c, str)]
    if bad:
        raise DataError(f"data: column names must be text; rename the columns at positions "
                        f"{[list(data.columns).index(c) for c in bad]}")
    dupes = sorted(set(data.columns[data.columns.duplicated()]))
    if dupes:
        raise DataError(f"data: columns {dupes} appear more than once; rename or drop the copies")
    folder = workspace / "inputs"
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".frame-", suffix=".parquet")
    os.close(fd)
    try:
        _write_frame(data, Path(tmp), schema)
        path = folder / f"{opaque_key(workspace, 'input-frame', sha256_file(Path(tmp)))}.parquet"
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _write_frame(df: pd.DataFrame, path: Path, schema: Schema) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrow_errors = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError)
    try:
        table = pa.Table.from_pandas(df, preserve_index=False)
    except arrow_errors:
        # Arrow's message can quote a cell: name only the column.
        columns = {c.name: c for c in schema.columns}
        fixed = {}
        for col in df.columns:
            series = _whole_numbers_in_range(df[col], columns.get(col))
            try:
                fixed[col] = pa.array(series, from_pandas=True)
            except arrow_errors:
                raise DataError(f"data: column {col!r} mixes value types that cannot form one column; "
                                f"convert it first, e.g. df[{col!r}] = df[{col!r}].astype('string')") from None
        table = pa.table(fixed)
    pq.write_table(table, str(path))


_INT64 = (-(2**63), 2**63 - 1)


def _whole_numbers_in_range(series: pd.Series, column: Any) -> pd.Series:
    """An object column of numbers holding a Python int beyond int64 (e.g. ``10**30``), mapped
    cell by cell so that it is stored as the column would be without that row (a row-level
    oddity, never an error: DESIGN.md, decision 2). For a numeric column the numbers become
    floats (out of the float range: +-inf), which encoding clamps to the bounds; otherwise
    an integer is clamped to int64, which no category lists, so it counts as unknown."""
    if series.dtype != object:
        return series
    values = series.to_numpy()

    def number(v: Any) -> bool:
        return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))

    if not all(number(v) or v is None or v is pd.NA for v in values):
        return series
    big = [isinstance(v, int) and not isinstance(v, bool) and not _INT64[0] <= v <= _INT64[1] for v in values]
    if not any(big):
        return series
    if getattr(column, "type", None) == "numeric" or any(isinstance(v, float) for v in values):
        def as_float(v: Any) -> Any:
            if not isinstance(v, int) or isinstance(v, bool):
                return v
            return float(v) if abs(v) < 2**1023 else (np.inf if v > 0 else -np.inf)

        return pd.Series([as_float(v) for v in values], dtype="float64", index=series.index)
    clamped = [min(max(v, _INT64[0]), _INT64[1]) if isinstance(v, int) else v for v in values]
    return pd.Series(clamped, dtype="Int64", index=series.index)


@contextmanager
def _seed_file(seed: bytes | str | os.PathLike[str] | None, workspace: Path) -> Iterator[Path | None]:
    """A seed given as bytes lives in a private temporary file only for the run."""
    if seed is None or isinstance(seed, (str, os.PathLike)):
        yield Path(seed) if seed is not None else None
        return
    if not isinstance(seed, (bytes, bytearray)):
        raise TypeError(f"seed must be bytes or the path of a seed file, got {type(seed).__name__}")
    if len(bytes(seed).strip()) < MIN_SEED_BYTES:
        raise ValueError(f"seed must hold at least {MIN_SEED_BYTES} secret bytes (e.g. os.urandom(32))")
    workspace.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=workspace, prefix=".seed-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(bytes(seed))
        yield Path(tmp)
    finally:
        Path(tmp).unlink(missing_ok=True)
