"""The synthetic table in fixed logical blocks, streamed to its files in bounded memory.

A release of ``rows`` records is cut into blocks of :data:`BLOCK_ROWS` records (the last
may be shorter). Block ``i`` is drawn with its own generator, derived from the stage's
generator and ``i`` alone (:class:`BlockRngs`), and written as its own Parquet row group;
its values are decoded with a generator derived the same way. The files therefore hold
the same bytes whatever ``chunk_rows`` (how many blocks are held at once) is: chunking
only changes how much is in memory. Design notes: ``docs/scale.md``.
"""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .. import progress
from ..rows.csv_out import csv_block, csv_block_writes
from ..rows.encoding import DecodedColumn, EncodedTable, code_dtype, csv_header, decode, decode_columns, write_csv
from ..rows.rowsource import Runner
from ..schema import Schema
from .parts import concat_csv, concat_parquet

__all__ = ["BLOCK_ROWS", "BlockJob", "BlockRngs", "BlockSampler", "TableSampler", "block_sizes", "part_ranges",
           "write_part", "write_synthetic"]

#: Records per logical block (and per Parquet row group). Part of what a seed produces:
#: changing it changes a seeded release's bytes.
BLOCK_ROWS = 1 << 16


class BlockSampler(Protocol):
    """What a streaming method hands the synthesize stage: a fitted sampler.

    ``rows`` is the number of records to release; ``sample(n, rng)`` draws ``n``
    records as an ``(n, columns)`` integer array of codes, using only ``rng``."""

    rows: int

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` records of codes drawn with ``rng``."""
        ...


@dataclass
class TableSampler:
    """A whole synthetic table handed out block by block (methods that cannot stream):
    ``sample`` ignores its generator and returns the next ``n`` rows."""

    table: EncodedTable
    _next: int = 0

    @property
    def rows(self) -> int:
        """Records in the table."""
        return self.table.n

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The next ``n`` rows of the table."""
        out = self.table.codes[self._next : self._next + n]
        self._next += n
        return out


class BlockRngs:
    """Per-block generators derived from one stage generator: block ``i`` gets
    ``SeedSequence(key, spawn_key=(i,))`` with ``key`` drawn once from the stage generator."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._key = [int(x) for x in rng.integers(0, 2**32, size=8, dtype=np.uint64)]

    def __call__(self, i: int) -> np.random.Generator:
        """Block ``i``'s generator (the same for the same stage generator and ``i``)."""
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(self._key, spawn_key=(int(i),))))


def block_sizes(rows: int, block_rows: int = BLOCK_ROWS) -> list[int]:
    """Records of each logical block of a ``rows``-record table (one empty block for 0 rows)."""
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    if block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")
    full, rest = divmod(rows, block_rows)
    return [block_rows] * full + ([rest] if rest or not full else [])


def _chunks(sizes: list[int], chunk_rows: int, block_rows: int) -> Iterator[list[int]]:
    """Block indices grouped into chunks of ``max(1, chunk_rows // block_rows)`` blocks."""
    per = max(1, int(chunk_rows) // block_rows)
    for start in range(0, len(sizes), per):
        yield list(range(start, min(len(sizes), start + per)))


@dataclass(frozen=True)
class Written:
    """What :func:`write_synthetic` wrote: records and row groups."""

    rows: int
    row_groups: int


class _Writers:
    """One set of output files (the published three, or one part of them), opened lazily
    on the first block's Arrow schemas."""

    def __init__(self, paths: dict[str, Path], schema: Schema, header: bool) -> None:
        self.paths, self.schema, self.header = paths, schema, header
        self.codes: pq.ParquetWriter | None = None
        self.values: pq.ParquetWriter | None = None
        self.csv: IO[bytes] | None = None

    def write(self, codes: np.ndarray, table: pd.DataFrame | list[DecodedColumn]) -> None:
        """One block: its codes, its decoded values (:func:`decode`'s frame, or
        :func:`decode_columns`' columns when :func:`csv_block` writes them), its CSV lines."""
        c = EncodedTable(schema=self.schema, codes=codes).to_arrow()
        if isinstance(table, pd.DataFrame):
            v = pa.Table.from_pandas(table, preserve_index=False)
        else:  # the frame's schema (its pandas metadata holds no value), the columns' arrays
            v = pa.Table.from_arrays([d.values for d in table], names=list(self.schema.names))
        if self.codes is None:
            self.codes = pq.ParquetWriter(str(self.paths["codes"]), c.schema, compression="zstd")
            known = v.schema if isinstance(table, pd.DataFrame) else values_schema(self.schema)
            self.values = pq.ParquetWriter(str(self.paths["values"]), known, compression="zstd")
            self.csv = open(self.paths["csv"], "wb")
        assert self.values is not None and self.csv is not None
        self.codes.write_table(c.cast(self.codes.schema), row_group_size=max(1, len(codes)))
        self.values.write_table(v.cast(self.values.schema), row_group_size=max(1, len(codes)))
        if self.header:
            self.csv.write(csv_header(self.schema).encode("utf-8"))
            self.header = False
        if isinstance(table, pd.DataFrame):
            text = io.StringIO()
            write_csv(table, self.schema, text, header=False, codes=codes)
            self.csv.write(text.getvalue().encode("utf-8"))
        else:
            lines = csv_block(self.schema, table, codes)
            assert lines is not None
            self.csv.write(lines)

    def close(self) -> None:
        """Closes the Parquet writers (writes their footers) and the CSV file."""
        for w in (self.codes, self.values, self.csv):
            if w is not None:
                w.close()


def values_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema ``synthetic.parquet`` is written with: that of :func:`decode`'s frame
    (pandas metadata included), taken from a frame of no rows (it depends on the columns'
    types only)."""
    none = EncodedTable(schema=schema, codes=np.zeros((0, len(schema.columns)), dtype=code_dtype(schema.cardinalities)))
    return pa.Table.from_pandas(decode(none, np.random.default_rng(0)), preserve_index=False).schema


def _decoded(enc: EncodedTable, rng: np.random.Generator) -> pd.DataFrame | list[DecodedColumn]:
    """A block's values as :class:`_Writers` writes them: Arrow columns when :func:`csv_block`
    can write their lines (the common case), else :func:`decode`'s frame (the same draws)."""
    if csv_block_writes(enc.schema):
        return decode_columns(enc, rng)
    return decode(enc, rng)


def _files(folder: Path, stem: str = "") -> dict[str, Path]:
    if not stem:
        return {"codes": folder / "synthetic-codes.parquet", "values": folder / "synthetic.parquet",
                "csv": folder / "synthetic.csv"}
    return {"codes": folder / f"{stem}.codes.parquet", "values": folder / f"{stem}.parquet",
            "csv": folder / f"{stem}.csv"}


@dataclass(frozen=True)
class BlockJob:
    """What draws and writes a run of blocks: the fitted sampler and the two stages'
    block generators (the only things that travel to a worker), the schema and sizes."""

    schema: Schema
    sampler: BlockSampler
    draw: BlockRngs
    values_rng: BlockRngs
    sizes: tuple[int, ...]
    chunk_rows: int
    block_rows: int


def _write_blocks(job: BlockJob, blocks: range, writers: _Writers, report: bool) -> int:
    """Blocks ``blocks`` drawn, decoded and written in chunks; returns the rows written."""
    schema, sizes = job.schema, job.sizes
    dtype = code_dtype(schema.cardinalities)
    done = 0
    try:
        for chunk in _chunks(list(sizes[blocks.start:blocks.stop]), job.chunk_rows, job.block_rows):
            ids = [blocks.start + k for k in chunk]
            drawn = [np.asarray(job.sampler.sample(sizes[i], job.draw(i))).astype(dtype, copy=False) for i in ids]
            for i, codes in zip(ids, drawn):
                if codes.shape != (sizes[i], len(schema.columns)):
                    raise ValueError(f"block {i}: the sampler returned {codes.shape}, "
                                     f"expected {(sizes[i], len(schema.columns))}")
                enc = EncodedTable(schema=schema, codes=codes)  # either order: read column by column
                writers.write(enc.codes, _decoded(enc, job.values_rng(i)))
                done += sizes[i]
                if report:
                    progress.count("writing the synthetic table", done, sum(sizes), "rows")
    finally:
        writers.close()
    return done


def write_part(blocks: tuple[int, int, int], folder: str, job: BlockJob) -> int:
    """A runner's task: blocks ``[start, stop)`` into part ``index``'s three files in
    ``folder`` (``part-<index>.codes.parquet``, ``.parquet``, ``.csv`` without header)."""
    index, start, stop = blocks
    writers = _Writers(_files(Path(folder), f"part-{index:05d}"), job.schema, header=False)
    return _write_blocks(job, range(start, stop), writers, report=False)


def part_ranges(blocks: int, parts: int) -> list[tuple[int, int, int]]:
    """``(index, start, stop)`` of ``parts`` contiguous runs of blocks covering ``blocks``
    (at most one part per block)."""
    parts = max(1, min(int(parts), blocks))
    bounds = [blocks * k // parts for k in range(parts + 1)]
    return [(k, bounds[k], bounds[k + 1]) for k in range(parts)]


def write_synthetic(folder: Path, schema: Schema, sampler: BlockSampler, sample_rng: np.random.Generator,
                    decode_rng: np.random.Generator, *, chunk_rows: int,
                    block_rows: int | None = None, runner: Runner | None = None,
                    parts: int | None = None) -> Written:
    """Draws ``sampler.rows`` records block by block and writes ``synthetic-codes.parquet``,
    ``synthetic.parquet`` and ``synthetic.csv`` into ``folder``, one row group per block.

    Holds one chunk of codes (``chunk_rows`` rounded down to whole blocks, at least one)
    and one block's decoded values at a time (per task). With a ``runner`` (a local
    process pool or Dask workers) the blocks are cut into ``parts`` contiguous runs (default
    four per worker), each drawn and written by one task to its own part files in
    ``folder/parts/``; the parts are then joined by copying bytes
    (:mod:`dpsynth.pipeline.parts`) and deleted. The bytes depend on the seeds and
    ``block_rows``, never on ``chunk_rows``, the runner or the number of parts. A table
    handed out whole (:class:`TableSampler`), or by a sampler that must be read in order
    (``sequential`` true: sds's chunks), is written in this process."""
    block_rows = block_rows or BLOCK_ROWS
    sizes = block_sizes(int(sampler.rows), block_rows)
    job = BlockJob(schema=schema, sampler=sampler, draw=BlockRngs(sample_rng), values_rng=BlockRngs(decode_rng),
                   sizes=tuple(sizes), chunk_rows=int(chunk_rows), block_rows=block_rows)
    if runner is None or isinstance(sampler, TableSampler) or getattr(sampler, "sequential", False) or len(sizes) < 2:
        _write_blocks(job, range(len(sizes)), _Writers(_files(folder), schema, header=True), report=True)
        return Written(rows=sum(sizes), row_groups=len(sizes))
    ranges = part_ranges(len(sizes), parts or 4 * max(1, int(getattr(runner, "workers", 2))))
    where = folder / "parts"
    where.mkdir()
    try:
        progress.count("writing the synthetic table", 0, sum(sizes), "rows")
        rows = sum(runner.map(write_part, ranges, str(where), job))
        progress.count("writing the synthetic table", rows, sum(sizes), "rows")
        if rows != sum(sizes):
            raise ValueError(f"the parts hold {rows} rows, expected {sum(sizes)}")
        _join(folder, where, schema, len(ranges))
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return Written(rows=sum(sizes), row_groups=len(sizes))


def _join(folder: Path, where: Path, schema: Schema, n: int) -> None:
    """The parts' files joined into the three published files (each part's deleted once copied)."""
    files = [_files(where, f"part-{k:05d}") for k in range(n)]
    final = _files(folder)
    for kind in ("codes", "values"):
        concat_parquet([f[kind] for f in files], final[kind])
        for f in files:
            f[kind].unlink()
    concat_csv(csv_header(schema), [f["csv"] for f in files], final["csv"])


#: In a synthetic folder: the record of the released model's fit (a method's sampler's ``fit``),
#: stated in the manifest's ``synthesis``.
FIT_RECORD = "fit.json"


def write_fit_record(folder: Path, sampler: object) -> None:
    """Keeps what the released model's fit did (the sampler's ``fit``, if any) beside the table."""
    fit = getattr(sampler, "fit", None)
    if fit:
        (folder / FIT_RECORD).write_text(json.dumps(fit, sort_keys=True))


def synthesis_entries(synthetic_dir: Path) -> dict:
    """The manifest's ``synthesis`` entry: the released fit's record, when the method kept one."""
    path = synthetic_dir / FIT_RECORD
    return {"synthesis": {"fit": json.loads(path.read_text())}} if path.is_file() else {}
