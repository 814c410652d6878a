"""Encoded rows read in bounded chunks, partition by partition, and exact counts over them.

The measure stage never needs the whole table at once: the methods whose measurement is
counts (``marginals``, ``sds``, ``pgm``) ask a :class:`RowSource` for integer counts and
add noise once, after the counts of every partition were summed. A source is:

* a tuple of **partitions** (:class:`ArrayPart`: a slice of an in-memory table;
  :class:`ParquetPart`: row groups of one Parquet file of codes), in row order;
* a **chunk size** (rows): each partition is read ``chunk_rows`` rows at a time, as
  column-major codes (one row of the array per column), so memory is bounded by the
  chunk, never by the number of rows;
* a **runner** that maps a function over the partitions: :class:`SerialRunner` in this
  process (the default), or :class:`dpsynth.rows.dask_runner.DaskRunner` on a Dask cluster.
  Counts are integers, so any order of summation gives the same result.

Worker functions are module-level (pickled by reference): a Dask worker needs the
package installed and read access to the Parquet files, and only counts travel back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Protocol, Sequence, TYPE_CHECKING, TypeVar

import numpy as np

from .counting import Subset, count_blocks, plan_blocks_cached
from .table import DataError, EncodedTable, code_dtype
from ..schema import Schema

if TYPE_CHECKING:  # imported where used, so a release from codes loads neither pandas nor pyarrow
    import pyarrow.parquet as pq

    from .footer import FooterSlice  # the footer reader too: only Parquet parts use it (docs/pgm.md)

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "ArrayPart",
    "ParquetPart",
    "Part",
    "Runner",
    "SerialRunner",
    "RowSource",
    "as_source",
    "load_rows",
    "count_marginals",
    "count_rows",
    "add_counts",
    "advance",
]

#: Rows read at once: 1M rows x 20 uint8 codes is 20 MB, plus the counting buffers.
DEFAULT_CHUNK_ROWS = 1 << 20

T = TypeVar("T")


# --- partitions -------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ArrayPart:
    """Rows of an in-memory (n, p) code array (tests and small tables)."""

    codes: np.ndarray = field(repr=False)

    @property
    def rows(self) -> int:
        """Records in the part."""
        return int(self.codes.shape[0])

    def chunks(self, schema: Schema, chunk_rows: int) -> Iterator[np.ndarray]:
        """Column-major code chunks of at most ``chunk_rows`` records."""
        dtype = code_dtype(schema.cardinalities)
        for start in range(0, self.rows, chunk_rows):
            yield np.ascontiguousarray(self.codes[start : start + chunk_rows].T, dtype=dtype)


@dataclass(frozen=True, kw_only=True)
class ParquetPart:
    """Row groups of one Parquet file of codes (one column per schema column)."""

    path: str
    row_groups: tuple[int, ...]
    rows: int
    footer: FooterSlice | None = None  # where the footer of these row groups alone is (None: the file's own)

    def chunks(self, schema: Schema, chunk_rows: int) -> Iterator[np.ndarray]:
        """Column-major code chunks of at most ``chunk_rows`` records, each checked
        against the schema's domain. With ``footer``, the file is opened with a footer of
        these row groups only: a task's memory does not grow with the file's row groups."""
        import pyarrow.parquet as pq
        from .footer import sliced_metadata
        dtype = code_dtype(schema.cardinalities)
        if self.footer is not None:
            f = pq.ParquetFile(self.path, metadata=sliced_metadata(self.path, self.footer))
            groups = list(range(self.footer.count))
        else:
            f, groups = pq.ParquetFile(self.path), list(self.row_groups)
        batches = f.iter_batches(batch_size=chunk_rows, row_groups=groups, columns=list(schema.names))
        for batch in batches:
            cm = np.empty((len(schema.columns), batch.num_rows), dtype=dtype)
            for j in range(len(schema.columns)):
                cm[j] = batch.column(j).to_numpy(zero_copy_only=False)
            _check_codes(cm, schema)
            yield cm


def _check_codes(cm: np.ndarray, schema: Schema) -> None:
    """Raises if a column-major chunk holds a code outside its column's domain (a bug or
    a foreign file, never a row oddity); names the columns only."""
    if cm.shape[1] == 0:
        return
    bad = np.flatnonzero(cm.max(axis=1) >= np.asarray(schema.cardinalities))
    if np.issubdtype(cm.dtype, np.signedinteger):
        bad = np.union1d(bad, np.flatnonzero(cm.min(axis=1) < 0))
    if bad.size:
        raise ValueError(f"codes outside the schema domain in columns {[schema.names[j] for j in bad]}")


Part = ArrayPart | ParquetPart


# --- runners --------------------------------------------------------------------------


class Runner(Protocol):
    """Maps a module-level function over partitions (``fn(part, *args)``); ``local``:
    whether the partitions run in this process."""

    local: bool

    def map(self, fn: Callable[..., T], parts: Sequence[Any], *args: Any) -> list[T]:
        """Each part's result, in the order of ``parts`` (for small results)."""
        ...

    def fold(self, fn: Callable[..., T], parts: Sequence[Any], combine: Callable[[T, T], T], *args: Any) -> T:
        """All parts' results combined as they arrive (``combine`` must not depend on order)."""
        ...


