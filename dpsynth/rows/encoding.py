"""Reading tables, encoding them to integer codes, and decoding codes back to values.

Two kinds of problem are told apart (DESIGN.md, decision 2):

* **public problems** (unreadable file, no rows, a column missing or extra) raise
  :class:`DataError` naming the column, before any privacy budget is spent;
* **row-level oddities** (empty cell, unknown category, unparseable or out-of-range
  number) never raise: they map deterministically to the column's missing, other or
  fill code, or are clamped to the bounds. A crash that depends on one row would
  itself leak that row, and so would an error message quoting it.

Encoding is vectorised with pyarrow: each column is dictionary-encoded once and only
its distinct values are looked up in Python.

The codes themselves (:class:`EncodedTable`, :func:`code_dtype`, :func:`validate_codes`) and
:class:`DataError` live in :mod:`.table` and are re-exported here: work on codes alone imports
that small module and never this one.
"""

from __future__ import annotations

import csv
import hashlib
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, TYPE_CHECKING

import numpy as np

from ..schema import Column, Schema
from ..schema.parse import check_column_name
from ..schema.timecols import draw_times, seconds_of
from .csv_out import csv_header, csv_text, write_csv
from .table import DataError, EncodedTable, code_dtype, validate_codes

if TYPE_CHECKING:  # imported where used, so a release from codes loads neither pandas nor pyarrow
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

__all__ = [
    "DataError",
    "EncodedTable",
    "read_table",
    "encode",
    "encode_column",
    "check_file",
    "check_type",
    "decode",
    "decode_columns",
    "DecodedColumn",
    "onehot",
    "file_sha256",
    "write_csv",
    "csv_text",
    "csv_header",
    "load_arrow",
]


def load_arrow() -> None:
    """Imports pandas and the pyarrow modules that the row functions import where they use
    them (so that work on codes alone loads neither), for a caller that wants them now: the
    CLI, before it forks its gate worker, which then shares them instead of importing its own."""
    import pandas  # noqa: F401
    import pyarrow.compute  # noqa: F401
    import pyarrow.csv  # noqa: F401
    import pyarrow.parquet  # noqa: F401


