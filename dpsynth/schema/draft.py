"""Drafting a schema from data: a convenience that reads private data.

A draft's categories and bounds come from the rows, so a release built on an
unreviewed draft could publish them (a rare category, an extreme value). The draft
therefore:

* carries ``draft: true`` until a person removes it (a release refuses it);
* flags each column derived from the rows (``drafted_from_data`` plus a YAML comment);
* rounds numeric bounds outward to a 1-2-5 step and cuts equal bins on that step, so
  no bound equals an observed extreme and the bin labels are round numbers;
* drafts dates and times as ``datetime`` columns, bounds rounded outward to a whole
  year, month, day or hour, one bin per such step;
* keeps integer columns numeric (``integer: true``), never a list of strings; a column
  of few integers (at most ``max_categories``, often codes) gets one bin per integer;
* does not list category values seen in fewer than ``min_count`` rows: they fold into
  ``other`` (the caller learns only that some were folded, not which); values folded
  only because of ``max_categories`` are named in a comment;
* lists categories in their natural order (numbers numerically, ``<1`` before ``1``,
  ranges by their start), never by frequency;
* leaves out columns whose values are unique or nearly unique per row (an identifier,
  a row number), with a comment saying why.

:mod:`dpsynth.privacy.schema_draft` drafts with DP instead (``schema infer --epsilon``): no
marker. Drafting works on a table already read (``dpsynth schema infer`` reads the file with
:func:`dpsynth.rows.encoding.read_table`): this module imports nothing that reads files, so
the schema package never depends on the rows package.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from .core import PLACEHOLDER
from .timecols import format_seconds, seconds_of, to_seconds

__all__ = ["Draft", "draft_from_table", "draft_from_dataframe", "natural_key", "nice_bounds", "WARNING"]

WARNING = (
    "WARNING: this schema was drafted by reading the private data: its categories and "
    "bounds come from the rows. Review it and replace them with public knowledge "
    "before any release."
)
_MISSING_TOKENS = ("", "NA", "N/A", "N", "NaN", "nan", "null", "NULL", "?", "None")
# A text or integer column with at least this share of distinct values (over at least
# _ID_MIN_ROWS rows) is taken for an identifier or a row number and left out.
_ID_SHARE = 0.9
_ID_MIN_ROWS = 20
_LEFT_OUT = ("nearly every row holds a different value (an identifier or a row number?): left out of the "
             "draft. Drop it from the input (a release refuses a column the schema does not declare), or "
             "declare it with public categories or bounds if it carries information")
_FORMATTED_OUT = ("its values are numbers written with a thousands separator, a currency sign or '%' "
                  "(1,234 / $12.50 / 12%), which a release does not read as numbers (every cell would be "
                  "missing): left out of the draft. Write them as plain numbers (1234.5) and draft again, "
                  "or drop the column")
_OVERFLOW_OUT = ("its values are numbers whose range overflows a float (magnitudes near 1.8e308, the largest "
                 "a float holds): no bounds a release can cut into bins: left out of the draft. Rescale the "
                 "column (e.g. its logarithm) and draft again, or drop it")
_FORMATTED = re.compile(r"[-+]?[$€£¥]?\s?[-+]?(?:\d{1,3}(?:[, \u00a0']\d{3})+|\d+)(?:\.\d+)?\s?%?")
_DATES_OUT = ("its values are dates written day/month/year or month/day/year, which a release does not "
              "read as dates: left out of the draft. Write them as ISO 8601 (2021-04-03) and draft again")
_LOCAL_DATE = re.compile(r"(?:\d{1,2}/\d{1,2}/(?:\d{2}|\d{4})|\d{1,2}([.-])\d{1,2}\1\d{4})"
                         r"(?:[ T]\d{1,2}:\d{2}(?::\d{2})?)?")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:[.,]\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class Draft:
    """A drafted schema (a dict ``schema_from_dict`` accepts) and reviewer notes per column."""

    schema: dict[str, Any]
    notes: dict[str, list[str]] = field(default_factory=dict)
    #: Columns left out of the draft, with the reason (written as comments).
    left_out: dict[str, str] = field(default_factory=dict)

    def to_yaml(self) -> str:
        """The draft as YAML with its notes as comments above each column."""
        lines = [
            "# DRAFT made by `dpsynth schema infer` from the PRIVATE data. Every column marked",
            "# drafted_from_data took its bounds or categories from the rows: replace them with",
            "# public knowledge (a code book, a standard, a published range), then remove `draft`.",
            "draft: true  # remove this line after review: a release refuses a schema with draft: true",
            yaml.safe_dump({"name": self.schema["name"]}, sort_keys=False, allow_unicode=True).rstrip(),
            "columns:",
        ]
        for col in self.schema["columns"]:
            lines += [f"  # {note}" for note in self.notes.get(col["name"], [])]
            flow = yaml.safe_dump(col, default_flow_style=True, sort_keys=False, allow_unicode=True, width=10**6)
            lines.append("  - " + flow.strip())
        for name, why in self.left_out.items():
            lines.append(f"  # column {name}: {why}")
        return "\n".join(lines).rstrip("\n") + "\n"  # exactly one final newline


def nice_bounds(lo: float, hi: float, bins: int, integer: bool = False) -> tuple[float, float, int]:
    """Bounds rounded outward to a multiple of a 1-2-5 step giving at most about ``bins`` bins.

    Returns ``(low, high, number of bins)``; each bin is one step wide. For integers the
    step is at least 1 and ``high`` lies strictly above ``hi``, so the top integer keeps a
    half-open bin of its own instead of sharing the closed last bin.
    """
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
        raise ValueError("bounds need finite numbers with lo <= hi")  # never quotes a value: they come from rows
    raw = (hi - lo) / max(bins, 1) or abs(lo) / max(bins, 1) or 1.0
    exp = math.floor(math.log10(raw))
    step = next(m * 10.0**exp for m in (1, 2, 5, 10) if m * 10.0**exp >= raw * (1 - 1e-12))
    if integer:
        step = max(1.0, float(round(step)))
    digits = max(0, -exp + 1)
    low = round(math.floor(lo / step) * step, digits)
    if integer:
        high = round((math.floor(hi / step) + 1) * step, digits)
    else:
        high = round(math.ceil(hi / step) * step, digits)
        if high <= low:
            high = round(low + step, digits)
    return low, high, int(round((high - low) / step))


def draft_from_dataframe(
    df: pd.DataFrame, name: str = "data", max_categories: int = 50, bins: int = 10, min_count: int = 20
) -> Draft:
    """Drafts a schema from a DataFrame (reads the private data); same rules as a file."""
    return draft_from_table(pa.Table.from_pandas(df, preserve_index=False), name, max_categories, bins, min_count)


def draft_from_table(
    table: pa.Table, name: str, max_categories: int = 50, bins: int = 10, min_count: int = 20
) -> Draft:
    """A draft schema from an Arrow table (reads private data: the draft is marked for review)."""
    for key, value in (("max_categories", max_categories), ("bins", bins), ("min_count", min_count)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be a whole number >= 1, got {value!r}")
    columns, notes, left_out = [], {}, {}
    for col_name in table.column_names:
        arr = table.column(col_name)
        # stripped as the encoder strips a cell: a cell of spaces only is missing, as an empty one
        text = pd.Series(pc.cast(arr, pa.string()).to_pylist(), dtype=object).str.strip()
        null = text.isna() | text.isin(_MISSING_TOKENS)
        coded = _word_codes(text, null) if not pa.types.is_temporal(arr.type) else null & False
        values = text[~(null | coded)]
        nums = pd.to_numeric(values, errors="coerce")
        temporal = pa.types.is_timestamp(arr.type) or pa.types.is_date(arr.type)
        x = nums.to_numpy(dtype=np.float64)
        numeric = bool(nums.notna().all()) and _finite_span(x)
        is_number = len(values) > 0 and not temporal and numeric and not _has_leading_zeros(values)
        present = ~(null | coded).to_numpy()
        times = None if is_number or len(values) == 0 else seconds_of(arr, _MISSING_TOKENS)[present]
        is_time = times is not None and not np.isnan(times).any()
        if not (is_number or is_time):  # 'N' alone is missing in a number or date column, a value here
            null = null & (text != "N")
            values = text[~(null | coded)]
        if not (is_number or is_time) and _local_dates(values):
            left_out[col_name] = _DATES_OUT
            continue
        if not (is_number or is_time) and len(values) and bool(nums.notna().all()) and _overflows(x):
            left_out[col_name] = _OVERFLOW_OUT
            continue
        # times to the second differ on nearly every row: a datetime, not an identifier
        if not is_time and _identifier_like(values, nums if numeric else None):
            left_out[col_name] = _FORMATTED_OUT if _formatted_numbers(values) else _LEFT_OUT
            continue
        if is_number:
            col, note = _numeric_column(col_name, x[np.isfinite(x)], bins, max_categories)
            if not np.isfinite(x).all():
                note.append(f"{col_name}: infinite values ('inf', '-inf') are not in the bounds: a release "
                            "clamps them to the nearest bound, as any value outside them.")
        elif is_time:
            col, note = _datetime_column(col_name, times)
        else:
            col, note = _categorical_column(col_name, values, max_categories, min_count)
        if coded.any():
            note.append(f"{col_name}: a few distinct words stand among the numbers (codes for no answer?): a "
                        "release reads every cell that is not a number as missing. Check that this is meant.")
        if null.any() or coded.any():
            col["missing"] = sorted(set(text[null].dropna().tolist())) or [""]
        columns.append(col)
        notes[col_name] = note
    if not columns:
        raise ValueError("every column looks like an identifier (nearly one value per row): nothing to draft")
    return Draft(schema={"draft": True, "name": name, "columns": columns}, notes=notes, left_out=left_out)


def _word_codes(text: pd.Series, null: pd.Series) -> pd.Series:
    """Cells of a column of numbers that hold one of a few words without a digit ('unknown',
    'refused', '-'): at most 5 distinct, in at most a fifth of the cells. A label with a digit
    ('3+', '<1') keeps the column a list of categories."""
    present = text[~null]
    words = present[pd.to_numeric(present, errors="coerce").isna()]
    distinct = words.unique()
    if words.empty or len(words) > 0.2 * len(present) or len(distinct) > 5 or any(
            any(ch.isdigit() for ch in str(w)) for w in distinct):
        return null & False
    return text.isin(set(distinct)) & ~null


def _finite_span(x: np.ndarray) -> bool:
    """Numbers with some finite values whose range is a finite float (infinities aside: a
    release clamps them to the bounds, as any value outside them)."""
    finite = x[np.isfinite(x)]
    if finite.size == 0:
        return False
    with np.errstate(over="ignore"):
        return bool(np.isfinite(finite.max() - finite.min()))


def _overflows(x: np.ndarray) -> bool:
    """Numbers whose finite values span more than a float holds (``1e308`` and ``-1.8e308``)."""
    finite = x[np.isfinite(x)]
    return bool(finite.size) and not _finite_span(x)


def _local_dates(values: pd.Series) -> bool:
    """Dates written for people (``03/04/2021``, ``3.4.2021``): a release reads ISO 8601 only."""
    distinct = pd.Series(values.unique(), dtype=object).astype(str)
    return bool(not distinct.empty and distinct.str.fullmatch(_LOCAL_DATE).all())


def _formatted_numbers(values: pd.Series) -> bool:
    """Numbers written for people (``1,234``, ``$12.50``, ``12%``): a release reads plain numbers
    only, so such a column would encode as missing everywhere."""
    distinct = pd.Series(values.unique(), dtype=object).astype(str)
    if distinct.empty:
        return False
    plain = pd.to_numeric(distinct, errors="coerce").notna()
    readable = distinct.str.fullmatch(_FORMATTED) | plain
    return bool(readable.all() and not plain.all())


def _identifier_like(values: pd.Series, nums: pd.Series | None) -> bool:
    """Text or whole numbers, nearly one distinct value per row: an id or a row number.
    Real-valued columns (measurements are often all distinct) are kept."""
    if len(values) < _ID_MIN_ROWS:
        return False
    if nums is not None and not bool(np.all(np.floor(nums.to_numpy(dtype=np.float64)) == nums.to_numpy())):
        return False
    return values.nunique() >= _ID_SHARE * len(values)


def natural_key(label: str) -> tuple:
    """Sort key of a category label in natural order: labels that start with a number (after
    an optional ``<``, ``<=``, ``>``, ``>=`` or ``~``) by that number (``<1`` before ``1``
    before ``1-5`` before ``>1``; ranges by their start), then the other labels by text."""
    text = str(label).strip()
    m = re.match(r"^(<=|>=|<|>|~)?\s*(" + _NUMBER.pattern + ")", text)
    if m is None:
        return (1, 0.0, 0, _text_parts(text), text)
    try:
        number = float(m.group(2).replace(",", "."))
    except ValueError:
        return (1, 0.0, 0, _text_parts(text), text)
    rank = {"<": -2, "<=": -1, None: 0, "~": 0, ">=": 1, ">": 2}[m.group(1)]
    if rank == 0 and text[m.end():].strip().startswith("+"):
        rank = 1  # "65+" after "65"
    return (0, number, rank, _text_parts(text), text)


def _text_parts(text: str) -> tuple[tuple[int, int, str], ...]:
    """Case-folded text with its digit runs compared as numbers (``s2`` before ``s10``)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text.casefold()) if p)