@dataclass(frozen=True)
class SerialRunner:
    """Runs every partition in this process, one after the other."""

    local: ClassVar[bool] = True

    def map(self, fn: Callable[..., T], parts: Sequence[Any], *args: Any) -> list[T]:
        """Each part's result, in order."""
        return [fn(p, *args) for p in parts]

    def fold(self, fn: Callable[..., T], parts: Sequence[Any], combine: Callable[[T, T], T], *args: Any) -> T:
        """The parts' results combined one after the other (one result held at a time)."""
        if not parts:
            raise ValueError("no partitions to fold")
        acc = fn(parts[0], *args)
        for p in parts[1:]:
            acc = combine(acc, fn(p, *args))
        return acc


# --- the source --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RowSource:
    """Encoded rows as partitions read in chunks of ``chunk_rows`` by a runner."""

    schema: Schema
    parts: tuple[Part, ...]
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    runner: Runner = field(default_factory=SerialRunner, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.chunk_rows, bool) or int(self.chunk_rows) < 1:
            raise ValueError(f"chunk_rows must be a whole number >= 1, got {self.chunk_rows!r}")

    @property
    def rows(self) -> int:
        """Records in all partitions (from metadata: no row is read)."""
        return sum(p.rows for p in self.parts)

    @property
    def remote(self) -> bool:
        """Whether partitions run outside this process (then rows never come back)."""
        return not self.runner.local

    @classmethod
    def from_table(cls, table: EncodedTable, *, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                   runner: Runner | None = None, part_rows: int | None = None) -> "RowSource":
        """An in-memory table cut into partitions of ``part_rows`` rows (default: one)."""
        step = max(1, part_rows or table.n or 1)
        parts = tuple(ArrayPart(codes=table.codes[s : s + step]) for s in range(0, max(table.n, 1), step))
        return cls(schema=table.schema, parts=parts, chunk_rows=chunk_rows, runner=runner or SerialRunner())

    @classmethod
    def from_parquet(cls, path: str | Path, schema: Schema, *, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                     runner: Runner | None = None, part_rows: int | None = None) -> "RowSource":
        """Codes in a Parquet file, or a folder of ``*.parquet`` files read in name order.

        Each file's row groups are gathered into partitions of about ``part_rows`` rows
        (default: ``chunk_rows``); a row group is never split. Each file's footer is mapped
        once here (:func:`dpsynth.rows.footer.footer_map`) and each partition reads with
        the footer of its own row groups.
        """
        import pyarrow.parquet as pq
        from .footer import footer_map
        p = Path(path)
        files = sorted(p.glob("*.parquet")) if p.is_dir() else [p]
        if not files:
            raise DataError(f"encoded codes {p}: no Parquet files")
        target = part_rows or chunk_rows
        parts: list[Part] = []
        for f in files:
            try:
                fm = footer_map(f)
                names, rows = fm.names, fm.rows
            except (OSError, ValueError, IndexError):  # not one we can map: Arrow reads it (or says why)
                fm, meta = None, pq.ParquetFile(str(f)).metadata
                names, rows = meta.schema.names, [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            missing = [c for c in schema.names if c not in names]
            if missing:
                raise DataError(f"{f}: encoded table lacks columns {missing}")
            parts += [ParquetPart(path=str(f), row_groups=g, rows=n, footer=fm.slice(g) if fm else None)
                      for g, n in runs_of(rows, target)]
        return cls(schema=schema, parts=tuple(parts), chunk_rows=chunk_rows, runner=runner or SerialRunner())


def row_group_runs(meta: pq.FileMetaData, target: int) -> list[tuple[tuple[int, ...], int]]:
    """A Parquet file's row groups gathered in order into runs of at least ``target`` rows
    (the last may be shorter): ``[(row group indices, rows), ...]``."""
    return runs_of([meta.row_group(g).num_rows for g in range(meta.num_row_groups)], target)


def runs_of(rows: Sequence[int], target: int) -> list[tuple[tuple[int, ...], int]]:
    """Row groups of ``rows`` rows each gathered in order into runs of at least ``target``
    rows (the last may be shorter): ``[(row group indices, rows), ...]``."""
    runs: list[tuple[tuple[int, ...], int]] = []
    group: list[int] = []
    total = 0
    for g, n in enumerate(rows):
        group.append(g)
        total += n
        if total >= target:
            runs.append((tuple(group), total))
            group, total = [], 0
    if group:
        runs.append((tuple(group), total))
    return runs


def as_source(codes: "EncodedTable | RowSource") -> RowSource:
    """A method's input as a source (an in-memory table becomes one partition)."""
    return codes if isinstance(codes, RowSource) else RowSource.from_table(codes)


def load_rows(codes: "EncodedTable | RowSource", method: str) -> EncodedTable:
    """The whole table in memory, for methods whose measurement needs every row.

    Memory is O(rows x columns) bytes (one byte per code for cardinalities up to 256).
    Refused on a remote runner: those methods cannot run partition by partition.
    """
    if isinstance(codes, EncodedTable):
        return codes
    if codes.remote:
        raise ValueError(
            f"method {method!r} reads every row at once and cannot run partition by partition on a "
            "Dask cluster; run it in a single process (without a Dask address)"
        )
    chunks = [c for part in codes.parts for c in part.chunks(codes.schema, codes.chunk_rows)]
    dtype = code_dtype(codes.schema.cardinalities)
    if not chunks:
        return EncodedTable(schema=codes.schema, codes=np.empty((0, len(codes.schema.columns)), dtype=dtype))
    return EncodedTable(schema=codes.schema, codes=np.ascontiguousarray(np.concatenate(chunks, axis=1).T))


# --- counting -----------------------------------------------------------------------------


def add_counts(a: dict[Any, np.ndarray], b: dict[Any, np.ndarray]) -> dict[Any, np.ndarray]:
    """Sum of two count dictionaries over the same keys (in place in ``a`` where its arrays
    are writable: arrays received from a Dask worker may be read-only views)."""
    for key, arr in b.items():
        if a[key].flags.writeable:
            a[key] += arr
        else:
            a[key] = a[key] + arr
    return a


def _part_marginals(part: Part, schema: Schema, chunk_rows: int, subsets: tuple[Subset, ...],
                    max_cells: int) -> dict[Subset, np.ndarray]:
    cards = schema.cardinalities
    plan = plan_blocks_cached(subsets, tuple(cards), max_cells)
    out = {s: np.zeros(tuple(cards[j] for j in s), dtype=np.int64) for s in subsets}
    for cm in part.chunks(schema, chunk_rows):
        add_counts(out, count_blocks(cm, cards, plan))
    return out


def count_marginals(source: RowSource, subsets: Sequence[Sequence[int]], *,
                    max_cells: int = 1 << 16) -> dict[Subset, np.ndarray]:
    """Exact int64 counts of every requested marginal (columns sorted in each key),
    summed over the source's partitions and chunks."""
    keys = tuple(dict.fromkeys(tuple(sorted(int(j) for j in s)) for s in subsets))
    if not keys:
        return {}
    if not source.parts:
        return {s: np.zeros(tuple(source.schema.cardinalities[j] for j in s), dtype=np.int64) for s in keys}
    return source.runner.fold(_part_marginals, source.parts, add_counts, source.schema, source.chunk_rows,
                              keys, int(max_cells))


def _part_rows(part: Part) -> int:
    return part.rows


def count_rows(source: RowSource) -> int:
    """The number of records (from partition metadata: no row is read)."""
    return sum(source.runner.map(_part_rows, source.parts)) if source.parts else 0


# --- generator positions ---------------------------------------------------------------


def advance(rng: np.random.Generator, draws: int) -> np.random.Generator:
    """A copy of ``rng`` moved on by ``draws`` 64-bit outputs (as ``draws`` float64 from
    ``rng.random`` would), keeping its buffered 32-bit half; ``rng`` is unchanged.

    Lets partition i draw exactly the numbers a single pass over the rows would have
    drawn for its rows, whatever process it runs in.
    """
    if draws < 0:
        raise ValueError(f"draws must be >= 0, got {draws}")
    bg = type(rng.bit_generator)()
    bg.state = rng.bit_generator.state
    if not hasattr(bg, "advance"):
        raise TypeError(f"bit generator {type(bg).__name__} cannot advance")
    if draws:
        before = bg.state
        bg.advance(draws)
        after = bg.state
        after["has_uint32"], after["uinteger"] = before["has_uint32"], before["uinteger"]
        bg.state = after
    return np.random.Generator(bg)


def set_state(rng: np.random.Generator, other: np.random.Generator) -> None:
    """Moves ``rng`` to ``other``'s position (in place)."""
    rng.bit_generator.state = other.bit_generator.state

