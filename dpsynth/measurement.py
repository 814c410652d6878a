"""The measurement contract: what a method's DP step publishes, typed.

Every method returns a :class:`Measurement`. The gate, the report, the row estimate,
``verify`` and marginal correction read only its typed fields:

* ``measured``: noisy marginals, each a :class:`NoisyMarginal` carrying its own
  per-cell noise standard deviation and mechanism, and, when it was measured on merged
  values of some columns, the public map of each such column's codes to its cells
  (``groups``; compare a table with it through :meth:`NoisyMarginal.fold`);
* ``records``: the record count with its noise (:class:`NoisyCount`), when the method
  measured one;
* ``statement``: the guarantee the release really has (:class:`PrivacyStatement`);
* ``charges``: what the measurement cost on the ledger.

``tables`` (other publishable tables, e.g. sparse tuple counts or block means) and
``meta`` (free-form public detail a method keeps for its own synthesis) are carried
and published but never interpreted outside the method.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Mapping, TYPE_CHECKING

import numpy as np

from .privacy.budget import Charge, total_epsilon

if TYPE_CHECKING:  # imported where used, so a release from codes loads neither pandas nor pyarrow
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = [
    "DP_ADD_REMOVE",
    "MEASUREMENT_FILE",
    "MEASUREMENT_META",
    "measured_attrs",
    "Measurement",
    "NoisyCount",
    "NoisyMarginal",
    "PrivacyStatement",
    "fold_table",
    "marginal_key",
]

MEASUREMENT_FILE = "measurement.parquet"
MEASUREMENT_META = "measurement.json"

StatementKind = Literal["dp", "anonymous", "heuristic"]
_MECHANISMS = ("gaussian", "laplace", "none")


def marginal_key(attrs: tuple[str, ...]) -> str:
    """The text key of a marginal in ``measurement.parquet`` (column names joined by ``|``)."""
    return "|".join(attrs)


def fold_table(table: np.ndarray, maps: "list[np.ndarray | None] | tuple[np.ndarray | None, ...]") -> np.ndarray:
    """Sums a count table over columns' codes into merged cells: along axis i, code c goes to
    cell ``maps[i][c]`` (None: the axis is kept as it is). A linear map: noise that was
    independent per cell stays independent per merged cell (variances add)."""
    out = np.asarray(table, dtype=np.float64)
    for axis, g in enumerate(maps):
        if g is None:
            continue
        g = np.asarray(g, dtype=np.int64)
        if out.shape[axis] != g.size:
            raise ValueError(f"axis {axis} has {out.shape[axis]} codes, the map {g.size}")
        onehot = np.zeros((g.size, int(g.max()) + 1))
        onehot[np.arange(g.size), g] = 1.0
        out = np.moveaxis(np.tensordot(out, onehot, axes=([axis], [0])), -1, axis)
    return out


def _check_groups(attrs: tuple[str, ...], shape: tuple[int, ...], groups: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for a, g in groups.items():
        if a not in attrs:
            raise ValueError(f"marginal {attrs}: groups name column {a!r}, which it does not hold")
        g = tuple(int(x) for x in g)
        cells = set(g)
        if not g or cells != set(range(max(g) + 1)):
            raise ValueError(f"marginal {attrs}: the groups of {a!r} must map codes onto cells 0..k-1, every cell used")
        if len(shape) == len(attrs) and shape[attrs.index(a)] != max(g) + 1:
            raise ValueError(f"marginal {attrs}: {a!r} has {shape[attrs.index(a)]} cells but its groups {max(g) + 1}")
        out[str(a)] = g
    return out


@dataclass(frozen=True, kw_only=True)
class PrivacyStatement:
    """The guarantee a release has.

    ``kind``: ``"dp"`` (differentially private under ``neighbours``), ``"anonymous"``
    (a syntactic anonymity guarantee such as k-anonymity, not DP) or ``"heuristic"``
    (run outside the conditions of its theorem: not DP). ``detail`` is a public
    sentence that qualifies it (it must never depend on private data).
    """

    kind: StatementKind
    neighbours: str = ""
    detail: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("dp", "anonymous", "heuristic"):
            raise ValueError(f"privacy statement kind must be dp, anonymous or heuristic, got {self.kind!r}")
        if self.kind == "dp" and not self.neighbours:
            raise ValueError("a DP statement must name its neighbour relation")

    @property
    def differentially_private(self) -> bool:
        """True only for a ``dp`` statement."""
        return self.kind == "dp"

    def headline(self, pure: bool = False) -> str:
        """One line for a report header or the CLI's final line; ``pure``: every charge was a
        pure-epsilon cost, so the guarantee is pure epsilon-DP with delta 0."""
        if self.kind == "dp":
            kind = "pure epsilon-DP, delta 0; " if pure else ""
            return f"Differentially private ({kind}neighbouring tables: {self.neighbours})"
        if self.kind == "anonymous":
            return "NOT differentially private: anonymised release" + (f" ({self.detail})" if self.detail else "")
        return "NOT differentially private: heuristic run" + (f" ({self.detail})" if self.detail else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON form (manifest and ``measurement.json``)."""
        return {"kind": self.kind, "neighbours": self.neighbours, "detail": self.detail,
                "differentially_private": self.differentially_private}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PrivacyStatement":
        """Inverse of :meth:`to_dict`."""
        return cls(kind=d["kind"], neighbours=str(d.get("neighbours", "")), detail=str(d.get("detail", "")))


