"""One pass over a synthetic table, chunk by chunk, gathering what the gate and the report need.

The gate never needs the whole synthetic table at once: every record check is decided
by a few witness values per column (the distinct labels of a categorical column; the
smallest and largest value of a numeric or datetime column; one missing value if there
is any), the marginal checks by exact counts (summed chunk by chunk), and the re-encoding
check by per-column mismatch counts. :func:`scan` gathers them from ``(values, codes)``
chunks: one in-memory chunk (:func:`frame_chunks`), or the row groups of the synthetic
Parquet files (:func:`file_chunks`), so memory is one chunk whatever the row count.

:func:`scan_files` runs the same pass partition by partition on a row runner
(:class:`dpsynth.rows.rowsource.SerialRunner`, or a Dask runner whose workers read the
files): a partition is a run of row groups of one pair of (codes, values) files, each
partition's :class:`Scan` comes back (counts and witness values, never rows) and
:func:`merge_scans` joins them in row order, so the result is the one pass's whatever
the partitioning and the runner.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from ..rows.counting import DEFAULT_MAX_CELLS, Subset, column_major, count_blocks, count_marginals, plan_blocks_cached
from ..rows.encoding import DataError, EncodedTable, code_dtype, validate_codes
from ..rows.footer import FooterMap, FooterSlice, footer_map, sliced_metadata
from ..schema import Schema
from .validation import _outside, column_domain

__all__ = ["CodeCounts", "Scan", "ScanPart", "file_chunks", "frame_chunks", "merge_scans", "scan_files",
           "scan_parts", "scan_table"]

#: A categorical column's witness keeps at most this many distinct values beyond its
#: domain (a broken table with more fails ``in_domain`` all the same).
_EXTRA_LABELS = 1000


@dataclass(frozen=True)
class CodeCounts:
    """Exact counts of some marginals of a synthetic table of codes, and its row count.

    ``counts`` maps sorted column-index subsets to int64 tables (axes in index order)."""

    schema: Schema
    n: int
    counts: Mapping[Subset, np.ndarray]

    def table(self, attrs: Sequence[str]) -> np.ndarray:
        """Counts over the named columns, axes in the order given."""
        order = [self.schema.index(a) for a in attrs]
        key = tuple(sorted(order))
        return np.transpose(self.counts[key], [key.index(j) for j in order])

    def one_way(self, j: int) -> np.ndarray:
        """Counts of column ``j``'s codes."""
        return self.counts[(j,)]

    @classmethod
    def of(cls, codes: "EncodedTable | CodeCounts", measurement: Any) -> "CodeCounts":
        """Counts of an in-memory table's 1-way marginals and ``measurement``'s marginals
        (a :class:`CodeCounts` is returned as it is)."""
        if isinstance(codes, CodeCounts):
            return codes
        from .checks import measured_subsets

        subsets = measured_subsets(codes.schema, measurement)
        cards = codes.schema.cardinalities
        counted = count_marginals(column_major(codes.codes, cards), cards, subsets) if codes.n else {
            s: np.zeros(tuple(cards[j] for j in s), dtype=np.int64) for s in subsets}
        return cls(schema=codes.schema, n=codes.n, counts=counted)

    @classmethod
    def of_file(cls, path: Path | Sequence[Path], schema: Schema, measurement: Any, chunk_rows: int,
                runner: Any = None) -> "CodeCounts":
        """Counts of a synthetic codes file, a folder of Parquet parts or a list of files (in
        row order), read ``chunk_rows`` rows at a time, partition by partition on ``runner``
        (default: this process); only counts leave a partition."""
        from ..rows.rowsource import RowSource, SerialRunner, count_marginals as count_source
        from .checks import measured_subsets

        paths = [path] if isinstance(path, (str, Path)) else list(path)
        parts = tuple(p for f in paths for p in RowSource.from_parquet(f, schema, chunk_rows=chunk_rows).parts)
        source = RowSource(schema=schema, parts=parts, chunk_rows=chunk_rows, runner=runner or SerialRunner())
        return cls(schema=schema, n=source.rows, counts=count_source(source, measured_subsets(schema, measurement)))


