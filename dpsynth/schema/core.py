"""Dataset schemas: the public domain of every column.

A schema is a YAML file, one per dataset::

    name: car
    columns:
      - {name: buying, type: categorical, values: [vhigh, high, med, low]}
      - {name: age, type: numeric, bounds: [0, 100], bins: 10, integer: true}
      - {name: income, type: numeric, edges: [0, 1e4, 5e4, 1e5, 1e6], missing: ["N"]}
      - {name: city, type: categorical, values: [a, b], other: true}

Per column:

* ``type``: ``categorical`` (``values``: the public list of categories) or ``numeric``
  (``bounds: [lo, hi]`` with ``bins: B`` equal-width bins, or explicit ``edges``; the
  bounds default to the outer edges). ``integer: true`` makes decoding draw integers.
  ``datetime``: the same with dates or times (stored as whole seconds, UTC, see
  :mod:`dpsynth.schema.timecols`); ``bins`` may also be a calendar step (``month``...) and
  ``unit`` sets the resolution of decoded values.
* ``missing``: tokens that mean "no value" (an empty cell always does). Declaring it
  makes the column nullable: missing is then a code of its own. A column that does
  not declare it never outputs missing values; a stray empty cell is mapped to
  ``fill`` (default: the first category, or the lower bound).
* ``other`` (categorical only): ``true`` adds a bucket for values outside ``values``
  (``other_label`` names it in the output, default ``"other"``). Without it unseen
  values go to missing if nullable, else to ``fill``.
* ``drafted_from_data``: what ``dpsynth schema infer`` derived from the rows for this
  column (``bounds``, ``values``, ``other``): a flag for the reviewer, kept if left.

A draft carries ``draft: true`` at the top level until a person has reviewed it; a
release refuses such a schema, and any schema whose columns still carry
``drafted_from_data`` (a domain read from the rows is not public, DESIGN.md decision
15), unless the caller opts in to a release labelled NOT differentially private
(:meth:`Schema.require_reviewed`). A schema drafted with DP (``dpsynth schema infer
--epsilon``, :mod:`dpsynth.privacy.schema_draft`) carries no marker but a top-level ``dp_draft``
block stating what the draft spent; a release counts it in the manifest.

Codes of a column: ``0 .. len(values)-1`` (or one per bin), then ``other`` if enabled,
then ``missing`` if nullable. Codes are a pure function of (value, schema), so the
domain never depends on the rows.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

import numpy as np
import yaml

from .timecols import CALENDAR_BINS, TIME_UNITS, calendar_edges, format_seconds, to_seconds

__all__ = ["Column", "Schema", "SchemaError", "load_schema", "schema_from_dict", "check_column_name",
           "DRAFTED_FROM_DATA"]

ColumnType = Literal["categorical", "numeric", "datetime"]
_MAX_BINS = 100_000
_MAX_CATEGORIES = 1_000_000
# What a drafted column may say it derived from the rows.
DRAFTED_FROM_DATA = ("bounds", "values", "other")
#: What a draft writes for the categories when no value is frequent enough to list.
PLACEHOLDER = "LIST-THE-PUBLIC-CATEGORIES"


class SchemaError(ValueError):
    """A schema that cannot describe a public domain; the message names the column."""


def _fmt_number(x: float) -> str:
    return repr(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def format_edges(edges: Sequence[float]) -> list[str]:
    """Bin edges as short text: the fewest decimals that keep every edge distinct and
    within 1% of the narrowest bin of its true value (``29.700000000000003`` -> ``29.7``,
    ``33.333...`` beside ``0`` and ``66.67`` -> ``33.3``); integers stay integers."""
    e = [float(x) for x in edges]
    widths = [b - a for a, b in zip(e, e[1:]) if b > a]
    tol = 0.01 * min(widths) if widths else 0.0
    for d in range(0, 13):
        text = [_decimals(x, d) for x in e]
        if len(set(text)) == len(text) and all(abs(float(t) - x) <= tol for t, x in zip(text, e)):
            return text
    return [_fmt_number(x) for x in e]


def _decimals(x: float, d: int) -> str:
    t = f"{x:.{d}f}"
    if "." in t:
        t = t.rstrip("0").rstrip(".")
    return "0" if t == "-0" else t


def _as_label(value: Any) -> str:
    """Canonical text of a category or missing token (YAML may give ints/floats/bools)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return _fmt_number(float(value))
    if isinstance(value, str):
        # One spelling per label: a decomposed "é" (NFD) is the composed one (NFC), which is
        # what encoding compares data values in; an NFC label is unchanged (same fingerprint).
        return unicodedata.normalize("NFC", value)
    raise TypeError(type(value).__name__)