DP_ADD_REMOVE = PrivacyStatement(kind="dp", neighbours="add or remove one record")


def _check_scale(what: str, stddev: float, mechanism: str) -> float:
    if mechanism not in _MECHANISMS:
        raise ValueError(f"{what}: mechanism must be one of {_MECHANISMS}, got {mechanism!r}")
    v = float(stddev)
    if not (math.isfinite(v) and v >= 0.0):
        raise ValueError(f"{what}: stddev must be a finite number >= 0, got {stddev!r}")
    if mechanism == "none" and v != 0.0:
        raise ValueError(f"{what}: an exact (mechanism 'none') value has stddev 0, got {v}")
    return v


@dataclass(frozen=True, kw_only=True, eq=False)
class NoisyMarginal:
    """Noisy counts of one marginal over the full cross-product of its columns' codes
    (C order), each cell with independent noise of standard deviation ``stddev``.

    What ``stddev`` promises, cell by cell (docs/measurement.md):

    * a plain marginal (``threshold`` None, no ``derived`` cells): every cell is the true
      count plus independent noise of ``mechanism`` with that standard deviation;
    * ``threshold``: cells whose noisy value was not above it were published as 0
      (suppressed); a cell whose true count lies far above the threshold is a plain
      noisy count, a published 0 says only "below the threshold";
    * ``derived``: flat indices of cells computed from other published values (for
      example a missing code holding the record count minus the other cells); they
      carry no noise statement of their own.

    ``groups`` (empty: none): for a column whose values were merged before this marginal
    was measured (``pgm``'s compression of rare values), the map code -> cell along that
    column's axis; the axis then has one cell per group, each the true count of its codes
    plus noise of ``stddev`` (a sum over a partition of codes: sensitivity unchanged).
    Compare a table over the columns' codes with :meth:`fold`.
    """

    attrs: tuple[str, ...]
    counts: np.ndarray
    stddev: float
    mechanism: str = "gaussian"
    threshold: float | None = None
    derived: tuple[int, ...] = ()
    groups: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.attrs or len(set(self.attrs)) != len(self.attrs):
            raise ValueError(f"a marginal needs distinct column names, got {self.attrs!r}")
        object.__setattr__(self, "attrs", tuple(str(a) for a in self.attrs))
        object.__setattr__(self, "counts", np.asarray(self.counts, dtype=np.float64))
        object.__setattr__(self, "stddev", _check_scale(f"marginal {self.attrs}", self.stddev, self.mechanism))
        if self.threshold is not None:
            if not math.isfinite(float(self.threshold)):
                raise ValueError(f"marginal {self.attrs}: threshold must be finite, got {self.threshold!r}")
            object.__setattr__(self, "threshold", float(self.threshold))
        derived = tuple(sorted({int(i) for i in self.derived}))
        if derived and not (0 <= derived[0] and derived[-1] < self.counts.size):
            raise ValueError(f"marginal {self.attrs}: derived cells outside 0..{self.counts.size - 1}")
        object.__setattr__(self, "derived", derived)
        object.__setattr__(self, "groups", _check_groups(self.attrs, self.counts.shape, self.groups or {}))

    def maps(self) -> list[np.ndarray | None]:
        """Per axis, the code -> cell map (None: the axis is over the column's codes)."""
        return [np.asarray(self.groups[a], dtype=np.int64) if a in self.groups else None for a in self.attrs]

    def fold(self, table: np.ndarray) -> np.ndarray:
        """A table over the columns' codes (axes in ``attrs`` order) summed into this
        marginal's cells; the table itself when no column was merged."""
        return fold_table(table, self.maps()) if self.groups else np.asarray(table, dtype=np.float64)

    @property
    def key(self) -> str:
        """The marginal's key in ``measurement.parquet`` (see :func:`marginal_key`)."""
        return marginal_key(self.attrs)

    @property
    def plain(self) -> bool:
        """True when every cell is a plain noisy count (no threshold, no derived cell)."""
        return self.threshold is None and not self.derived

    def to_dict(self) -> dict[str, Any]:
        """The noise statement as stored in ``measurement.json`` (defaults left out)."""
        out: dict[str, Any] = {"attrs": list(self.attrs), "key": self.key, "shape": list(self.counts.shape),
                               "stddev": self.stddev, "mechanism": self.mechanism}
        if self.threshold is not None:
            out["threshold"] = self.threshold
        if self.derived:
            out["derived"] = list(self.derived)
        if self.groups:
            out["groups"] = {a: list(g) for a, g in self.groups.items()}
        return out