def file_sha256(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in chunks (the manifest's file hashes too)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# --- reading -----------------------------------------------------------------


def read_table(path: str | Path, schema: Schema | None = None) -> pa.Table:
    """Reads CSV or Parquet. CSV cells are read as text, exactly as written.

    With a schema, the header must hold exactly the schema's columns.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq
    p = Path(path)
    if not p.is_file():
        raise DataError(f"input {p}: no such file")
    suffix = p.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            table = pq.read_table(str(p))
        elif suffix in (".csv", ".txt", ".gz", ".bz2"):
            names = _csv_header(p)
            table = pacsv.read_csv(
                str(p),
                read_options=pacsv.ReadOptions(block_size=1 << 24),
                convert_options=pacsv.ConvertOptions(
                    column_types={n: pa.string() for n in names},
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
        else:
            raise DataError(f"input {p}: unsupported file type {suffix!r} (use .csv or .parquet)")
    except DataError:
        raise
    except UnicodeDecodeError:
        raise DataError(f"input {p}: {_NOT_UTF8}") from None
    except (pa.ArrowInvalid, OSError) as exc:
        # Arrow's messages can quote a row: report only the kind of failure.
        if "UTF8" in str(exc):
            raise DataError(f"input {p}: {_NOT_UTF8}") from None
        raise DataError(f"input {p}: cannot be read as {suffix.lstrip('.')} ({type(exc).__name__})") from None
    if table.num_columns == 0:
        raise DataError(f"input {p}: has no columns")
    if table.num_rows == 0:
        raise DataError(f"input {p}: has no rows")
    if schema is not None:
        check_columns(table.column_names, schema, str(p))
    else:  # a draft reads every column: refuse what no schema column can hold, naming it
        _check_unique(table.column_names, str(p))
        for i, name in enumerate(table.column_names):
            try:
                check_column_name(name, i)
            except ValueError as exc:
                raise DataError(f"input {p}: {exc}") from None
        nested = [f.name for f in table.schema if _nested(f.type)]
        if nested:
            raise DataError(f"input {p}: columns {nested} hold lists, records, maps or bytes, which no schema "
                            "column can hold; flatten them into plain columns or drop them")
    return table


def _nested(typ: pa.DataType) -> bool:
    import pyarrow as pa
    t = pa.types
    if t.is_dictionary(typ):
        typ = typ.value_type
    return bool(t.is_nested(typ) or t.is_binary(typ) or t.is_large_binary(typ) or t.is_fixed_size_binary(typ))


_NOT_UTF8 = ("is not UTF-8 text (saved as Latin-1 or Windows-1252?); save it as UTF-8 "
             "(in a spreadsheet: 'CSV UTF-8') or as Parquet")
_SEPARATORS = (";", "\t", "|")


def _check_separator(p: Path, names: list[str]) -> None:
    """Refuses a file whose one-name header splits on another separator (a ';' export)."""
    if len(names) != 1:
        return
    for sep in _SEPARATORS:
        if len([part for part in names[0].split(sep) if part.strip()]) >= 2:
            shown = "tab" if sep == "\t" else repr(sep)
            raise DataError(f"input {p}: its header reads as one column holding {shown} between names: "
                            f"dpsynth reads comma-separated CSV; save it with a comma as separator "
                            "(or as Parquet)")


def _csv_header(p: Path) -> list[str]:
    try:
        with open(p, newline="", encoding="utf-8-sig") as f:
            names = next(csv.reader(f), [])
    except UnicodeDecodeError:
        raise DataError(f"input {p}: {_NOT_UTF8}") from None
    except (OSError, csv.Error) as exc:
        raise DataError(f"input {p}: cannot be read as csv ({type(exc).__name__})") from None
    _check_separator(p, names)
    return names


def _check_last_line(p: Path, fields: int, tail: int = 1 << 16) -> None:
    """Refuses a CSV file cut in its last row: no line end at the end of the file, and a last
    line with fewer fields than the header (only the count is read and reported, no value)."""
    import csv
    import io

    size = p.stat().st_size
    with open(p, "rb") as f:
        f.seek(max(0, size - tail))
        data = f.read()
    if not data or data.endswith((b"\n", b"\r")):
        return
    last = data.rsplit(b"\n", 1)[-1]
    if last == data and size > tail:
        return  # one line longer than the tail: cannot tell, the encoder will
    try:
        row = next(csv.reader(io.StringIO(last.decode("utf-8", errors="replace"))), [])
    except csv.Error:
        row = []
    if len(row) < fields:
        raise DataError(f"input {p}: its last line is incomplete ({len(row)} of {fields} fields and no line end): "
                        "the file looks cut (an interrupted copy or download?); copy it again")


def _check_unique(found: Sequence[str], source: str) -> None:
    """Refuses a header that repeats a column name (a name is public; no value is read)."""
    dupes = sorted({c for c in found if list(found).count(c) > 1})
    if dupes:
        raise DataError(f"input {source}: columns {dupes} appear more than once; rename or drop the copies")


def check_columns(found: Sequence[str], schema: Schema, source: str) -> None:
    """Refuses an input whose columns are duplicated, missing or extra (names only, never values)."""
    _check_unique(found, source)
    missing = [c for c in schema.names if c not in found]
    forms = sorted({_nfc(c) for c in missing} & {_nfc(c) for c in found if c not in schema.names})
    if forms:
        raise DataError(f"input {source}: columns {forms} are written in another Unicode form in the input than "
                        "in the schema (composed or decomposed accents, e.g. a file saved on macOS): write the "
                        "names the same way in both")
    if missing:
        raise DataError(f"input {source}: columns {missing} of schema {schema.name!r} are missing "
                        "(add them to the input, or remove them from the schema)")
    extra = [c for c in found if c not in schema.names]
    if extra:
        unnamed = "; a column with no name is often a row index written with the table (pandas' to_csv " \
                  "without index=False): drop it" if any(not str(c).strip() for c in extra) else ""
        raise DataError(
            f"input {source}: columns {extra} are not in schema {schema.name!r} "
            f"(add them to the schema or drop them from the input{unnamed})"
        )


def check_file(path: str | Path, schema: Schema) -> None:
    """Public checks of an input file without reading a row: its columns (CSV header or
    Parquet schema) and, for Parquet, each column's type against the schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in (".parquet", ".pq"):
        try:
            arrow_schema = pq.read_schema(str(p))
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(f"input {p}: cannot be read as parquet ({type(exc).__name__})") from None
        check_columns(arrow_schema.names, schema, str(p))
        for col in schema.columns:
            check_type(col, arrow_schema.field(col.name).type)
    elif suffix == ".csv":
        header = _csv_header(p)
        check_columns(header, schema, str(p))
        _check_last_line(p, len(header))


def _label_kinds(col: Column) -> set[str]:
    """Which stored types a categorical column's labels can come from (besides text)."""
    kinds = set()
    for v in col.values:
        if v.casefold() in _BOOL_WORDS:
            kinds.add("bool")
        try:
            x = float(v)
        except ValueError:
            continue
        kinds.add("float")
        if x.is_integer() and v.lstrip("+-").isdigit():
            kinds.add("int")
    return kinds


def check_type(col: Column, typ: pa.DataType) -> None:
    """Refuses a stored column type the schema's column cannot read (names the column).

    Decided from the file's declared type and the schema only (never from a value):
    a timestamp in a numeric column, or whole numbers in a categorical column whose
    categories are words, would otherwise silently map every row to the fill code.
    """
    import pyarrow as pa
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    t = pa.types
    if t.is_null(typ) or t.is_string(typ) or t.is_large_string(typ):
        return
    if col.type == "numeric":
        if t.is_integer(typ) or t.is_floating(typ) or t.is_decimal(typ):
            return
        want = "numbers or text"
    elif col.type == "datetime":
        if t.is_timestamp(typ) or t.is_date(typ):
            return
        want = "timestamps, dates or ISO 8601 text"
    else:
        kinds = _label_kinds(col)
        if (t.is_integer(typ) and "int" in kinds) or (t.is_floating(typ) and "float" in kinds) or (
            t.is_boolean(typ) and "bool" in kinds
        ):
            return
        want = "text" + (f" or {'/'.join(sorted(kinds))}" if kinds else "") + " matching its categories"
    raise DataError(
        f"column {col.name!r}: the input stores {typ} values but the schema's {col.type} column expects "
        f"{want}; convert the column or fix the schema"
    )


# --- encoding ----------------------------------------------------------------


def _as_text(arr: pa.ChunkedArray) -> pa.ChunkedArray:
    import pyarrow as pa
    import pyarrow.compute as pc
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return arr
    if pa.types.is_dictionary(arr.type):
        return _as_text(arr.cast(arr.type.value_type))
    if pa.types.is_boolean(arr.type):
        return pc.if_else(arr, "true", "false")
    return pc.cast(arr, pa.string())


def _nfc(text: str) -> str:
    """``text`` in Unicode NFC (a no-op, and cheap, for text already in it)."""
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


_BOOL_WORDS = ("true", "false")


def _bool_labels(values: Sequence[str]) -> dict[str, int]:
    """Codes of the labels 'true' and 'false' by their case-folded spelling, so that 'True'
    (pandas' CSV), 'true' (a bool read as text) and 'TRUE' (a spreadsheet) are one value;
    a word the schema spells twice (e.g. 'True' and 'true') keeps exact matching only."""
    folded: dict[str, list[int]] = {}
    for i, v in enumerate(values):
        if v.strip().casefold() in _BOOL_WORDS:
            folded.setdefault(v.strip().casefold(), []).append(i)
    return {word: codes[0] for word, codes in folded.items() if len(codes) == 1}


def _categorical_codes(col: Column, arr: pa.ChunkedArray) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc
    text = _as_text(arr).combine_chunks() if isinstance(arr, pa.ChunkedArray) else _as_text(arr)
    dic = pc.dictionary_encode(text)
    uniques = dic.dictionary.to_pylist()
    # Labels and values compare in Unicode NFC: a decomposed "é" is the schema's composed one.
    lookup = {_nfc(v): i for i, v in enumerate(col.values)}
    yes_no = _bool_labels(col.values)
    missing = {_nfc(v) for v in col.missing}
    null_code = col.missing_code if col.nullable else col.fill_code
    unknown_code = (
        col.other_code if col.other else (col.missing_code if col.nullable else col.fill_code)
    )
    lut = np.empty(len(uniques) + 1, dtype=np.int64)
    for i, raw in enumerate(uniques):
        v = _nfc(raw)
        if v in lookup:
            lut[i] = lookup[v]
        else:
            s = v.strip()
            if s in lookup:
                lut[i] = lookup[s]
            elif s.casefold() in yes_no and s not in missing:
                lut[i] = yes_no[s.casefold()]
            elif s == "" or v in missing or s in missing:
                lut[i] = null_code
            else:
                lut[i] = unknown_code
    lut[-1] = null_code
    idx = dic.indices.fill_null(len(uniques)).to_numpy(zero_copy_only=False)
    return lut[idx]


def _numeric_values(col: Column, arr: pa.ChunkedArray) -> np.ndarray:
    """Float values with NaN for every cell that is not a number (datetime: seconds)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
    if col.type == "datetime":
        return seconds_of(arr, col.missing)
    if pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type) or pa.types.is_decimal(arr.type):
        return pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    text = pc.utf8_trim_whitespace(_as_text(arr))
    # Missing tokens and empty cells become nulls, then one vectorised cast.
    tokens = pa.array(sorted(set(col.missing) | {""}), type=text.type)
    text = pc.if_else(pc.is_in(text, value_set=tokens), pa.scalar(None, text.type), text)
    try:
        values = pc.cast(text, pa.float64())
        return values.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    # Some cells are not numbers: parse the distinct texts once.
    dic = pc.dictionary_encode(text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text)
    uniques = pd.to_numeric(
        pd.Series(dic.dictionary.to_pylist(), dtype=object).str.strip(), errors="coerce"
    ).to_numpy(dtype=np.float64)
    lut = np.append(uniques, np.nan)
    idx = dic.indices.fill_null(len(uniques)).to_numpy(zero_copy_only=False)
    return lut[idx]


def _numeric_codes(col: Column, arr: pa.ChunkedArray) -> np.ndarray:
    x = _numeric_values(col, arr)
    lo, hi = col.bounds
    codes = np.searchsorted(np.asarray(col.edges[1:-1]), np.clip(x, lo, hi), side="right")
    nan = np.isnan(x)
    if nan.any():
        codes[nan] = col.missing_code if col.nullable else col.fill_code
    return codes


def encode_column(col: Column, arr: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Codes of one column (int64); every cell maps to a code in the column's domain."""
    if col.type == "categorical":
        return _categorical_codes(col, arr)
    return _numeric_codes(col, arr)


def encode(table: pa.Table, schema: Schema) -> EncodedTable:
    """Raw table to integer codes under the schema (checks columns and types first)."""
    check_columns(table.column_names, schema, "table")
    for col in schema.columns:
        check_type(col, table.schema.field(col.name).type)
    codes = np.empty((table.num_rows, len(schema.columns)), dtype=code_dtype(schema.cardinalities))
    for j, col in enumerate(schema.columns):
        codes[:, j] = encode_column(col, table.column(col.name))
    return EncodedTable(schema=schema, codes=codes)


def onehot(
    enc: EncodedTable, drop: Sequence[str] = (), binary_as_bit: bool = False
) -> tuple[np.ndarray, list[tuple[str, int]]]:
    """The Boolean view: one 0/1 feature per (column, code), as a uint8 matrix.

    With ``binary_as_bit`` a two-code column is a single bit (its code) instead of two
    one-hot bits, as the private sampling papers encode yes/no columns. Returns the
    matrix and the (column, code) each feature stands for (the code whose bit is 1).
    """
    keep = [j for j, c in enumerate(enc.schema.columns) if c.name not in drop]
    widths = [1 if binary_as_bit and enc.cardinalities[j] == 2 else enc.cardinalities[j] for j in keep]
    out = np.zeros((enc.n, sum(widths)), dtype=np.uint8)
    features: list[tuple[str, int]] = []
    start = 0
    rows = np.arange(enc.n)
    for j, width in zip(keep, widths):
        name = enc.schema.columns[j].name
        if width == 1 and enc.cardinalities[j] == 2:
            out[:, start] = enc.codes[:, j]
            features.append((name, 1))
        else:
            out[rows, start + enc.codes[:, j].astype(np.int64)] = 1
            features += [(name, k) for k in range(width)]
        start += width
    return out, features


# --- decoding ----------------------------------------------------------------


def _draw_numbers(col: Column, codes: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A number drawn inside each code's bin (a numeric column that is not a datetime) and
    which codes are bins (the others are missing): the draw :func:`decode` makes, as numpy
    arrays (floats; integers for an ``integer`` column, any value where missing)."""
    edges = np.asarray(col.edges, dtype=np.float64)
    regular = codes < col.n_regular
    c = np.where(regular, codes, 0).astype(np.int64)
    lo, hi = edges[c], edges[c + 1]
    last = c == col.n_regular - 1
    if col.integer:
        ilo = np.ceil(lo)
        # integers in [lo, hi), or [lo, hi] for the last bin
        ihi = np.where(last, np.floor(hi), np.ceil(hi) - 1.0)
        empty = ihi < ilo
        span = np.where(empty, 0.0, ihi - ilo + 1.0)
        draw = ilo + np.floor(rng.random(codes.shape[0]) * span)
        # A bin that holds no integer: its nearest integer inside the bounds.
        near = np.clip(np.rint((lo + hi) / 2.0), np.ceil(edges[0]), np.floor(edges[-1]))
        return np.where(empty, near, np.minimum(draw, ihi)).astype(np.int64), regular
    x = lo + rng.random(codes.shape[0]) * (hi - lo)
    x = np.clip(x, edges[0], edges[-1])
    x[~regular] = np.nan
    return x, regular


def _decode_numeric(col: Column, codes: np.ndarray, rng: np.random.Generator) -> pd.Series:
    import pandas as pd
    if col.type == "datetime":
        return draw_times(np.asarray(col.edges, dtype=np.float64), codes, col.n_regular, col.unit, rng).rename(col.name)
    x, regular = _draw_numbers(col, codes, rng)
    if col.integer:
        out = pd.array(x, dtype="Int64")
        out[~regular] = pd.NA
        return pd.Series(out, name=col.name)
    return pd.Series(x, name=col.name)


def _labels(col: Column) -> list[str | None]:
    """A categorical column's value for each code (None: missing), in code order."""
    return list(col.values) + ([col.other_label] if col.other else []) + [None]


def _label_index(col: Column, codes: np.ndarray, size: int) -> np.ndarray:
    """Each code's position in :func:`_labels` (the missing code and, for a column without a
    missing code, -1 at the last one: None)."""
    return np.where(codes == (col.missing_code if col.nullable else -1), size - 1, codes)


def decode(enc: EncodedTable, rng: np.random.Generator) -> pd.DataFrame:
    """Codes back to values. Numbers are drawn uniformly inside their bin.

    Missing cells are nulls; the ``other`` bucket gets the column's ``other_label``.
    """
    import pandas as pd
    data = {}
    for j, col in enumerate(enc.schema.columns):
        codes = enc.codes[:, j].astype(np.int64)
        if col.type == "categorical":
            labels = np.array(_labels(col), dtype=object)
            data[col.name] = pd.Series(labels[_label_index(col, codes, len(labels))], dtype="string", name=col.name)
        else:
            data[col.name] = _decode_numeric(col, codes, rng)
    return pd.DataFrame(data)


@dataclass(frozen=True)
class DecodedColumn:
    """One column of :func:`decode_columns`: ``values``, what :func:`decode`'s frame holds
    as Arrow (before the cast to the Parquet writer's type), and what its CSV fields are made
    of: ``numbers`` (a numeric column: the drawn numbers, any value where missing), ``null``
    (missing cells; None for a categorical column, whose CSV is read from its codes) and
    ``series`` (a datetime column: :func:`decode`'s Series, which formats its dates)."""

    values: pa.Array
    numbers: np.ndarray | None = None
    null: np.ndarray | None = None
    series: pd.Series | None = None


def decode_columns(enc: EncodedTable, rng: np.random.Generator) -> list[DecodedColumn]:
    """:func:`decode`'s values column by column in Arrow, with the same draws from ``rng``
    (the same values) but no pandas frame: a categorical column is its labels taken by
    code, a number column its drawn numbers masked where missing."""
    import pyarrow as pa
    out = []
    for j, col in enumerate(enc.schema.columns):
        codes = enc.codes[:, j].astype(np.int64)
        if col.type == "categorical":
            labels = _labels(col)
            index = pa.array(_label_index(col, codes, len(labels)), pa.int64())
            out.append(DecodedColumn(values=pa.array(labels, pa.string()).take(index)))
        elif col.type == "datetime":
            series = _decode_numeric(col, codes, rng)
            out.append(DecodedColumn(values=pa.Array.from_pandas(series), null=series.isna().to_numpy(), series=series))
        else:
            x, regular = _draw_numbers(col, codes, rng)
            null = ~regular
            out.append(DecodedColumn(values=pa.array(x, mask=null), numbers=x, null=null))
    return out