@dataclass(frozen=True, kw_only=True)
class Column:
    """One column of the public domain: categorical values, or numeric/datetime bin edges,
    with the optional ``other`` and missing codes."""

    name: str
    type: ColumnType
    values: tuple[str, ...] = ()
    edges: tuple[float, ...] = ()
    integer: bool = False
    missing: tuple[str, ...] = ()
    other: bool = False
    other_label: str = "other"
    fill: str | float | None = None
    description: str = ""
    drafted_from_data: tuple[str, ...] = ()
    unit: str = "second"  # datetime: resolution of decoded values (timecols.TIME_UNITS)

    # --- domain -------------------------------------------------------------
    @property
    def nullable(self) -> bool:
        """Whether the column may be missing (it then has a missing code)."""
        return bool(self.missing)

    @property
    def n_regular(self) -> int:
        """Codes that stand for a category or a bin."""
        return len(self.values) if self.type == "categorical" else len(self.edges) - 1

    @property
    def other_code(self) -> int | None:
        """The code of values outside the listed categories (None without ``other``)."""
        return self.n_regular if self.other else None

    @property
    def missing_code(self) -> int | None:
        """The code of missing values (None when the column is not nullable)."""
        return self.n_regular + int(self.other) if self.nullable else None

    @property
    def cardinality(self) -> int:
        """Number of codes: regular values or bins, then ``other``, then missing."""
        return self.n_regular + int(self.other) + int(self.nullable)

    @property
    def bounds(self) -> tuple[float, float]:
        """The lowest and highest bin edge of a numeric or datetime column."""
        if self.type == "categorical":
            raise AttributeError(f"column {self.name!r} is categorical: it has no bounds")
        return (self.edges[0], self.edges[-1])

    @property
    def fill_code(self) -> int:
        """Code given to an empty or unknown cell in a column that cannot hold it."""
        if self.type == "categorical":
            return self.values.index(str(self.fill)) if self.fill is not None else 0
        value = self.edges[0] if self.fill is None else float(self.fill)
        return int(np.clip(np.searchsorted(self.edges, value, side="right") - 1, 0, self.n_regular - 1))

    def labels(self) -> list[str]:
        """Human-readable label of each code, in code order."""
        if self.type == "categorical":
            out = list(self.values)
        else:
            e = [format_seconds(x) for x in self.edges] if self.type == "datetime" else format_edges(self.edges)
            out = [f"[{e[i]}, {e[i + 1]}{']' if i == len(e) - 2 else ')'}" for i in range(len(e) - 1)]
        if self.other:
            out.append(self.other_label)
        if self.nullable:
            out.append(self.missing[0])
        return out

    def to_dict(self) -> dict[str, Any]:
        """The column as it is written in a schema file."""
        d: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.type == "categorical":
            d["values"] = list(self.values)
        elif self.type == "datetime":
            d["edges"] = [format_seconds(x) for x in self.edges]
            d["unit"] = self.unit
        else:
            d["edges"] = [float(x) for x in self.edges]
            if self.integer:
                d["integer"] = True
        if self.missing:
            d["missing"] = list(self.missing)
        if self.other:
            d["other"] = True
            d["other_label"] = self.other_label
        if self.fill is not None:
            d["fill"] = format_seconds(float(self.fill)) if self.type == "datetime" else self.fill
        if self.description:
            d["description"] = self.description
        if self.drafted_from_data:
            d["drafted_from_data"] = list(self.drafted_from_data)
        return d