@dataclass(frozen=True, kw_only=True)
class NoisyCount:
    """A noisy record count with its noise standard deviation."""

    value: float
    stddev: float
    mechanism: str = "laplace"

    def __post_init__(self) -> None:
        if not math.isfinite(float(self.value)):
            raise ValueError(f"record count must be finite, got {self.value!r}")
        object.__setattr__(self, "value", float(self.value))
        object.__setattr__(self, "stddev", _check_scale("record count", self.stddev, self.mechanism))

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``measurement.json``)."""
        return {"value": self.value, "stddev": self.stddev, "mechanism": self.mechanism}


@dataclass(frozen=True, kw_only=True, eq=False)
class Measurement:
    """The DP output of a measure step: everything synthesis may look at."""

    method: str
    params: Mapping[str, Any]
    charges: tuple[Charge, ...]
    measured: tuple[NoisyMarginal, ...] = ()
    records: NoisyCount | None = None
    statement: PrivacyStatement = DP_ADD_REMOVE
    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "measured", tuple(self.measured))
        keys = [m.key for m in self.measured]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise ValueError(f"marginals measured twice (or with ambiguous names): {dupes}")

    @cached_property
    def marginals(self) -> Mapping[tuple[str, ...], np.ndarray]:
        """Read-only view: column names -> noisy counts."""
        return {m.attrs: m.counts for m in self.measured}

    @cached_property
    def _by_attrs(self) -> dict[tuple[str, ...], NoisyMarginal]:
        return {m.attrs: m for m in self.measured}

    @cached_property
    def groups(self) -> Mapping[tuple[str, ...], Mapping[str, tuple[int, ...]]]:
        """Column names -> the code -> cell maps of its merged columns, for every marginal
        measured on merged values (the others are over the full cross-product of codes)."""
        return {m.attrs: m.groups for m in self.measured if m.groups}

    def marginal(self, attrs: tuple[str, ...]) -> NoisyMarginal:
        """The measured marginal over ``attrs`` (KeyError when it was not measured)."""
        return self._by_attrs[tuple(attrs)]

    def stddev(self, attrs: tuple[str, ...]) -> float:
        """Per-cell noise standard deviation of the measured marginal ``attrs``."""
        return self._by_attrs[tuple(attrs)].stddev

    def estimated_records(self) -> int | None:
        """The record count as the measurement estimates it (post-processing).

        The measured count when there is one; otherwise the inverse-variance mean of the
        1-way marginals' totals (a total of ``d`` cells has variance ``d * stddev^2``),
        rounded, at least 1. None when neither was measured.
        """
        if self.records is not None:
            return max(1, int(round(self.records.value)))
        one_way = [m for m in self.measured if len(m.attrs) == 1]
        if not one_way:
            return None
        totals = np.array([float(np.nansum(m.counts)) for m in one_way])
        var = np.array([m.counts.size * m.stddev**2 for m in one_way])
        if np.all(var > 0):
            w = 1.0 / var
        else:
            w = 1.0 / np.array([m.counts.size for m in one_way], dtype=np.float64)
        return max(1, int(round(float(np.dot(totals, w) / w.sum()))))

    @property
    def rho(self) -> float:
        """The zCDP part of the charges (pure-epsilon parts are in :meth:`total_epsilon`)."""
        return sum(c.rho for c in self.charges)

    def total_epsilon(self, delta: float) -> float:
        """(epsilon, delta) cost of every charge: pure parts add, the zCDP part converts."""
        return total_epsilon(self.charges, delta)

    # --- serialisation: Parquet for numbers, JSON for the rest -----------------
    def save(self, folder: str | Path) -> list[Path]:
        """Writes ``measurement.parquet`` (long form), ``measurement.json`` and one Parquet per table."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        sizes = [m.counts.size for m in self.measured]
        keys = pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)),
            pa.array([m.key for m in self.measured], type=pa.string()))
        table = pa.table(
            {
                "marginal": keys.cast(pa.string()),
                "cell": pa.array(np.concatenate([np.arange(n, dtype=np.int64) for n in sizes]) if sizes else [],
                                 type=pa.int64()),
                "count": pa.array(np.concatenate([m.counts.ravel() for m in self.measured]) if sizes else [],
                                  type=pa.float64()),
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
            "measured": [m.to_dict() for m in self.measured],
            "records": self.records.to_dict() if self.records is not None else None,
            "statement": self.statement.to_dict(),
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
        """Reads back what :meth:`save` wrote."""
        import pyarrow.parquet as pq
        folder = Path(folder)
        meta = json.loads((folder / MEASUREMENT_META).read_text())
        flat = _read_counts(folder / MEASUREMENT_FILE, meta["measured"])
        measured = [
            NoisyMarginal(
                attrs=tuple(entry["attrs"]),
                counts=counts.reshape(entry["shape"]),
                stddev=float(entry["stddev"]),
                mechanism=str(entry["mechanism"]),
                threshold=entry.get("threshold"),
                derived=tuple(entry.get("derived", ())),
                groups=entry.get("groups") or {},
            )
            for entry, counts in zip(meta["measured"], flat)
        ]
        rec = meta.get("records")
        tables = {
            name: pq.read_table(str(folder / f"measurement-{name}.parquet")).to_pandas()
            for name in meta["tables"]
        }
        return cls(
            method=meta["method"],
            params=meta["params"],
            charges=tuple(Charge.from_dict(c) for c in meta["charges"]),
            measured=tuple(measured),
            records=NoisyCount(**rec) if rec else None,
            statement=PrivacyStatement.from_dict(meta["statement"]),
            tables=tables,
            meta=meta["meta"],
        )


def measured_attrs(folder: str | Path) -> list[tuple[str, ...]]:
    """The column names of every marginal a saved measurement holds, in its order, read from its
    metadata alone (no count, no table): what a scan of the synthetic rows needs to know."""
    meta = json.loads((Path(folder) / MEASUREMENT_META).read_text())
    return [tuple(entry["attrs"]) for entry in meta["measured"]]


def _read_counts(path: Path, entries: list[Mapping[str, Any]]) -> list[np.ndarray]:
    """Every stated marginal's flat counts from ``measurement.parquet``, in ``entries`` order.

    :meth:`Measurement.save` writes the marginals one after the other in that order, cells
    ascending: checked in one vectorised pass and sliced (a thousand marginals in
    milliseconds). A file in any other row order is read by key and cell instead.
    """
    import pyarrow.parquet as pq
    table = pq.read_table(str(path), read_dictionary=["marginal"])
    sizes = [int(np.prod(e["shape"], dtype=np.int64)) for e in entries]
    counts = table.column("count").to_numpy()
    cells = table.column("cell").to_numpy()
    if len(counts) == sum(sizes):
        marginal = table.column("marginal").combine_chunks()
        order = {str(k): i for i, k in enumerate(marginal.dictionary.to_pylist())}
        ids = np.array([order.get(e["key"], -1) for e in entries], dtype=np.int64)
        codes = marginal.indices.to_numpy(zero_copy_only=False)
        expect_ids = np.repeat(ids, sizes)
        expect_cells = np.concatenate([np.arange(n, dtype=np.int64) for n in sizes]) if sizes else cells
        if np.array_equal(codes, expect_ids) and np.array_equal(cells, expect_cells):
            return np.split(counts.astype(np.float64), np.cumsum(sizes)[:-1]) if sizes else []
    frame = table.to_pandas()
    groups = {str(k): g for k, g in frame.groupby("marginal", sort=False, observed=True)}
    return [groups[e["key"]].sort_values("cell")["count"].to_numpy(dtype=np.float64) for e in entries]
