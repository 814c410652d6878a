"""Integer codes of a table (:class:`EncodedTable`), their dtype and their check: what work on
codes alone needs of the row modules.

Everything on the path from codes to a release (the methods, the counting engine, the model
fit) imports these names from here, not from :mod:`.encoding`, which reads, encodes and decodes
rows and re-exports them (``from dpsynth.rows.encoding import EncodedTable`` keeps working): a
process that starts from codes then never compiles nor holds the row readers (docs/pgm.md,
"Where our peak memory goes", session 39).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, TYPE_CHECKING

import numpy as np

from ..schema import Schema

if TYPE_CHECKING:  # imported where used, so a release from codes loads no pyarrow
    import pyarrow as pa

__all__ = ["DataError", "EncodedTable", "code_dtype", "validate_codes"]


class DataError(ValueError):
    """A public problem with the input table (never quotes a row)."""


@dataclass(frozen=True)
class EncodedTable:
    """Integer codes of a table: ``codes[i, j]`` is row i's code in column j."""

    schema: Schema
    codes: np.ndarray

    def __post_init__(self) -> None:
        if self.codes.ndim != 2 or self.codes.shape[1] != len(self.schema.columns):
            raise ValueError(
                f"codes must have shape (rows, {len(self.schema.columns)}), got {self.codes.shape}"
            )

    @property
    def n(self) -> int:
        """Number of rows."""
        return int(self.codes.shape[0])

    @property
    def cardinalities(self) -> tuple[int, ...]:
        """Codes per column (the schema's)."""
        return self.schema.cardinalities

    def column(self, name: str) -> np.ndarray:
        """The codes of one column, by name."""
        return self.codes[:, self.schema.index(name)]

    def to_arrow(self) -> pa.Table:
        """The codes as an Arrow table, one column per schema column."""
        import pyarrow as pa
        return pa.table({c.name: pa.array(self.codes[:, j]) for j, c in enumerate(self.schema.columns)})

    def to_parquet(self, path: str | Path) -> None:
        """Writes the codes as a zstd-compressed Parquet file."""
        import pyarrow.parquet as pq
        pq.write_table(self.to_arrow(), str(path), compression="zstd")

    @classmethod
    def from_parquet(cls, path: str | Path, schema: Schema) -> "EncodedTable":
        """Reads codes written by :meth:`to_parquet`; refuses a file lacking a schema column."""
        import pyarrow.parquet as pq
        table = pq.read_table(str(path))
        missing = [c for c in schema.names if c not in table.column_names]
        if missing:
            raise DataError(f"{path}: encoded table lacks columns {missing}")
        dtype = code_dtype(schema.cardinalities)
        codes = np.empty((table.num_rows, len(schema.columns)), dtype=dtype)
        for j, name in enumerate(schema.names):
            codes[:, j] = table.column(name).to_numpy()
        validate_codes(codes, schema)
        return cls(schema=schema, codes=codes)


def code_dtype(cardinalities: Sequence[int]) -> np.dtype:
    """Smallest dtype holding codes ``0..card-1`` of every column (uint8, uint16, else int32)."""
    top = max(cardinalities, default=1)
    if top <= 2**8:
        return np.dtype(np.uint8)
    if top <= 2**16:
        return np.dtype(np.uint16)
    return np.dtype(np.int32)


def validate_codes(codes: np.ndarray, schema: Schema) -> None:
    """Raises if any code lies outside its column's domain (a bug, never a row oddity)."""
    card = np.asarray(schema.cardinalities)
    if codes.size and (codes.min() < 0 or np.any(codes.max(axis=0) >= card)):
        bad = [schema.names[j] for j in np.flatnonzero(codes.max(axis=0) >= card)]
        raise ValueError(f"codes outside the schema domain in columns {bad}")
