"""The interface every synthesis method implements, and the measurement it produces.

A method is built from frozen, keyword-only parameters and does three things:

* ``plan(schema, budget)``: every stage's share of the budget, computed from public
  information only, before any row is read (the ledger refuses a plan over budget);
  it also raises for a domain the method cannot handle;
* ``measure(codes, ledger, rng)``: the DP boundary, the only call that reads private
  rows; it spends the planned shares and returns a :class:`Measurement`;
* ``synthesize(measurement, schema, rows, rng)``: post-processing of the measurement
  alone, returning synthetic codes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping, Protocol, runtime_checkable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..encoding import EncodedTable
from ..privacy.budget import Budget, Charge, Ledger
from ..schema import Schema

__all__ = ["Method", "Measurement", "ParamError", "convert_param", "parse_params", "params_to_dict"]

MEASUREMENT_FILE = "measurement.parquet"
MEASUREMENT_META = "measurement.json"


class ParamError(ValueError):
    """A method parameter that is unknown or out of range (names the parameter)."""


def _key(attrs: tuple[str, ...]) -> str:
    return "|".join(attrs)


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """The DP output of a measure step: everything synthesis may look at.

    ``marginals`` maps a tuple of column names to noisy counts over the full
    cross-product of those columns' codes (C order). ``tables`` holds other
    publishable DP tables (for example sparse tuple counts). ``meta`` is public,
    JSON-serialisable information (noise scales, estimates). ``charges`` is what the
    measurement cost.
    """

    method: str
    params: Mapping[str, Any]
    charges: tuple[Charge, ...]
    marginals: Mapping[tuple[str, ...], np.ndarray] = field(default_factory=dict)
    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def rho(self) -> float:
        return sum(c.rho for c in self.charges)

    # --- serialisation: Parquet for numbers, JSON for the rest -----------------
    def save(self, folder: str | Path) -> list[Path]:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        keys, cells, counts = [], [], []
        shapes = {}
        for attrs, arr in self.marginals.items():
            flat = np.asarray(arr, dtype=np.float64).ravel()
            keys.append(np.full(flat.size, _key(attrs), dtype=object))
            cells.append(np.arange(flat.size, dtype=np.int64))
            counts.append(flat)
            shapes[_key(attrs)] = list(np.shape(arr))
        table = pa.table(
            {
                "marginal": pa.array(np.concatenate(keys) if keys else [], type=pa.string()),
                "cell": pa.array(np.concatenate(cells) if cells else [], type=pa.int64()),
                "count": pa.array(np.concatenate(counts) if counts else [], type=pa.float64()),
            }
        )
        written = [folder / MEASUREMENT_FILE]
        pq.write_table(table, str(written[0]), compression="zstd")
        for name, df in self.tables.items():
            path = folder / f"measurement-{name}.parquet"
            pq.write_table(pa.Table.from_pandas(df, preserve_index=False), str(path), compression="zstd")
            written.append(path)
        meta = {
            "method": self.method,
            "params": dict(self.params),
            "marginals": shapes,
            "tables": sorted(self.tables),
            "charges": [c.to_dict() for c in self.charges],
            "rho": self.rho,
            "meta": dict(self.meta),
        }
        (folder / MEASUREMENT_META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        written.append(folder / MEASUREMENT_META)
        return written

    @classmethod
    def load(cls, folder: str | Path) -> "Measurement":
        folder = Path(folder)
        meta = json.loads((folder / MEASUREMENT_META).read_text())
        table = pq.read_table(str(folder / MEASUREMENT_FILE)).to_pandas()
        marginals: dict[tuple[str, ...], np.ndarray] = {}
        groups = {k: g for k, g in table.groupby("marginal", sort=False)} if len(table) else {}
        for key, shape in meta["marginals"].items():
            g = groups[key].sort_values("cell")
            marginals[tuple(key.split("|"))] = g["count"].to_numpy(dtype=np.float64).reshape(shape)
        tables = {
            name: pq.read_table(str(folder / f"measurement-{name}.parquet")).to_pandas()
            for name in meta["tables"]
        }
        return cls(
            method=meta["method"],
            params=meta["params"],
            charges=tuple(Charge.from_dict(c) for c in meta["charges"]),
            marginals=marginals,
            tables=tables,
            meta=meta["meta"],
        )


@runtime_checkable
class Method(Protocol):
    name: ClassVar[str]
    params: Any

    def plan(self, schema: Schema, budget: Budget) -> tuple[Charge, ...]: ...

    def measure(self, codes: EncodedTable, ledger: Ledger, rng: np.random.Generator) -> Measurement: ...

    def synthesize(
        self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator
    ) -> EncodedTable: ...


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
            f"unknown parameter(s) {unknown} for this method; known: {sorted(fields) or 'none'}"
        )
    values = {k: convert_param(k, str(v), hints[k]) if isinstance(v, str) else v for k, v in raw.items()}
    try:
        return cls(**values)
    except ParamError:
        raise
    except (ValueError, TypeError) as exc:
        raise ParamError(str(exc)) from None


def params_to_dict(params: Any) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(params):
        v = getattr(params, f.name)
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out
