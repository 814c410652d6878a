"""Reading and checking a schema file: YAML (or a parsed mapping) to a :class:`~.core.Schema`.

Every check names the column and the key at fault and raises :class:`~.core.SchemaError`
before anything is read or charged. The file format is described in :mod:`.core`.
"""

from __future__ import annotations

import math
import unicodedata
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .core import DRAFTED_FROM_DATA, Column, Schema, SchemaError, _as_label, _fmt_number
from .timecols import CALENDAR_BINS, TIME_UNITS, calendar_edges, to_seconds

__all__ = ["check_column_name", "load_schema", "schema_from_dict"]

_MAX_BINS = 100_000
_MAX_CATEGORIES = 1_000_000

# Marginal keys join column names with "|" (measurement.parquet): a name must not hold it.
_NAME_FORBIDDEN = frozenset("|")

_COLUMN_KEYS = {
    "name", "type", "values", "bounds", "bins", "edges", "integer",
    "missing", "other", "other_label", "fill", "description", "drafted_from_data", "unit",
}


def _number(col: str, key: str, x: Any) -> float:
    if isinstance(x, str):
        # YAML 1.1 reads 1e4 (no dot) as text: a numeric field takes numeric text too.
        try:
            x = float(x.strip().replace("_", ""))
        except ValueError:
            raise SchemaError(f"column {col!r}: {key} must hold numbers, got {x!r}") from None
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise SchemaError(f"column {col!r}: {key} must hold numbers, got {x!r}")
    v = float(x)
    if not math.isfinite(v):
        raise SchemaError(f"column {col!r}: {key} must be finite, got {x!r}")
    return v


def _labels(col: str, key: str, raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, (list, tuple)):
        raise SchemaError(f"column {col!r}: {key} must be a list, got {type(raw).__name__}")
    out = []
    for v in raw:
        try:
            out.append(_as_label(v))
        except TypeError:
            raise SchemaError(f"column {col!r}: {key} entries must be text or numbers, got {v!r}") from None
    if len(set(out)) != len(out):
        dup = sorted({v for v in out if out.count(v) > 1})
        raise SchemaError(f"column {col!r}: {key} lists {dup} more than once")
    return tuple(out)


def check_column_name(name: str, position: int) -> str:
    """A table's column name as a schema column can hold it (else SchemaError naming it)."""
    return _column_name({"name": name}, position)


def _column_name(raw: Any, position: int) -> str:
    """A column entry's name, checked (the entry must be a mapping)."""
    if not isinstance(raw, Mapping):
        raise SchemaError(f"column #{position + 1}: must be a mapping with name and type")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SchemaError(f"column #{position + 1}: needs a non-empty text 'name' (a column with no name is "
                          "often a row index written with the table: drop it)")
    bad = sorted({ch for ch in name if ch in _NAME_FORBIDDEN or not ch.isprintable()})
    if bad:
        raise SchemaError(
            f"column {name!r}: its name contains {bad}, which the measurement files use as a separator "
            "(or cannot print): rename the column"
        )
    return name