@dataclass(frozen=True, kw_only=True)
class Schema:
    """The public domain of a table: its name and columns (no data)."""

    name: str
    columns: tuple[Column, ...]
    description: str = ""
    draft: bool = False
    #: What a DP schema draft spent (``dpsynth schema infer --epsilon``): epsilon, delta,
    #: rho, dataset, id, mechanisms. None for a hand-made schema.
    dp_draft: Mapping[str, Any] | None = None
    _index: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {c.name: i for i, c in enumerate(self.columns)})

    @property
    def names(self) -> list[str]:
        """Column names in order."""
        return [c.name for c in self.columns]

    @property
    def cardinalities(self) -> tuple[int, ...]:
        """Codes per column, in order."""
        return tuple(c.cardinality for c in self.columns)

    @property
    def missing_codes(self) -> tuple[int | None, ...]:
        """Each column's missing code (None where it cannot be missing)."""
        return tuple(c.missing_code for c in self.columns)

    def column(self, name: str) -> Column:
        """A column by name; refuses an unknown name."""
        try:
            return self.columns[self._index[name]]
        except KeyError:
            raise SchemaError(f"schema {self.name!r} has no column {name!r}") from None

    def index(self, name: str) -> int:
        """A column's position by name; refuses an unknown name."""
        self.column(name)
        return self._index[name]

    @classmethod
    def from_dataframe(
        cls, df: Any, name: str = "data", *, max_categories: int = 50, bins: int = 10, min_count: int = 20
    ) -> "Schema":
        """A DRAFT schema read from a DataFrame (private data), by the rules of
        ``dpsynth schema infer`` (:mod:`dpsynth.schema.draft`). It carries ``draft=True``: a
        release refuses it until the data-derived bounds and categories are replaced
        with public ones (e.g. write ``to_yaml()``, edit it, delete ``draft: true``)."""
        from .draft import draft_from_dataframe

        draft = draft_from_dataframe(df, name, max_categories=max_categories, bins=bins, min_count=min_count)
        return schema_from_dict(draft.schema, source=f"draft of {name!r}")

    @property
    def data_derived_columns(self) -> dict[str, tuple[str, ...]]:
        """Columns still marked ``drafted_from_data``, with what was read from the rows."""
        return {c.name: c.drafted_from_data for c in self.columns if c.drafted_from_data}

    def require_reviewed(self, accept_data_derived: bool = False) -> None:
        """Refuses, before anything is read or charged, an unreviewed draft (``draft: true``)
        or a schema whose columns still carry ``drafted_from_data`` (its domain came from the
        private rows, so a release on it is not DP), naming the columns. With
        ``accept_data_derived`` both pass: the release is then labelled NOT differentially
        private in every file (:mod:`dpsynth.pipeline`)."""
        held = [c.name for c in self.columns if c.type == "categorical" and PLACEHOLDER in c.values]
        if held:  # never a category, whatever the schema's source
            raise SchemaError(f"schema {self.name!r}: columns {held} still list the draft's placeholder "
                              f"{PLACEHOLDER}: write their public categories in its place, or drop the columns")
        derived = self.data_derived_columns
        if accept_data_derived or not (self.draft or derived):
            return
        which = "; ".join(f"{n} ({', '.join(w)})" for n, w in derived.items())
        what = "an unreviewed draft made by reading the private data" if self.draft else (
            "marked as read from the private rows")
        raise SchemaError(
            f"schema {self.name!r} is {what}" + (f": columns derived from the rows: {which}" if which else "")
            + ". A release on it would publish bounds and categories taken from the rows, so it cannot be DP. "
            "Replace every data-derived bound and category with public knowledge, then delete "
            + ("the line 'draft: true' and " if self.draft else "") + "each drafted_from_data entry; or draft the schema with DP (dpsynth schema infer DATA --epsilon E --dataset NAME); "
            "or pass --accept-data-derived-schema (Python: accept_data_derived_schema=True) to publish "
            "a release labelled NOT differentially private"
        )

    def to_dict(self) -> dict[str, Any]:
        """The schema as it is written in a schema file."""
        d: dict[str, Any] = {"draft": True} if self.draft else {}
        d["name"] = self.name
        if self.dp_draft is not None:
            d["dp_draft"] = dict(self.dp_draft)
        if self.description:
            d["description"] = self.description
        d["columns"] = [c.to_dict() for c in self.columns]
        return d

    def fingerprint(self) -> str:
        """sha256 of the canonical form: two schemas with the same domain hash alike."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def to_yaml(self) -> str:
        """The schema file's text."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)


# --- parsing ----------------------------------------------------------------

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
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SchemaError(f"schema {p}: invalid YAML{where}") from None
    return schema_from_dict(raw, source=f"schema {p}")