@dataclass
class Scan:
    """What one pass over the synthetic table gathered (see the module docstring)."""

    schema: Schema
    columns: list[str] = field(default_factory=list)
    dtypes: dict[str, str] = field(default_factory=dict)
    rows: int = 0
    witness: dict[str, pd.Series] = field(default_factory=dict)
    mismatch: np.ndarray | None = None
    counts: dict[Subset, np.ndarray] = field(default_factory=dict)
    codes_rows: int = 0
    misaligned: bool = False
    nulls: dict[str, int] = field(default_factory=dict)
    head: pd.DataFrame | None = None  # the first row (columns not checked one by one are padded with it)
    outside: dict[str, int | None] = field(default_factory=dict)

    def column_counts(self, name: str, check: str) -> dict[str, Any] | None:
        """Exact counts over the whole table of a record check (``in_domain`` or
        ``not_null``) on column ``name``, in GE's terms; None when not counted."""
        if name not in self.nulls or self.outside.get(name) is None:
            return None
        rows, nulls = self.rows, self.nulls[name]
        if check == "not_null":
            return {"element_count": rows, "unexpected_count": nulls,
                    "unexpected_fraction": nulls / rows if rows else 0.0}
        bad = int(self.outside[name] or 0)
        present = rows - nulls
        return {"element_count": rows, "missing_count": nulls, "unexpected_count": bad,
                "missing_fraction": nulls / rows if rows else 0.0,
                "unexpected_fraction": bad / present if present else 0.0}

    def code_counts(self) -> CodeCounts:
        """The marginal counts and row count of the codes."""
        return CodeCounts(schema=self.schema, n=self.codes_rows, counts=self.counts)

    def mismatch_share(self) -> np.ndarray:
        """Per schema column, the share of cells whose value does not re-encode to its code
        (1 for a column missing or repeated in the table, or when the row counts differ)."""
        d = len(self.schema.columns)
        if self.rows != self.codes_rows or self.mismatch is None or self.misaligned:
            return np.ones(d)
        if self.rows == 0:
            return np.zeros(d)
        return self.mismatch / self.rows

    def witness_frame(self) -> pd.DataFrame:
        """A small table with the synthetic table's columns (same order, names, dtypes) whose
        record checks give the whole table's verdicts: each column's witness values, padded
        by repeating its first one."""
        length = max((len(s) for s in self.witness.values()), default=0)
        cols = []
        for i, name in enumerate(self.columns):
            s = self.witness.get(name)
            if s is None or self.columns.count(name) != 1:  # not a schema column, or repeated
                s = self.head.iloc[: min(length, 1), i] if self.head is not None else pd.Series([], dtype=object)
            s = s.reset_index(drop=True)
            if len(s) < length:
                pad = s.iloc[[0] * (length - len(s))] if len(s) else pd.Series([None] * length, dtype=s.dtype)
                s = pd.concat([s, pad], ignore_index=True)
            cols.append(s.rename(i))
        frame = pd.concat(cols, axis=1) if cols else pd.DataFrame(index=range(length))
        frame.columns = list(self.columns)
        return frame


#: Codes of consecutive chunks are counted together up to this many rows: the count of a
#: batch costs a pass over its rows plus a read-off per block of the plan (which does not
#: shrink with the batch), so row groups of 65,536 rows counted one by one cost 2-3 times more.
COUNT_ROWS = 1 << 20


