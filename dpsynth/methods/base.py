"""The interface every synthesis method implements, and its parameter parsing.

A method is built from frozen, keyword-only parameters and does three things:

* ``plan(schema, budget)``: every stage's share of the budget, computed from public
  information only, before any row is read (the ledger refuses a plan over budget);
  it also raises for a domain the method cannot handle;
* ``measure(codes, ledger, rng)``: the DP boundary, the only call that reads private
  rows; it spends the planned shares and returns a :class:`Measurement`;
* ``synthesize(measurement, schema, rows, rng)``: post-processing of the measurement
  alone, returning synthetic codes.

The measurement's typed contract lives in :mod:`dpsynth.measurement` (re-exported here).

A method class also declares ``provides_marginals: ClassVar[bool]``: whether its
measurement holds DP marginals (post-processing such as ``correct_marginals`` needs
them; it is refused before any charge for a class that does not say True), and
``measures_counts: ClassVar[bool]``: whether ``measure`` also accepts a
:class:`dpsynth.rows.rowsource.RowSource` and reads only counts from it (memory bounded by
the source's chunk size; runs on a Dask cluster). Other methods get the whole table.

``streams_synthesis: ClassVar[bool]``: whether the method also offers
``sampler(measurement, schema, rows, rng)``, a fitted sampler drawing the synthetic
table block by block (:class:`dpsynth.pipeline.synthetic.BlockSampler`), so that
synthesize holds one block at a time. Other methods build the whole table in memory
(``synthesize``), and a release refuses, before any charge, a table that would not fit
(``DPSYNTH_MAX_TABLE_BYTES``; ``synthesis_bytes_per_cell``, when a method states it, is
its measured peak per cell, else :data:`dpsynth.precheck.BYTES_PER_CELL`).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, ClassVar, Mapping, Protocol, runtime_checkable

import numpy as np

from ..rows.table import EncodedTable
from ..measurement import DP_ADD_REMOVE, Measurement, NoisyCount, NoisyMarginal, PrivacyStatement
from ..privacy.budget import Budget, Charge, Ledger
from ..schema import Schema

__all__ = [
    "DP_ADD_REMOVE",
    "Method",
    "MethodBase",
    "Measurement",
    "NoisyCount",
    "NoisyMarginal",
    "ParamError",
    "PrivacyStatement",
    "convert_param",
    "param",
    "parse_params",
    "params_to_dict",
]


class ParamError(ValueError):
    """A method parameter that is unknown or out of range (names the parameter)."""


@runtime_checkable
class Method(Protocol):
    """What the pipeline calls. ``takes_rows_as``: the name of the parameter that receives
    ``--rows`` when the measurement itself is the rows (private sampling's ``k``), else None."""

    name: ClassVar[str]
    params_type: ClassVar[type]
    takes_rows_as: ClassVar[str | None]
    params: Any

    def plan(self, schema: Schema, budget: Budget) -> tuple[Charge, ...]:
        """Every stage's charge, from public information only, before any row is read."""
        ...

    def measure(self, codes: EncodedTable, ledger: Ledger, rng: np.random.Generator) -> Measurement:
        """The DP step: spends exactly the planned stages; the measurement states its noise."""
        ...

    def synthesize(
        self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator
    ) -> EncodedTable:
        """Post-processing of the measurement alone: ``rows`` synthetic records (None: the method's estimate)."""
        ...


class MethodBase:
    """Defaults every registered method inherits: the protocol's class attributes it
    may leave unset, and construction from its parameter dataclass.

    ``guarantee`` is not optional: every method class that has a ``name`` states, as a
    :class:`PrivacyStatement`, what its releases guarantee by default (DP with its
    neighbour relation, or anonymous / heuristic: NOT DP). ``dpsynth methods`` prints it;
    a release's own measurement may state less (e.g. a heuristic run), never more."""

    name: ClassVar[str]
    params_type: ClassVar[type]
    guarantee: ClassVar[PrivacyStatement]
    takes_rows_as: ClassVar[str | None] = None
    provides_marginals: ClassVar[bool] = False
    measures_counts: ClassVar[bool] = False
    streams_synthesis: ClassVar[bool] = False
    synthesis_bytes_per_cell: ClassVar[int | None] = None  # peak bytes per cell when holding the table
    requires: ClassVar[tuple[str, ...]] = ()  # optional modules it needs (dpsynth.extras)
    #: Runs under a pure epsilon-DP budget (delta 0): its plan then holds pure-epsilon charges only.
    pure_epsilon: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and not isinstance(getattr(cls, "guarantee", None), PrivacyStatement):
            raise TypeError(f"method class {cls.__name__} ({cls.name!r}) must declare "
                            "guarantee: ClassVar[PrivacyStatement]")

    def __init__(self, params: Any = None):
        self.params = self.params_type() if params is None else params


def param(default: Any, range: str, *, only: Mapping[str, Any] | None = None) -> Any:
    """A parameter field with its allowed values in words (shown by ``dpsynth methods``).

    ``only``: the parameter matters only for one variant of the method, e.g.
    ``only={"select": "aim"}``: the report leaves it out of other variants' parameters
    (:func:`unused_params`)."""
    metadata: dict[str, Any] = {"range": range}
    if only:
        metadata["only"] = dict(only)
    return dataclasses.field(default=default, metadata=metadata)


def unused_params(params_type: type, values: Mapping[str, Any]) -> list[str]:
    """The parameters of ``params_type`` that the variant chosen by ``values`` (a release's
    parameters; missing ones take their defaults) does not use: those declared with
    ``param(..., only={...})`` whose condition does not hold."""
    if not dataclasses.is_dataclass(params_type):
        return []
    fields = [f for f in dataclasses.fields(params_type) if f.init]
    current = {f.name: values.get(f.name, f.default) for f in fields}
    return [f.name for f in fields
            if any(str(current.get(k)) != str(v) for k, v in (f.metadata.get("only") or {}).items())]


# --- parameters from the command line ----------------------------------------


def convert_param(name: str, text: str, typ: Any) -> Any:
    """Text of a ``--param`` value converted to ``typ`` (raises ParamError naming it)."""
    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin is typing.Union or origin is types.UnionType:
        inner = [a for a in args if a is not type(None)]
        if text.lower() in ("none", "null", ""):
            return None
        return convert_param(name, text, inner[0])
    if origin is typing.Literal:
        if text not in args:
            raise ParamError(f"parameter {name!r} must be one of {list(args)}, got {text!r}")
        return text
    if origin in (tuple, list):
        item = args[0] if args else str
        parts = [t for t in text.replace(";", ",").split(",") if t.strip()]
        return tuple(convert_param(name, t.strip(), item) for t in parts)
    if typ is bool:
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ParamError(f"parameter {name!r} must be true or false, got {text!r}")
    if typ is int:
        try:
            return int(text)
        except ValueError:
            raise ParamError(f"parameter {name!r} must be a whole number, got {text!r}") from None
    if typ is float:
        try:
            v = float(text)
        except ValueError:
            raise ParamError(f"parameter {name!r} must be a number, got {text!r}") from None
        if not math.isfinite(v):
            raise ParamError(f"parameter {name!r} must be finite, got {text!r}")
        return v
    return text


def parse_params(cls: type, raw: Mapping[str, str]) -> Any:
    """Builds a parameter dataclass from ``key=value`` strings, converting by field type."""
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(raw) - fields)
    if unknown:
        raise ParamError(
            f"unknown parameter(s) {unknown} for this method; known: {sorted(fields) or 'none'} "
            "(`dpsynth methods` shows each with its range)"
        )
    values = {k: convert_param(k, str(v), hints[k]) if isinstance(v, str) else v for k, v in raw.items()}
    try:
        return cls(**values)
    except ParamError:
        raise
    except (ValueError, TypeError) as exc:
        raise ParamError(str(exc)) from None


def params_to_dict(params: Any) -> dict[str, Any]:
    """A parameter dataclass as JSON-ready values (tuples as lists)."""
    out = {}
    for f in dataclasses.fields(params):
        v = getattr(params, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out
