"""Writing a decoded table as ``synthetic.csv``: the input's conventions, spreadsheet-safe
text cells, floats as ``repr``; the common case formatted and joined by Arrow.

The bytes are those of the pandas writer this replaced (``tests/test_synthetic_stream.py``);
:mod:`dpsynth.rows.encoding` re-exports :func:`write_csv`, :func:`csv_text` and
:func:`csv_header`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import IO, TYPE_CHECKING, Sequence

import numpy as np

from ..schema import Column, Schema

if TYPE_CHECKING:  # imported where used, so a release from codes loads neither pandas nor pyarrow
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    from .encoding import DecodedColumn

__all__ = ["csv_block", "csv_block_writes", "csv_header", "csv_text", "write_csv"]

# A text cell beginning with one of these is read as a formula by spreadsheets (OWASP, "CSV
# injection"); the quote itself is listed so that an escaped cell is never ambiguous.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def csv_text(text: str) -> str:
    """A text cell as ``synthetic.csv`` writes it: with a leading ``'`` when it begins with
    ``= + - @``, a tab, a carriage return or ``'`` (a spreadsheet then shows the text instead
    of evaluating it, and drops the quote). A plain number such as ``-3`` stays as it is."""
    if text and text[0] in _FORMULA_START and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


def _csv_field(text: str) -> str:
    """One CSV field as the csv module's minimal quoting writes it (lines end in ``\\n``)."""
    if any(ch in text for ch in ',"\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _quote_all(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _float_text(x: np.ndarray) -> np.ndarray:
    """``repr`` of each float (object array of str). Arrow's shortest form (10x faster) is
    ``repr``'s for non-integers with 1e-4 <= |x| < 1e10; numpy's ``str`` (equal to ``repr``,
    slower) formats the rest."""
    import pyarrow as pa
    import pyarrow.compute as pc
    text = np.asarray(pc.cast(pa.array(x), pa.string()).to_numpy(zero_copy_only=False), dtype=object)
    ax = np.abs(x)
    with np.errstate(invalid="ignore"):
        slow = ~((ax >= 1e-4) & (ax < 1e10) & (x != np.floor(x)))
    if slow.any():
        text[slow] = x[slow].astype(str).astype(object)
    return text


def _csv_text(col: Column, s: pd.Series, field=_csv_field) -> np.ndarray:
    """A column's CSV fields (object array of str), vectorised: labels escaped
    (:func:`csv_text`) and quoted once per distinct value."""
    import pandas as pd
    null = s.isna().to_numpy()
    if col.type == "numeric" and not col.integer:
        text = _float_text(s.to_numpy(dtype=np.float64, na_value=0.0))
    elif col.type == "numeric":
        text = s.to_numpy(dtype=np.int64, na_value=0).astype(str).astype(object)
    elif col.type == "datetime":  # ISO 8601, the date alone for day resolution
        text = np.array(s.dt.strftime("%Y-%m-%d" if col.unit == "day" else "%Y-%m-%dT%H:%M:%S"), dtype=object)
    else:
        codes, uniques = pd.factorize(s.astype(object), use_na_sentinel=True)
        labels = np.array([field(csv_text(str(u))) for u in uniques] + [""], dtype=object)
        text = labels[np.where(codes < 0, len(uniques), codes)]
    if field is not _csv_field and col.type != "categorical":
        text = np.array([field(v) for v in text], dtype=object)
    text[null] = field(csv_text(col.missing[0]) if col.nullable else "")
    return text


# Rows formatted at once by the Arrow path (its string offsets are 32-bit).
_CSV_SLICE = 1 << 16


def _csv_arrow(col: Column, s: pd.Series, codes: np.ndarray | None = None) -> pa.Array:
    """A column's CSV fields (minimal quoting) as an Arrow string array: the same text as
    :func:`_csv_text` with :func:`_csv_field`, formatted in Arrow. A categorical column's
    fields are taken from its ``codes`` when given (the codes ``s`` was decoded from)."""
    if col.type == "categorical" and codes is not None:
        return _csv_arrow_of(col, codes=codes)
    null = s.isna().to_numpy()
    if col.type == "numeric" and not col.integer:
        return _csv_arrow_of(col, numbers=s.to_numpy(dtype=np.float64, na_value=0.0), null=null)
    if col.type == "numeric":
        return _csv_arrow_of(col, numbers=s.to_numpy(dtype=np.int64, na_value=0), null=null)
    return _csv_arrow_of(col, series=s, null=null)


def _csv_arrow_of(col: Column, *, codes: np.ndarray | None = None, numbers: np.ndarray | None = None,
                  null: np.ndarray | None = None, series: pd.Series | None = None) -> pa.Array:
    """:func:`_csv_arrow` from what a column was decoded to: a categorical column's
    ``codes``; a numeric column's ``numbers`` (any value where ``null``); else its ``series``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    token = _csv_field(csv_text(col.missing[0]) if col.nullable else "")
    if col.type == "categorical" and codes is not None:
        words = [*col.values, *([col.other_label] if col.other else [])]
        labels = pa.array([_csv_field(csv_text(w)) for w in words] + ([token] if col.nullable else []), pa.string())
        return labels.take(pa.array(np.asarray(codes, dtype=np.int32)))
    assert null is not None
    if col.type == "numeric" and not col.integer:
        x = np.asarray(numbers, dtype=np.float64)
        text = pc.cast(pa.array(x), pa.string())
        ax = np.abs(x)
        with np.errstate(invalid="ignore"):
            slow = ~((ax >= 1e-4) & (ax < 1e10) & (x != np.floor(x))) & ~null
        if slow.any():  # repr's form where Arrow's shortest form differs (see _float_text)
            text = pc.replace_with_mask(text, pa.array(slow), pa.array(x[slow].astype(str).tolist(), pa.string()))
    elif col.type == "numeric":
        text = pc.cast(pa.array(np.asarray(numbers, dtype=np.int64)), pa.string())
    elif col.type == "categorical":
        assert series is not None
        coded = pa.Array.from_pandas(series.astype(object), type=pa.string()).dictionary_encode()
        labels = pa.array([_csv_field(csv_text(u)) for u in coded.dictionary.to_pylist()], pa.string())
        text = labels.take(coded.indices)
    else:
        assert series is not None
        text = pa.array(list(_csv_text(col, series, _csv_field)), pa.string())
    return pc.if_else(pa.array(null), pa.scalar(token, pa.string()), text)


def _joined_lines(cols: list[pa.Array]) -> pa.Buffer:
    """The UTF-8 bytes of the rows whose fields are ``cols`` (two or more), each line ended
    by ``\n``: one Arrow join, no Python string."""
    import pyarrow as pa
    import pyarrow.compute as pc
    last = pc.binary_join_element_wise(cols[-1], pa.scalar("\n"), pa.scalar(""))
    joined = pc.binary_join_element_wise(*cols[:-1], last, pa.scalar(","))
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32, count=len(joined) + 1, offset=4 * joined.offset)
    return joined.buffers()[2][int(offsets[0]):int(offsets[-1])]


def _csv_lines(df: pd.DataFrame, schema: Schema, codes: np.ndarray | None) -> str:
    """The CSV lines of ``df`` (at most :data:`_CSV_SLICE` rows), each ended by ``\n``."""
    if not len(df):
        return ""
    cols = [_csv_arrow(col, df[col.name], None if codes is None else codes[:, j])
            for j, col in enumerate(schema.columns)]
    return _joined_lines(cols).to_pybytes().decode("utf-8")


def csv_block_writes(schema: Schema) -> bool:
    """Whether :func:`csv_block` writes this schema's lines: :func:`write_csv`'s Arrow path
    (two columns or more, and no label or missing token holding a carriage return)."""
    return _csv_field_of(schema) is _csv_field and len(schema.columns) > 1


def csv_block(schema: Schema, columns: Sequence[DecodedColumn], codes: np.ndarray) -> pa.Buffer | None:
    """The CSV lines (UTF-8 bytes, no header) of a block decoded by
    :func:`~dpsynth.rows.encoding.decode_columns` from ``codes``: the bytes :func:`write_csv`
    writes for :func:`~dpsynth.rows.encoding.decode`'s frame of the same codes and draws.
    None when that writer would not take its Arrow path (:func:`csv_block_writes` false):
    the caller then writes the frame."""
    if not csv_block_writes(schema):
        return None
    import pyarrow as pa
    out = []
    for a in range(0, len(codes), _CSV_SLICE):
        part = slice(a, a + _CSV_SLICE)
        cols = [_csv_arrow_of(col, codes=codes[part, j]) if col.type == "categorical" else
                _csv_arrow_of(col, numbers=None if d.numbers is None else d.numbers[part], null=d.null[part],
                              series=None if d.series is None else d.series.iloc[part])
                for j, (col, d) in enumerate(zip(schema.columns, columns))]
        out.append(_joined_lines(cols))
    return out[0] if len(out) == 1 else pa.py_buffer(b"".join(b.to_pybytes() for b in out)) if out else pa.py_buffer(b"")


def _csv_field_of(schema: Schema):
    has_cr = any(c.type == "categorical" and any("\r" in v for v in (*c.values, *c.missing)) for c in schema.columns)
    return _quote_all if has_cr else _csv_field


def csv_header(schema: Schema) -> str:
    """The header line :func:`write_csv` writes (with its ``\n``)."""
    field = _csv_field_of(schema)
    return ",".join(field(c.name) for c in schema.columns) + "\n"


def write_csv(df: pd.DataFrame, schema: Schema, path: str | Path | IO[str], *, header: bool = True,
              codes: np.ndarray | None = None) -> None:
    """CSV in the input's conventions: a missing cell is written as the column's first token.

    Numbers are written as numbers (floats as ``repr``); a text cell (a category label, a
    missing token) that a spreadsheet would evaluate is escaped by :func:`csv_text`
    (``synthetic.parquet`` keeps the exact values). The csv module's minimal quoting and
    ``\\n`` line ends, or every cell quoted when a label or token holds a ``\\r`` (the csv
    module would leave it unquoted and break the row). ``path`` may be an open text file
    (a streamed table appends its blocks with ``header=False``). ``codes``, the codes ``df``
    was decoded from (:func:`decode`), spare re-reading the labels of categorical columns."""
    field = _csv_field_of(schema)
    if field is _csv_field and len(schema.columns) > 1:  # the common case, joined by Arrow
        text = (csv_header(schema) if header else "") + "".join(
            _csv_lines(df.iloc[a:a + _CSV_SLICE], schema, None if codes is None else codes[a:a + _CSV_SLICE])
            for a in range(0, len(df), _CSV_SLICE))
    else:
        cols = [_csv_text(col, df[col.name], field) for col in schema.columns]
        lines = [csv_header(schema)[:-1]] if header else []
        if len(cols) == 1:  # the csv module quotes a row that is one empty field
            lines += ['""' if v == "" else v for v in cols[0]]
        else:
            lines += [",".join(row) for row in zip(*cols)]
        text = "".join(line + "\n" for line in lines)
    if isinstance(path, (str, Path)):
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    else:
        path.write(text)