class _Counter:
    """Exact counts of ``keys`` (sorted column-index subsets) over code chunks added in row
    order, counted in batches of up to :data:`COUNT_ROWS` rows with one block plan."""

    def __init__(self, cards: Sequence[int], keys: tuple[Subset, ...]):
        self.cards = tuple(int(c) for c in cards)
        self.keys = keys
        self.counts = {s: np.zeros(tuple(self.cards[j] for j in s), dtype=np.int64) for s in keys}
        self.buffer: np.ndarray | None = None  # column-major codes not yet counted
        self.held = 0

    def add(self, codes: np.ndarray) -> None:
        """Adds a chunk of row-major codes (checked against the cardinalities)."""
        if not len(codes) or not self.keys:
            return
        cm = column_major(codes, self.cards)
        n = cm.shape[1]
        if n >= COUNT_ROWS:  # a chunk as large as a batch is counted as it is
            self._count(cm)
            return
        if self.held + n > COUNT_ROWS:
            self.flush()
        if self.buffer is None:
            self.buffer = np.empty((len(self.cards), COUNT_ROWS), dtype=cm.dtype)
        self.buffer[:, self.held : self.held + n] = cm
        self.held += n

    def flush(self) -> None:
        """Counts the codes held."""
        if self.held:
            self._count(self.buffer[:, : self.held])
            self.held = 0

    def _count(self, cm: np.ndarray) -> None:
        plan = plan_blocks_cached(self.keys, self.cards, DEFAULT_MAX_CELLS)
        for s, c in count_blocks(cm, self.cards, plan).items():
            self.counts[s] += c

    def result(self) -> dict[Subset, np.ndarray]:
        """The counts of every chunk added (the buffer is let go)."""
        self.flush()
        self.buffer = None
        return self.counts


def _reduce(col_kind: str, s: pd.Series, limit: int) -> pd.Series:
    """The witness values of ``s``: distinct values (categorical), or min, max and one null.

    Rows are picked by position (one mask of missing values, no masked copies of ``s``):
    the first ``limit`` distinct present values in order of appearance, or the first
    smallest and first largest present value; then the first missing value."""
    na = s.isna().to_numpy(dtype=bool)
    nulls = np.flatnonzero(na)[:1]
    if col_kind == "values":
        first = np.flatnonzero(~(na | s.duplicated(keep="first").to_numpy(dtype=bool)))[:limit]
        return _rows(s, first, nulls)
    present = np.flatnonzero(~na)
    if present.size == 0:
        return _rows(s, nulls)
    if isinstance(s.dtype, np.dtype) and s.dtype.kind in "iuf":
        values = s.to_numpy()[present]
        return _rows(s, present[[int(np.argmin(values)), int(np.argmax(values))]], nulls)
    kept = s.iloc[present]
    try:
        ends = kept.iloc[[kept.argmin(), kept.argmax()]]
    except TypeError:  # values of mixed kinds: keep them all (the type check fails anyway)
        ends = kept.drop_duplicates().iloc[:limit]
    return pd.concat([ends, s.iloc[nulls]], ignore_index=True)


def _rows(s: pd.Series, *positions: np.ndarray) -> pd.Series:
    """The rows of ``s`` at these positions, in order, with a fresh index."""
    return s.iloc[np.concatenate(positions)].reset_index(drop=True)


