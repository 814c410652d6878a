"""Encoding an input partition by partition, in bounded memory, to Parquet files of codes.

The input is one CSV or Parquet file, or a folder of them (``*.csv`` or ``*.parquet``,
read in name order). Its **partitions** are the row groups of each Parquet file
(gathered to about ``part_rows`` rows) and each CSV file as a whole. A partition is read
``chunk_rows`` rows at a time (Parquet batches; CSV blocks of 16 MB) and each chunk is
encoded with :func:`dpsynth.rows.encoding.encode_column`, which maps every cell on its own:
the codes are those :func:`dpsynth.rows.encoding.encode` gives for the whole table.

Partition i writes ``part-<i>.parquet`` into the output folder, so a runner on a Dask
cluster encodes partitions on its workers (then the input and the output folder must be
on storage every worker reads and writes), and a large input without one is encoded on a
process pool of this machine's cores. The result is a
:class:`dpsynth.rows.rowsource.RowSource` over those files.
"""

from __future__ import annotations

import re

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .. import progress
from .encoding import DataError, _csv_header, check_file, code_dtype, encode_column, file_sha256
from .rowsource import DEFAULT_CHUNK_ROWS, RowSource, Runner, SerialRunner, row_group_runs
from ..schema import Schema

__all__ = ["InputPart", "POOL_MIN_BYTES", "input_files", "input_sha256", "input_parts", "encode_part", "encode_to_parts",
           "pooled"]

_CSV_BLOCK = 1 << 24
_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


@dataclass(frozen=True, kw_only=True)
class InputPart:
    """One partition of the raw input: row groups of a Parquet file, or a whole CSV file."""

    path: str
    kind: str  # "parquet" or "csv"
    row_groups: tuple[int, ...] = ()


def input_files(data: str | Path) -> tuple[Path, ...]:
    """The input's files: the file itself, or a folder's CSV or Parquet files in name order."""
    p = Path(data)
    if p.is_file():
        files = (p,)
    elif p.is_dir():
        files = tuple(sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in _SUFFIXES))
        if not files:
            raise DataError(f"input {p}: a folder without .csv or .parquet files")
    else:
        raise DataError(f"input {p}: no such file or folder")
    kinds = {_SUFFIXES.get(f.suffix.lower()) for f in files}
    if None in kinds:
        raise DataError(f"input {p}: unsupported file type {files[0].suffix!r} (use .csv or .parquet)")
    if len(kinds) > 1:
        raise DataError(f"input {p}: mixes CSV and Parquet files; use one kind")
    return files


def input_sha256(data: str | Path) -> str:
    """Hex sha256 of the input: the file's bytes, or each file's name and bytes' hash in order."""
    files = input_files(data)
    if Path(data).is_file():
        return file_sha256(files[0])
    h = hashlib.sha256(b"dpsynth/input-folder/v1\x00")
    for f in files:
        h.update(f.name.encode() + b"\x00" + file_sha256(f).encode() + b"\x00")
    return h.hexdigest()


def input_parts(data: str | Path, schema: Schema, part_rows: int = DEFAULT_CHUNK_ROWS) -> tuple[InputPart, ...]:
    """Partitions of the input after the public checks of every file (columns, types);
    reads no row, only CSV headers and Parquet metadata."""
    parts: list[InputPart] = []
    for f in input_files(data):
        check_file(f, schema)
        kind = _SUFFIXES[f.suffix.lower()]
        if kind == "csv":
            parts.append(InputPart(path=str(f), kind="csv"))
            continue
        meta = pq.ParquetFile(str(f)).metadata
        parts += [InputPart(path=str(f), kind="parquet", row_groups=g) for g, _ in row_group_runs(meta, part_rows)]
    return tuple(parts)


