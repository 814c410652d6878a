"""Datetime columns: times as seconds since 1970-01-01 UTC, so they bin like numbers.

A ``datetime`` column's bounds and edges are stored as whole seconds (UTC; a time
without a zone is read as UTC). Encoding turns each cell into seconds (NaN when it is
not a date or time: a row-level oddity, mapped like any other); decoding draws a whole
number of ``unit`` inside the bin (never the upper bound itself) and returns
``datetime64[s]`` values.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Sequence, TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where used, so a release from codes loads neither pandas nor pyarrow
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

__all__ = ["TIME_UNITS", "CALENDAR_BINS", "to_seconds", "format_seconds", "calendar_edges", "seconds_of", "draw_times"]

# resolution of decoded values, in seconds
TIME_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
# bins that follow the calendar, as pandas frequencies
CALENDAR_BINS = {"year": "YS", "quarter": "QS", "month": "MS", "week": "W-MON", "day": "D", "hour": "h"}


def to_seconds(value: Any) -> float:
    """Whole seconds since 1970-01-01 UTC of a date, datetime or ISO 8601 text; ValueError else."""
    import pandas as pd
    if isinstance(value, bool) or not isinstance(value, (str, dt.date)):
        raise ValueError(f"expected a date or time such as 2020-01-31 or 2020-01-31T12:00:00, got {value!r}")
    try:
        ts = pd.Timestamp(value)
    except (ValueError, TypeError, OverflowError):
        raise ValueError(f"{value!r} is not a date or time in ISO 8601 form (2020-01-31, 2020-01-31T12:00:00)") from None
    if ts is pd.NaT:
        raise ValueError(f"{value!r} is not a date or time")
    if ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    return float(round((ts - pd.Timestamp(0)).total_seconds()))


def format_seconds(seconds: float) -> str:
    """ISO 8601 text of whole seconds: the date alone at midnight."""
    import pandas as pd
    ts = pd.Timestamp(0) + pd.Timedelta(seconds=int(seconds))
    return ts.strftime("%Y-%m-%d") if ts == ts.normalize() else ts.strftime("%Y-%m-%dT%H:%M:%S")


def calendar_edges(lo: float, hi: float, step: str) -> tuple[float, ...]:
    """Edges at each calendar ``step`` (month, year...) between ``lo`` and ``hi``, plus both ends."""
    import pandas as pd
    start, end = pd.Timestamp(0) + pd.Timedelta(seconds=lo), pd.Timestamp(0) + pd.Timedelta(seconds=hi)
    inner = pd.date_range(start, end, freq=CALENDAR_BINS[step])
    points = {lo, hi} | {float((t - pd.Timestamp(0)).total_seconds()) for t in inner}
    return tuple(sorted(p for p in points if lo <= p <= hi))


def seconds_of(arr: pa.Array | pa.ChunkedArray, missing: Sequence[str] = ()) -> np.ndarray:
    """Seconds since the epoch of each cell (float), NaN for a cell that is not a date or time."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
    typ = arr.type
    if pa.types.is_date(typ):
        arr, typ = pc.cast(arr, pa.timestamp("s")), pa.timestamp("s")
    if pa.types.is_timestamp(typ):
        per = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[typ.unit]
        ints = pc.cast(pc.cast(arr, pa.timestamp(typ.unit)), pa.int64())  # drops the zone: values are UTC
        return pc.cast(ints, pa.float64()).to_numpy(zero_copy_only=False) / per
    if pa.types.is_dictionary(typ):
        arr = pc.cast(arr, typ.value_type)
    text = pc.utf8_trim_whitespace(pc.cast(arr, pa.string()))
    dic = pc.dictionary_encode(text.combine_chunks() if isinstance(text, pa.ChunkedArray) else text)
    uniques = pd.Series(dic.dictionary.to_pylist(), dtype=object)
    uniques = uniques.where(~uniques.isin(set(missing) | {""}), None)
    parsed = pd.to_datetime(uniques, errors="coerce", format="ISO8601", utc=True)
    values = parsed.dt.tz_convert(None).to_numpy(dtype="datetime64[s]")
    lut = np.append(np.where(np.isnat(values), np.nan, values.astype(np.int64).astype(np.float64)), np.nan)
    idx = dic.indices.fill_null(len(uniques)).to_numpy(zero_copy_only=False)
    return lut[idx]


def draw_times(edges: np.ndarray, codes: np.ndarray, n_regular: int, unit: str, rng: np.random.Generator) -> pd.Series:
    """A time inside each code's bin: a whole number of ``unit`` drawn uniformly in
    [lo, hi), the last bin too (a period such as a year excludes its end); a bin holding
    no whole unit gives its start. Codes past the bins (other, missing) give NaT."""
    import pandas as pd
    u = float(TIME_UNITS[unit])
    regular = codes < n_regular
    c = np.where(regular, codes, 0).astype(np.int64)
    lo, hi = edges[c], edges[c + 1]
    ilo = np.ceil(lo / u)
    ihi = np.ceil(hi / u) - 1.0
    empty = ihi < ilo
    draw = ilo + np.floor(rng.random(codes.shape[0]) * np.where(empty, 0.0, ihi - ilo + 1.0))
    x = np.where(empty, lo, np.minimum(draw, ihi) * u)
    out = x.astype(np.int64).astype("datetime64[s]")
    out[~regular] = np.datetime64("NaT")
    return pd.Series(out, dtype="datetime64[s]")