def _parse_column(raw: Any, position: int) -> Column:
    """One column entry of a schema file, checked; errors name the column and the key."""
    name = _column_name(raw, position)
    unknown = sorted(set(raw) - _COLUMN_KEYS)
    if unknown:
        raise SchemaError(f"column {name!r}: unknown keys {unknown}; a column takes {sorted(_COLUMN_KEYS)}")
    ctype = raw.get("type")
    if ctype not in ("categorical", "numeric", "datetime"):
        raise SchemaError(f"column {name!r}: type must be 'categorical', 'numeric' or 'datetime', got {ctype!r}")
    if "unit" in raw and ctype != "datetime":
        raise SchemaError(f"column {name!r}: 'unit' is for datetime columns")
    missing = _labels(name, "missing", raw.get("missing", []))
    other = raw.get("other", False)
    if not isinstance(other, bool):
        raise SchemaError(f"column {name!r}: other must be true or false")
    other_label = raw.get("other_label", "other")
    if not isinstance(other_label, str) or not other_label:
        raise SchemaError(f"column {name!r}: other_label must be non-empty text")
    other_label = unicodedata.normalize("NFC", other_label)
    description = str(raw.get("description", "") or "")
    fill = raw.get("fill")
    drafted = _labels(name, "drafted_from_data", raw.get("drafted_from_data", []))
    if set(drafted) - set(DRAFTED_FROM_DATA):
        raise SchemaError(f"column {name!r}: drafted_from_data may list only {list(DRAFTED_FROM_DATA)}")

    if ctype == "categorical":
        for key in ("bounds", "bins", "edges", "integer"):
            if key in raw:
                raise SchemaError(f"column {name!r}: {key!r} is for numeric columns")
        if "values" not in raw:
            raise SchemaError(f"column {name!r}: a categorical column needs 'values'")
        values = _labels(name, "values", raw["values"])
        if not values:
            raise SchemaError(f"column {name!r}: values is empty")
        if len(values) > _MAX_CATEGORIES:
            raise SchemaError(f"column {name!r}: {len(values)} categories exceed {_MAX_CATEGORIES}; list the "
                              "frequent public values and set other: true, or drop the column")
        clash = sorted(set(values) & set(missing))
        if clash:
            raise SchemaError(f"column {name!r}: {clash} is both a value and a missing token")
        if other and other_label in values:
            raise SchemaError(f"column {name!r}: other_label {other_label!r} is also a value")
        if fill is not None:
            try:
                fill = _as_label(fill)
            except TypeError:
                raise SchemaError(f"column {name!r}: fill must be one of the values") from None
            if fill not in values:
                raise SchemaError(f"column {name!r}: fill {fill!r} is not one of the values")
        return Column(
            name=name, type="categorical", values=values, missing=missing, other=other,
            other_label=other_label, fill=fill, description=description, drafted_from_data=drafted,
        )

    if ctype == "datetime":
        return _parse_datetime(raw, name, missing=missing, fill=fill, description=description, drafted=drafted)

    # numeric
    if "values" in raw or other:
        raise SchemaError(f"column {name!r}: 'values' and 'other' are for categorical columns")
    integer = raw.get("integer", False)
    if not isinstance(integer, bool):
        raise SchemaError(f"column {name!r}: integer must be true or false")
    edges = _edges(raw, name, "numeric")
    if integer:
        _check_integer_bins(name, edges)
    if fill is not None:
        fill = _number(name, "fill", fill)
        if not edges[0] <= fill <= edges[-1]:
            raise SchemaError(f"column {name!r}: fill {fill} lies outside the bounds")
    return Column(
        name=name, type="numeric", edges=edges, integer=integer, missing=missing,
        fill=fill, description=description, drafted_from_data=drafted,
    )


def _check_integer_bins(name: str, edges: tuple[float, ...]) -> None:
    """An integer column's every bin [lo, hi) (the last one closed) must hold a whole number:
    decoding draws whole numbers inside the bin, and an empty bin has none to draw."""
    last = len(edges) - 2
    for i, (lo, hi) in enumerate(zip(edges, edges[1:])):
        first = math.ceil(lo)
        if not (first < hi or (i == last and first <= hi)):
            close = "]" if i == last else ")"
            raise SchemaError(
                f"column {name!r}: integer: true but bin [{_fmt_number(lo)}, {_fmt_number(hi)}{close} "
                "holds no whole number; widen the bins or drop integer"
            )


def _edges(raw: Mapping[str, Any], name: str, ctype: str) -> tuple[float, ...]:
    """Bin edges of a numeric or datetime column: explicit ``edges``, or ``bounds`` cut into
    ``bins`` equal spans (datetime: also a calendar step; edges in whole seconds)."""
    timed = ctype == "datetime"
    point, what = (_time, "dates or times") if timed else (_number, "numbers")
    bounds = raw.get("bounds")
    if bounds is not None:
        if not isinstance(bounds, (list, tuple)) or len(bounds) != 2:
            raise SchemaError(f"column {name!r}: bounds must be [low, high]" + (f" ({what})" if timed else ""))
        lo, hi = (point(name, "bounds", b) for b in bounds)
        if not lo < hi:
            raise SchemaError(f"column {name!r}: bounds must have low < high, got {list(bounds)}")
    if "edges" in raw and "bins" in raw:
        raise SchemaError(f"column {name!r}: give either bins or edges, not both")
    if "edges" in raw:
        if not isinstance(raw["edges"], (list, tuple)) or len(raw["edges"]) < 2:
            raise SchemaError(f"column {name!r}: edges must list at least two {what}")
        edges = tuple(point(name, "edges", e) for e in raw["edges"])
        if bounds is not None and (edges[0] != lo or edges[-1] != hi):
            raise SchemaError(f"column {name!r}: edges must start at bounds[0] and end at bounds[1]")
    elif "bins" in raw:
        bins = raw["bins"]
        calendar = timed and isinstance(bins, str) and bins in CALENDAR_BINS
        if not calendar and (isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= _MAX_BINS):
            steps = f" or one of {list(CALENDAR_BINS)}" if timed else ""
            raise SchemaError(f"column {name!r}: bins must be a whole number from 1 to {_MAX_BINS}{steps}")
        if bounds is None:
            raise SchemaError(f"column {name!r}: bins needs bounds: [low, high]")
        if calendar:
            edges = calendar_edges(lo, hi, bins)
        else:
            cuts = np.linspace(lo, hi, bins + 1)
            edges = tuple(float(x) for x in (np.round(cuts) if timed else cuts))
    else:
        raise SchemaError(f"column {name!r}: a {ctype} column needs bins (with bounds) or edges")
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise SchemaError(f"column {name!r}: edges must be strictly increasing" + (" (whole seconds)" if timed else ""))
    if len(edges) - 1 > _MAX_BINS:
        raise SchemaError(f"column {name!r}: {len(edges) - 1} bins exceed {_MAX_BINS}; choose a longer step")
    return edges