def _text_pass(s: pd.Series, values: frozenset, limit: int) -> tuple[pd.Series, int, int] | None:
    """A categorical column's chunk held as Arrow text, read through one dictionary
    encoding: its witness (:func:`_reduce`'s: the first ``limit`` distinct present values
    in order of appearance, then the first missing value), its missing cells and its
    present cells outside ``values``; None for any other dtype (the general path).

    The encoding numbers distinct values in order of first appearance, so a value first
    appears where the running maximum of the numbers grows: no hashing of the column
    beyond the encoding (pandas' ``duplicated`` and ``isin`` each hash it again)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (isinstance(s.dtype, pd.StringDtype) and s.dtype.storage == "pyarrow"):
        return None
    arr = pa.array(s, from_pandas=True)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    encoded = pc.dictionary_encode(arr)
    idx = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    na = idx < 0
    inside = np.array([v in values for v in encoded.dictionary.to_pylist()] + [True], dtype=bool)  # [-1]: missing
    first = np.flatnonzero(np.diff(np.maximum.accumulate(idx), prepend=-1) > 0)[:limit]
    witness = _rows(s, first, np.flatnonzero(na)[:1])
    return witness, int(np.count_nonzero(na)), int(np.count_nonzero(~inside[idx]))


def _reducible_alone(col_kind: str, s: pd.Series, prev: pd.Series | None) -> bool:
    """Whether ``_reduce(prev + s) == _reduce(prev + _reduce(s))`` holds for sure, so that a
    chunk can be reduced before it joins the witness (the same values, from the same rows):
    the first distinct labels of a categorical column; the first smallest and largest value
    of a numeric or datetime dtype, which compares without error (a column of mixed objects
    keeps its distinct values instead, which only the whole concatenation decides)."""
    if col_kind == "values":
        return True
    dtype = s.dtype
    if prev is not None and prev.dtype != dtype:
        return False
    return (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_datetime64_any_dtype(dtype)) and \
        not pd.api.types.is_object_dtype(dtype)


def _outside_count(s: pd.Series, dom: Any) -> int | None:
    """Non-missing values outside the domain (None when they cannot be compared)."""
    try:
        return _outside(s, dom)
    except (TypeError, ValueError):
        return None


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def scan_table(chunks: Iterable[tuple[pd.DataFrame, np.ndarray]], schema: Schema,
         subsets: Sequence[Subset]) -> Scan:
    """One pass over ``(values, codes)`` chunks of the same rows: columns and dtypes (of
    the first chunk), row counts, witness values, re-encoding mismatches and the exact
    counts of ``subsets`` (sorted column-index tuples) of the codes."""
    from .checks import _for_ge, _mismatch_counts

    out = Scan(schema=schema)
    keys = tuple(dict.fromkeys(tuple(sorted(s)) for s in subsets))
    counter = _Counter(schema.cardinalities, keys)
    domains = {c.name: dataclasses.replace(column_domain(c), integer=False) for c in schema.columns}
    kinds = {name: ("values" if d.values is not None else "range") for name, d in domains.items()}
    value_sets = {name: frozenset(d.values) for name, d in domains.items() if d.values is not None}
    first = True
    for table, codes in chunks:
        table = _for_ge(table)
        if first:
            out.columns = [str(c) for c in table.columns]
            out.dtypes = {str(c): str(t) for c, t in zip(table.columns, table.dtypes)}
            # a copy: a slice (iloc[:1]) would keep the whole chunk's buffers alive with the scan
            out.head = table.take(np.arange(min(1, len(table))))
            first = False
        out.rows += len(table)
        out.codes_rows += len(codes)
        for name in out.columns:
            if out.columns.count(name) != 1 or name not in kinds:
                continue
            limit = schema.column(name).cardinality + _EXTRA_LABELS
            _add_column(out, name, table[name], kinds[name], domains[name], value_sets.get(name), limit)
        mm = _mismatch_counts(table, EncodedTable(schema=schema, codes=codes))
        if mm is None:  # a chunk whose values and codes differ in length: every column mismatched
            out.misaligned = True
        out.mismatch = mm if out.mismatch is None or mm is None else out.mismatch + mm
        counter.add(codes)
    out.counts = counter.result()
    return out


def _add_column(out: Scan, name: str, s: pd.Series, kind: str, domain: Any, values: frozenset | None,
                limit: int) -> None:
    """Adds a chunk ``s`` of column ``name`` to the scan's witness, missing and outside counts."""
    prev = out.witness.get(name)
    text = _text_pass(s, values, limit) if values is not None else None
    if text is not None:  # the same witness and counts as the general path, from one encoding
        s_witness, nulls, outside = text
        joined = s_witness if prev is None else pd.concat([prev, s_witness], ignore_index=True)
    else:
        nulls, outside = int(s.isna().sum()), _outside_count(s, domain)
        if _reducible_alone(kind, s, prev):  # the chunk's own witness stands for it
            s_witness = _reduce(kind, s, limit)
            joined = s_witness if prev is None else pd.concat([prev, s_witness], ignore_index=True)
        else:
            joined = s if prev is None else pd.concat([prev, s], ignore_index=True)
    out.witness[name] = _reduce(kind, joined, limit)
    out.nulls[name] = out.nulls.get(name, 0) + nulls
    out.outside[name] = _add(out.outside.get(name, 0), outside)


def frame_chunks(table: pd.DataFrame, codes: EncodedTable) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
    """An in-memory table and its codes as one chunk."""
    yield table, codes.codes