def _has_leading_zeros(values: pd.Series) -> bool:
    """Codes like ZIP '01234' look numeric but are labels."""
    s = values.astype(str).str.strip()
    return bool((s.str.match(r"^-?0\d") & ~s.str.contains(r"[.eE]")).any())


def _numeric_column(name: str, x: np.ndarray, bins: int, max_categories: int) -> tuple[dict[str, Any], list[str]]:
    integer = bool(np.all(np.floor(x) == x))
    lo, hi = float(x.min()), float(x.max())
    if integer and hi - lo + 1 <= max_categories:  # few integers (often codes): one bin each
        low, high, n = lo, hi + 1, int(hi - lo + 1)
    else:
        low, high, n = nice_bounds(lo, hi, bins, integer)
    col: dict[str, Any] = {"name": name, "type": "numeric", "bounds": [_plain(low), _plain(high)], "bins": n}
    if integer:
        col["integer"] = True
    col["drafted_from_data"] = ["bounds"]
    step = _plain(round((high - low) / n, 12))
    return col, [
        f"{name}: bounds are the observed min and max rounded outward to a multiple of {step}; "
        f"{n} bins of width {step}. Replace them with a public range and public cut points."
    ]


# calendar step of the bins for a span of at least this many seconds, as (bins, period)
_TIME_STEPS = ((3 * 365 * 86400, "year", "Y"), (60 * 86400, "month", "M"), (2 * 86400, "day", "D"), (0, "hour", "h"))