def _batches(part: InputPart, schema: Schema, chunk_rows: int) -> Iterator[pa.RecordBatch]:
    if part.kind == "parquet":
        f = pq.ParquetFile(part.path)
        yield from f.iter_batches(batch_size=chunk_rows, row_groups=list(part.row_groups),
                                  columns=list(schema.names))
        return
    names = _csv_header(Path(part.path))
    reader = pacsv.open_csv(
        part.path,
        read_options=pacsv.ReadOptions(block_size=_CSV_BLOCK),
        convert_options=pacsv.ConvertOptions(
            column_types={n: pa.string() for n in names},
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )
    yield from reader


def encode_part(job: tuple[InputPart, str], schema: Schema, chunk_rows: int) -> int:
    """Encodes one partition to the Parquet file ``job[1]``; returns its number of rows."""
    part, out = job
    dtype = code_dtype(schema.cardinalities)
    arrow_schema = pa.schema([(n, pa.from_numpy_dtype(dtype)) for n in schema.names])
    rows = 0
    try:
        with pq.ParquetWriter(out, arrow_schema, compression="zstd") as writer:
            for batch in _batches(part, schema, chunk_rows):
                if batch.num_rows == 0:
                    continue
                cols = [np.asarray(encode_column(c, batch.column(c.name)), dtype=dtype) for c in schema.columns]
                writer.write_batch(pa.record_batch(cols, schema=arrow_schema))
                rows += batch.num_rows
                progress.advance("encode", batch.num_rows, "rows")  # in this process only (not on Dask workers)
    except DataError:
        raise
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError) as exc:
        # Arrow's messages can quote a row: report only the kind of failure, and a field count.
        found = re.search(r"Expected \d+ columns, got \d+", str(exc))
        detail = f": {found.group(0).lower()} in a row (a cut or malformed line)" if found else ""
        raise DataError(f"input {part.path}: cannot be read as {part.kind} ({type(exc).__name__}){detail}") from None
    return rows


def encode_to_parts(data: str | Path, schema: Schema, out: str | Path, *, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                    runner: Runner | None = None) -> RowSource:
    """Encodes every partition of ``data`` into the folder ``out`` (created; must be empty)
    and returns the source over the codes (read in this process unless ``runner`` is given).
    Without a ``runner``, a large input (:func:`pooled`) is encoded on a process pool of this
    machine's cores, else here; each partition writes its own file, so the codes are the same
    bytes either way. Raises :class:`DataError` for an input without rows."""
    parts = input_parts(data, schema, chunk_rows)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=False)
    jobs = [(part, str(folder / f"part-{i:05d}.parquet")) for i, part in enumerate(parts)]
    if runner is not None:
        rows = runner.map(encode_part, jobs, schema, int(chunk_rows))
    elif (workers := pooled(parts)) > 1:
        rows = _on_pool(jobs, schema, int(chunk_rows), workers)
    else:
        rows = SerialRunner().map(encode_part, jobs, schema, int(chunk_rows))
    if sum(rows) == 0:
        raise DataError(f"input {data}: has no rows")
    return RowSource.from_parquet(folder, schema, chunk_rows=chunk_rows, runner=runner or SerialRunner())


#: The input size (bytes of its files) from which it is encoded on a process pool when it has
#: several partitions: starting the pool's processes costs 1-2 s, about what one core encodes of
#: 64 MiB of Parquet at 20 columns (``benchmarks/encode_pool.py``).
POOL_MIN_BYTES = 64 << 20


def pooled(parts: Sequence[InputPart]) -> int:
    """The processes to encode ``parts`` on: this machine's cores (``$DPSYNTH_SYNTH_WORKERS``;
    at most one per partition) for at least two partitions of at least :data:`POOL_MIN_BYTES`
    in all, else 1 (this process)."""
    from .pool_runner import default_workers

    files = {p.path for p in parts}
    if len(parts) < 2 or sum(Path(f).stat().st_size for f in files) < POOL_MIN_BYTES:
        return 1
    return min(default_workers(), len(parts))


def _on_pool(jobs: list[tuple[InputPart, str]], schema: Schema, chunk_rows: int, workers: int) -> list[int]:
    """The partitions encoded on a pool of ``workers`` processes, ``workers`` at a time, the
    rows counted after each round (the workers report no progress of their own)."""
    from .pool_runner import pool

    rows: list[int] = []
    with pool(workers) as runner:
        for start in range(0, len(jobs), workers):
            done = runner.map(encode_part, jobs[start : start + workers], schema, chunk_rows)
            rows += done
            progress.advance("encode", sum(done), "rows")
    return rows
