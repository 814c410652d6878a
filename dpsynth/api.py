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
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import pandas as pd

from .publish.bundle import MANIFEST, sha256_file
from .rows.encoding import DataError
from .pipeline import DEFAULT_DELTA, ReleaseConfig, default_workspace, run_release
from .pipeline.stages import write_atomic
from .privacy.budget import Budget, Charge, Ledger
from .privacy.rng import MIN_SEED_BYTES
from .schema import Schema, load_schema, schema_from_dict

__all__ = ["Release", "ReleaseVerificationError", "load_release", "release"]


class ReleaseVerificationError(ValueError):
    """A release folder whose files, schema or ledger do not match its manifest."""


@dataclass(frozen=True, kw_only=True)
class Release:
    """A published release, read back: the synthetic table, its manifest and ledger."""

    path: Path
    manifest: Mapping[str, Any]
    synthetic: pd.DataFrame
    ledger: Ledger
    report_path: Path

    @property
    def name(self) -> str:
        """The release's name (its folder's name)."""
        return str(self.manifest["name"])

    @property
    def epsilon_spent(self) -> float:
        """The epsilon the release's ledger spent, as its manifest states it."""
        return float(self.manifest["privacy"]["epsilon_spent"])


def release(
    data: pd.DataFrame | str | os.PathLike[str],
    schema: Schema | Mapping[str, Any] | str | os.PathLike[str],
    *,
    method: str,
    epsilon: float,
    delta: float = DEFAULT_DELTA,
    rows: int | None = None,
    params: Mapping[str, Any] | None = None,
    seed: bytes | str | os.PathLike[str] | None = None,
    name: str | None = None,
    out: str | os.PathLike[str] = "releases",
    workspace: str | os.PathLike[str] | None = None,
    gate: Mapping[str, float] | None = None,
    internal_report: bool = False,
    **settings: Any,
) -> Release:
    """Runs a DP release and returns it, read back from the published folder.

    ``seed`` is the secret for a reproducible build: bytes (at least 16) or the path of a
    seed file. Every public problem (schema, unreviewed draft, method, parameter, budget,
    name) raises before any budget is spent; the error names what to change. Any other
    release setting (``sign_key``, ``dataset``, ``data_docs=True`` to also publish the
    gate's Great Expectations Data Docs, ...: the fields of
    :class:`dpsynth.pipeline.ReleaseConfig`) passes through ``settings``.
    """
    ws = Path(workspace) if workspace is not None else default_workspace()
    schema_obj = _as_schema(schema)
    schema_obj.require_reviewed()  # before the data is touched
    with _seed_file(seed, ws) as seed_path:
        config = ReleaseConfig.from_arguments(
            data=_as_data_file(data, ws), schema=_schema_file(schema, schema_obj, ws), method=method,
            epsilon=epsilon, delta=delta, rows=rows, params=params, seed_file=seed_path, name=name, out=out,
            workspace=ws, internal_report=internal_report, gate=gate, **settings,
        )
        folder = run_release(config)
    return _read_release(folder)


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
    ledger = Ledger(Budget(epsilon=float(privacy["epsilon"]), delta=float(privacy["delta"])),
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


def _as_data_file(data: Any, workspace: Path) -> Path:
    """A path as is; a DataFrame as Parquet in the private workspace, named by its content
    hash (the same frame gives the same file, so a re-run reuses the cached measurement)."""
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
        _write_frame(data, Path(tmp))
        path = folder / f"{sha256_file(Path(tmp))[:32]}.parquet"
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _write_frame(df: pd.DataFrame, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pa.Table.from_pandas(df, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # Arrow's message can quote a cell: name only the column.
        for col in df.columns:
            try:
                pa.array(df[col], from_pandas=True)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                raise DataError(f"data: column {col!r} mixes value types that cannot form one column; "
                                f"convert it first, e.g. df[{col!r}] = df[{col!r}].astype('string')") from None
        raise DataError("data: the DataFrame cannot be stored as Parquet") from None
    pq.write_table(table, str(path))


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