def file_chunks(codes_path: Path, table_path: Path, schema: Schema, row_groups: Sequence[int] | None = None,
                footers: "tuple[FooterSlice, FooterSlice] | None" = None) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
    """The synthetic Parquet files row group by row group (the synthesize stage writes one
    row group per block to both files, so their row groups hold the same rows); only the
    given ``row_groups`` when named. Given ``footers`` (of the codes and of the values
    file, :class:`dpsynth.rows.footer.FooterSlice`), the row groups they name, read with
    those footers alone: the files' own footers are never decoded."""
    if footers is not None:
        cf = pq.ParquetFile(str(codes_path), metadata=sliced_metadata(codes_path, footers[0]))
        tf = pq.ParquetFile(str(table_path), metadata=sliced_metadata(table_path, footers[1]))
        row_groups = None
    else:
        cf, tf = pq.ParquetFile(str(codes_path)), pq.ParquetFile(str(table_path))
    _check_pair(cf.schema_arrow.names, tf.metadata.num_row_groups, cf.metadata.num_row_groups,
                Path(codes_path).name, Path(table_path).name, schema)
    dtype = code_dtype(schema.cardinalities)
    groups = range(cf.metadata.num_row_groups) if row_groups is None else row_groups
    for g in groups:
        ct = cf.read_row_group(g, columns=schema.names)
        codes = np.empty((ct.num_rows, len(schema.columns)), dtype=dtype)
        for j, name in enumerate(schema.names):
            codes[:, j] = ct.column(name).to_numpy()
        validate_codes(codes, schema)
        yield tf.read_row_group(g).to_pandas(), codes


def _check_pair(codes_columns: Sequence[str], table_groups: int, codes_groups: int, codes_name: str,
                table_name: str, schema: Schema) -> None:
    """Refuses a codes file lacking schema columns, or a pair whose row groups differ in number."""
    missing = [c for c in schema.names if c not in codes_columns]
    if missing:
        raise DataError(f"{codes_name}: synthetic codes lack columns {missing}")
    if codes_groups != table_groups:
        raise DataError(f"{codes_name} and {table_name} have different row groups")


# --- the pass on a row runner ---------------------------------------------------------

#: Partitions whose scans a runner computes at once before they are merged in row order
#: (bounds the partial scans held, whatever the number of partitions).
SCAN_WINDOW = 8


@dataclass(frozen=True, kw_only=True)
class ScanPart:
    """A partition of the synthetic table: row groups of one (codes, values) file pair,
    and where the footers of those row groups alone are found in each file (None: read
    the files' own footers)."""

    codes_path: str
    table_path: str
    row_groups: tuple[int, ...]
    rows: int
    footers: "tuple[FooterSlice, FooterSlice] | None" = None


def _footer_map(path: Path) -> FooterMap:
    try:
        return footer_map(path)
    except (OSError, ValueError, IndexError) as e:  # IndexError: a footer cut short
        raise DataError(f"{Path(path).name}: not a readable Parquet file ({e.__class__.__name__})") from None


def scan_parts(pairs: Sequence[tuple[Path, Path]], schema: Schema, part_rows: int) -> list[ScanPart]:
    """The partitions of the synthetic table held in ``pairs`` of (codes, values) Parquet
    files, in row order: each file pair's row groups gathered into runs of about
    ``part_rows`` rows (a row group is never split). Reads each footer once, mapping where
    each row group sits in it, so that a partition's task decodes the footer of its row
    groups only (what a task holds does not grow with the files' row groups)."""
    from ..rows.rowsource import runs_of

    parts: list[ScanPart] = []
    for codes_path, table_path in pairs:
        cm, tm = _footer_map(codes_path), _footer_map(table_path)
        _check_pair(cm.names, tm.row_groups, cm.row_groups, Path(codes_path).name, Path(table_path).name, schema)
        parts += [ScanPart(codes_path=str(codes_path), table_path=str(table_path), row_groups=g, rows=n,
                           footers=(cm.slice(g), tm.slice(g)))
                  for g, n in runs_of(cm.rows, max(1, int(part_rows)))]
    return parts


def _scan_part(part: ScanPart, schema: Schema, subsets: tuple[Subset, ...]) -> Scan:
    """One partition's scan (module level: a Dask worker runs it by reference)."""
    chunks = file_chunks(Path(part.codes_path), Path(part.table_path), schema, part.row_groups, part.footers)
    return scan_table(chunks, schema, subsets)


