"""Dataset schemas: the public domain of every column (the model; :mod:`.parse` reads a file).

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
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from .timecols import TIME_UNITS, format_seconds

__all__ = ["Column", "ColumnType", "Schema", "SchemaError", "DRAFTED_FROM_DATA", "PLACEHOLDER", "format_edges"]

ColumnType = Literal["categorical", "numeric", "datetime"]
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
        from .parse import schema_from_dict

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
        import yaml  # here, not at import: about 0.8 MB that a release from a schema mapping never uses

        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)