def _time(col: str, key: str, x: Any) -> float:
    try:
        return to_seconds(x)
    except ValueError as exc:
        raise SchemaError(f"column {col!r}: {key}: {exc}") from None


def _parse_datetime(raw: Mapping[str, Any], name: str, **common: Any) -> Column:
    """A datetime column: bounds and edges are dates or times; bins a count or a calendar step."""
    for key in ("values", "other", "other_label", "integer"):
        if key in raw:
            raise SchemaError(f"column {name!r}: {key!r} is not for datetime columns")
    unit = raw.get("unit", "second")
    if unit not in TIME_UNITS:
        raise SchemaError(f"column {name!r}: unit must be one of {list(TIME_UNITS)}, got {unit!r}")
    edges = _edges(raw, name, "datetime")
    fill = common.pop("fill")
    if fill is not None:
        fill = _time(name, "fill", fill)
        if not edges[0] <= fill <= edges[-1]:
            raise SchemaError(f"column {name!r}: fill lies outside the bounds")
    return Column(name=name, type="datetime", edges=edges, unit=unit, fill=fill, missing=common["missing"],
                  description=common["description"], drafted_from_data=common["drafted"])


def schema_from_dict(raw: Any, source: str = "schema") -> Schema:
    """Builds and checks a schema from parsed YAML; errors name ``source`` and the column."""
    if not isinstance(raw, Mapping):
        raise SchemaError(f"{source}: must be a mapping with 'name' and 'columns'")
    unknown = sorted(set(raw) - {"name", "columns", "description", "draft", "dp_draft"})
    if unknown:
        raise SchemaError(f"{source}: unknown top-level keys {unknown}; a schema takes name, columns, "
                          "description, draft and dp_draft")
    draft = raw.get("draft", False)
    if not isinstance(draft, bool):
        raise SchemaError(f"{source}: draft must be true or false (delete the line once reviewed)")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SchemaError(f"{source}: needs a non-empty text 'name'")
    cols = raw.get("columns")
    if not isinstance(cols, list) or not cols:
        raise SchemaError(f"{source}: 'columns' must be a non-empty list")
    columns = tuple(_parse_column(c, i) for i, c in enumerate(cols))
    names = [c.name for c in columns]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SchemaError(f"{source}: columns {dupes} are declared more than once")
    return Schema(name=name, columns=columns, description=str(raw.get("description", "") or ""), draft=draft,
                  dp_draft=_dp_draft_block(raw.get("dp_draft"), source))


def _dp_draft_block(raw: Any, source: str) -> dict[str, Any] | None:
    """The ``dp_draft`` block of a DP schema draft, checked: finite epsilon >= 0, delta in
    [0, 1), rho >= 0, a dataset name (what it was charged to)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise SchemaError(f"{source}: dp_draft must be a mapping (epsilon, delta, rho, dataset, ...)")
    out = dict(raw)
    for key, upper in (("epsilon", math.inf), ("delta", 1.0), ("rho", math.inf)):
        v = out.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < upper) or not math.isfinite(v):
            raise SchemaError(f"{source}: dp_draft.{key} must be a finite number >= 0" +
                              (" below 1" if upper == 1.0 else "") + f", got {v!r}")
    if not isinstance(out.get("dataset"), str) or not out["dataset"].strip():
        raise SchemaError(f"{source}: dp_draft.dataset must name the dataset the draft was charged to")
    return out


def load_schema(path: str | Path) -> Schema:
    """Reads and checks a schema file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SchemaError(f"schema {p}: cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise SchemaError(f"schema {p}: is not UTF-8 text") from None
    import yaml  # here: a schema given as a mapping (the library's path from codes) needs no YAML parser

    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SchemaError(f"schema {p}: invalid YAML{where}") from None
    return schema_from_dict(raw, source=f"schema {p}")