def merge_scans(a: Scan, b: Scan, *, reuse: bool = False) -> Scan:
    """The scan of ``a``'s rows followed by ``b``'s: what one pass over both gives (the
    columns, dtypes and first row are the first non-empty part's, as in one pass). With
    ``reuse``, ``b``'s counts are added into ``a``'s writable arrays (``a`` is then spent):
    no third copy of every count table while both are held."""
    head = a if a.columns else b
    out = Scan(schema=a.schema, columns=list(head.columns), dtypes=dict(head.dtypes), head=head.head)
    out.rows, out.codes_rows = a.rows + b.rows, a.codes_rows + b.codes_rows
    out.misaligned = a.misaligned or b.misaligned
    if a.mismatch is None or b.mismatch is None:  # a part without chunks, or misaligned (flagged)
        out.mismatch = b.mismatch if a.mismatch is None else a.mismatch
    else:
        out.mismatch = a.mismatch + b.mismatch
    for name in out.columns:
        if name not in a.witness and name not in b.witness:
            continue
        ws = [w for w in (a.witness.get(name), b.witness.get(name)) if w is not None]
        kind = "values" if column_domain(a.schema.column(name)).values is not None else "range"
        limit = a.schema.column(name).cardinality + _EXTRA_LABELS
        out.witness[name] = _reduce(kind, pd.concat(ws, ignore_index=True), limit)
        out.nulls[name] = a.nulls.get(name, 0) + b.nulls.get(name, 0)
        out.outside[name] = _add(a.outside.get(name, 0), b.outside.get(name, 0))
    out.counts = {s: _added(a.counts[s], b.counts[s], reuse) for s in a.counts}
    return out


def _added(a: np.ndarray, b: np.ndarray, reuse: bool) -> np.ndarray:
    if reuse and a.flags.writeable:  # arrays received from a Dask worker may be read-only
        a += b
        return a
    return a + b


def scan_files(pairs: Sequence[tuple[Path, Path]], schema: Schema, subsets: Sequence[Subset], *,
               chunk_rows: int, runner: Any = None) -> Scan:
    """:func:`scan_table` over the synthetic table held in ``pairs`` of (codes, values)
    Parquet files (in row order), partition by partition on ``runner`` (default: this
    process): partitions of about ``chunk_rows`` rows, at most :data:`SCAN_WINDOW` of them
    computed ahead (one on a serial runner), merged in row order. Only scans (counts, witness values) leave a partition."""
    from ..rows.rowsource import SerialRunner

    runner = runner if runner is not None else SerialRunner()
    keys = tuple(dict.fromkeys(tuple(sorted(s)) for s in subsets))
    parts = scan_parts(pairs, schema, chunk_rows)
    if not parts:
        return scan_table(iter(()), schema, keys)
    # A serial runner gains nothing by computing scans ahead of the merge, and each partial
    # scan holds a copy of every count table (17.6 MB for sds's 1,350 tables at 20 columns):
    # there each is merged as soon as it is made.
    window = 1 if isinstance(runner, SerialRunner) else SCAN_WINDOW
    out: Scan | None = None
    for found in _in_order(runner, parts, schema, keys, window):
        out = found if out is None else merge_scans(out, found, reuse=True)  # out is this loop's own
    return out if out is not None else scan_table(iter(()), schema, keys)


def _in_order(runner: Any, parts: Sequence[ScanPart], schema: Schema, keys: tuple[Subset, ...],
              window: int) -> Iterator[Scan]:
    """The partitions' scans in row order, at most ``window`` computed ahead of the merge:
    streamed by a runner that can (a process pool's ``imap``: a worker free takes the next
    partition at once; two per worker keep every worker busy while one is merged), else
    ``window`` at a time."""
    if hasattr(runner, "imap"):
        ahead = min(window, 2 * max(1, int(getattr(runner, "workers", window))))
        yield from runner.imap(_scan_part, parts, schema, keys, ahead=ahead)
        return
    for start in range(0, len(parts), window):
        yield from runner.map(_scan_part, parts[start : start + window], schema, keys)