def _datetime_column(name: str, seconds: np.ndarray) -> tuple[dict[str, Any], list[str]]:
    lo, hi = float(seconds.min()), float(seconds.max())
    bins, period = next((b, p) for span, b, p in _TIME_STEPS if hi - lo >= span)
    first = pd.Timestamp(int(lo), unit="s").to_period(period)
    last = pd.Timestamp(int(hi), unit="s").to_period(period) + 1  # strictly after the latest value
    unit = "day" if np.all(seconds % 86400 == 0) else "second"
    bounds = [format_seconds(to_seconds(first.start_time)), format_seconds(to_seconds(last.start_time))]
    col = {"name": name, "type": "datetime", "bounds": bounds, "bins": bins, "unit": unit,
           "drafted_from_data": ["bounds"]}
    return col, [f"{name}: bounds are the earliest and latest values rounded outward to a whole {bins}; "
                 f"one bin per {bins}. Replace them with a public period (e.g. the collection window)."]


def _categorical_column(
    name: str, values: pd.Series, max_categories: int, min_count: int
) -> tuple[dict[str, Any], list[str]]:
    counts = values.value_counts()
    frequent = counts[counts >= min_count]
    # the most frequent first (ties by value, for a deterministic choice), then natural order
    ranked = sorted(frequent.index, key=lambda v: (-frequent[v], v))
    keep, beyond = ranked[:max_categories], sorted(ranked[max_categories:], key=natural_key)
    listed = sorted(keep, key=natural_key)
    folded = len(counts) > len(ranked)  # some values are rare (not named: they are the risky ones)
    col: dict[str, Any] = {"name": name, "type": "categorical", "values": listed or [PLACEHOLDER]}
    note = [f"{name}: values observed in the data (each in at least {min_count} rows); "
            "replace them with the public list of categories."]
    col["drafted_from_data"] = ["values", "other"] if folded or beyond else ["values"]
    if folded or beyond:
        col["other"] = True
    if folded:
        note.append(f"{name}: values seen in fewer than {min_count} rows are not listed: they fall into 'other'. "
                    "Add any public category they stand for.")
    if beyond:
        note.append(f"{name}: --max-categories {max_categories} folded these {len(beyond)} values into 'other': "
                    + ", ".join(map(_quoted, beyond)) + ". List any that matter (or raise --max-categories).")
    if not listed:
        note.append(f"{name}: no value is frequent enough to list: write the public categories in place of "
                    f"{PLACEHOLDER}, or drop the column.")
    return col, note


def _quoted(v: str) -> str:
    """A value for a one-line YAML comment (no line breaks)."""
    return repr(str(v).replace("\n", " ").replace("\r", " "))


def _plain(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x
