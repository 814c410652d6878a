"""The synthetic table in fixed logical blocks, streamed to its files in bounded memory.

A release of ``rows`` records is cut into blocks of :data:`BLOCK_ROWS` records (the last
may be shorter). Block ``i`` is drawn with its own generator, derived from the stage's
generator and ``i`` alone (:class:`BlockRngs`), and written as its own Parquet row group;
its values are decoded with a generator derived the same way. The files therefore hold
the same bytes whatever ``chunk_rows`` (how many blocks are held at once) is: chunking
only changes how much is in memory. Design notes: ``docs/scale.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .. import progress
from ..rows.encoding import EncodedTable, code_dtype, decode, write_csv
from ..schema import Schema

__all__ = ["BLOCK_ROWS", "BlockRngs", "BlockSampler", "TableSampler", "block_sizes", "write_synthetic"]

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
    """The three output files, opened lazily on the first block's Arrow schemas."""

    def __init__(self, folder: Path, schema: Schema) -> None:
        self.folder, self.schema = folder, schema
        self.codes: pq.ParquetWriter | None = None
        self.values: pq.ParquetWriter | None = None
        self.csv_started = False

    def write(self, codes: np.ndarray, table: pd.DataFrame) -> None:
        """One block: its codes, its decoded values, its CSV lines."""
        c = EncodedTable(schema=self.schema, codes=codes).to_arrow()
        v = pa.Table.from_pandas(table, preserve_index=False)
        if self.codes is None:
            self.codes = pq.ParquetWriter(str(self.folder / "synthetic-codes.parquet"), c.schema, compression="zstd")
            self.values = pq.ParquetWriter(str(self.folder / "synthetic.parquet"), v.schema, compression="zstd")
        assert self.values is not None
        self.codes.write_table(c.cast(self.codes.schema), row_group_size=max(1, len(codes)))
        self.values.write_table(v.cast(self.values.schema), row_group_size=max(1, len(codes)))
        path = self.folder / "synthetic.csv"
        if not self.csv_started:
            write_csv(table, self.schema, path)
            self.csv_started = True
        else:
            with open(path, "a", encoding="utf-8", newline="") as f:
                write_csv(table, self.schema, f, header=False)

    def close(self) -> None:
        """Closes the Parquet writers (writes their footers)."""
        for w in (self.codes, self.values):
            if w is not None:
                w.close()


def write_synthetic(folder: Path, schema: Schema, sampler: BlockSampler, sample_rng: np.random.Generator,
                    decode_rng: np.random.Generator, *, chunk_rows: int,
                    block_rows: int | None = None) -> Written:
    """Draws ``sampler.rows`` records block by block and writes ``synthetic-codes.parquet``,
    ``synthetic.parquet`` and ``synthetic.csv`` into ``folder``, one row group per block.

    Holds one chunk of codes (``chunk_rows`` rounded down to whole blocks, at least one)
    and one block's decoded values at a time. The bytes depend on the seeds and
    ``block_rows``, never on ``chunk_rows``."""
    block_rows = block_rows or BLOCK_ROWS
    sizes = block_sizes(int(sampler.rows), block_rows)
    draw, values_rng = BlockRngs(sample_rng), BlockRngs(decode_rng)
    dtype = code_dtype(schema.cardinalities)
    writers = _Writers(folder, schema)
    done = 0
    try:
        for chunk in _chunks(sizes, chunk_rows, block_rows):
            blocks = [np.asarray(sampler.sample(sizes[i], draw(i))).astype(dtype, copy=False) for i in chunk]
            for i, codes in zip(chunk, blocks):
                if codes.shape != (sizes[i], len(schema.columns)):
                    raise ValueError(f"block {i}: the sampler returned {codes.shape}, "
                                     f"expected {(sizes[i], len(schema.columns))}")
                enc = EncodedTable(schema=schema, codes=np.ascontiguousarray(codes))
                writers.write(enc.codes, decode(enc, values_rng(i)))
                done += sizes[i]
                progress.count("writing the synthetic table", done, sum(sizes), "rows")
    finally:
        writers.close()
    return Written(rows=sum(sizes), row_groups=len(sizes))
