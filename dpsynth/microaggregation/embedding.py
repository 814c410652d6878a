"""Records as points of the unit ball, the convex set K they live in, and the way back.

Every column becomes a block of coordinates that lies in a probability simplex:

* a categorical column (and, with ``numeric="bins"``, a numeric one): one coordinate per
  code, the record's code set to 1 (one-hot);
* a numeric column with ``numeric="scaled"`` (the default): two coordinates for the
  ends of its schema bounds, holding (1 - s, s) where s in [0, 1] is the bin's midpoint
  scaled by the bounds, plus one coordinate per special code (the ``other`` bucket and
  the missing code), one-hot. A mean of such blocks keeps the mean value in its two
  end coordinates and the share of missing cells in the special ones.

The whole vector is divided by sqrt(C), C the number of columns, so every record has
Euclidean norm <= 1 and l1 norm exactly sqrt(C). K is the product of the (scaled)
simplices: convex, inside the unit ball, and its Euclidean projection is one simplex
projection per block. Rounding a point of K back to a record draws each column's code
from its block's probabilities (randomized rounding); a numeric column's regular value
is the block's mean value, put in the bin that holds it (always inside the bounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.sparse as sp

from ..rows.encoding import EncodedTable, code_dtype
from ..schema import Column, Schema

__all__ = ["Embedding", "project_simplex_rows", "split_numeric_mode"]

NumericMode = Literal["scaled", "bins"]


def split_numeric_mode(mode: str) -> tuple[NumericMode, NumericMode]:
    """(geometry, values) embeddings of a method's ``numeric`` parameter.

    "hybrid" partitions records by the scaled embedding (neighbouring values of a number
    are close) and averages them in the one-hot bins embedding (a block keeps the spread
    of its values); "scaled" and "bins" use one embedding for both.
    """
    if mode == "hybrid":
        return "scaled", "bins"
    if mode in ("scaled", "bins"):
        return mode, mode  # type: ignore[return-value]
    raise ValueError(f"parameter 'numeric' must be 'hybrid', 'scaled' or 'bins', got {mode!r}")


def project_simplex_rows(Y: np.ndarray) -> np.ndarray:
    """Euclidean projection of each row onto the probability simplex (sort-based)."""
    Y = np.asarray(Y, dtype=np.float64)
    if Y.shape[1] == 1:
        return np.ones_like(Y)
    u = -np.sort(-Y, axis=1)
    css = np.cumsum(u, axis=1) - 1.0
    ks = np.arange(1, Y.shape[1] + 1)
    cond = u - css / ks > 0
    rho = Y.shape[1] - 1 - np.argmax(cond[:, ::-1], axis=1)
    tau = css[np.arange(Y.shape[0]), rho] / (rho + 1.0)
    return np.maximum(Y - tau[:, None], 0.0)


def _scaled_midpoints(col: Column) -> np.ndarray:
    e = np.asarray(col.edges, dtype=np.float64)
    lo, hi = e[0], e[-1]
    return ((e[:-1] + e[1:]) / 2.0 - lo) / (hi - lo) if hi > lo else np.zeros(e.size - 1)


@dataclass(frozen=True)
class _Block:
    column: Column
    start: int
    width: int
    scaled: bool  # numeric column as (low end, high end, specials...)


@dataclass(frozen=True, kw_only=True)
class Embedding:
    """The layout of the embedding for one schema (public: built from the schema only)."""

    schema: Schema
    numeric: NumericMode = "scaled"

    def __post_init__(self) -> None:
        if self.numeric not in ("scaled", "bins"):
            raise ValueError(f"parameter 'numeric' must be 'scaled' or 'bins', got {self.numeric!r}")

    @property
    def blocks(self) -> tuple[_Block, ...]:
        """The coordinate block of each column, in order."""
        out, start = [], 0
        for col in self.schema.columns:
            scaled = col.type == "numeric" and self.numeric == "scaled"
            width = 2 + (col.cardinality - col.n_regular) if scaled else col.cardinality
            out.append(_Block(col, start, width, scaled))
            start += width
        return tuple(out)

    @property
    def dim(self) -> int:
        """Number of coordinates."""
        return sum(b.width for b in self.blocks)

    @property
    def scale(self) -> float:
        """Every coordinate is divided by sqrt(C): records lie in the unit ball."""
        return 1.0 / math.sqrt(len(self.schema.columns))

    @property
    def l1_radius(self) -> float:
        """max ||x||_1 over records (each block has l1 norm 1)."""
        return len(self.schema.columns) * self.scale

    def embed(self, enc: EncodedTable, dtype=np.float64) -> np.ndarray:
        """Codes to points of the unit ball (one-hot or scaled numeric blocks)."""
        X = np.zeros((enc.n, self.dim), dtype=dtype)
        rows = np.arange(enc.n)
        for j, b in enumerate(self.blocks):
            codes = enc.codes[:, j].astype(np.int64)
            if not b.scaled:
                X[rows, b.start + codes] = 1.0
                continue
            nreg = b.column.n_regular
            regular = codes < nreg
            s = _scaled_midpoints(b.column)[np.where(regular, codes, 0)]
            X[rows, b.start] = np.where(regular, 1.0 - s, 0.0)
            X[rows, b.start + 1] = np.where(regular, s, 0.0)
            special = ~regular
            X[rows[special], b.start + 2 + codes[special] - nreg] = 1.0
        X *= self.scale
        return X

    def group_sums(self, enc: EncodedTable, groups: np.ndarray, s: int) -> np.ndarray:
        """sum of the embedded records of each group (s x dim), without the dense n x dim matrix."""
        out = np.zeros((s, self.dim))
        groups = np.asarray(groups, dtype=np.int64)
        for j, b in enumerate(self.blocks):
            codes = enc.codes[:, j].astype(np.int64)
            if not b.scaled:
                out[:, b.start : b.start + b.width] = np.bincount(
                    groups * b.width + codes, minlength=s * b.width).reshape(s, b.width)
                continue
            nreg = b.column.n_regular
            regular = codes < nreg
            sv = np.where(regular, _scaled_midpoints(b.column)[np.where(regular, codes, 0)], 0.0)
            out[:, b.start] = np.bincount(groups, weights=np.where(regular, 1.0 - sv, 0.0), minlength=s)
            out[:, b.start + 1] = np.bincount(groups, weights=sv, minlength=s)
            if b.width > 2:
                spec = np.where(regular, 0, codes - nreg)
                out[:, b.start + 2 : b.start + b.width] = np.bincount(
                    groups[~regular] * (b.width - 2) + spec[~regular], minlength=s * (b.width - 2)
                ).reshape(s, b.width - 2)
        return out * self.scale

    def embed_sparse(self, enc: EncodedTable) -> sp.csr_matrix:
        """The embedding as a sparse matrix (C to 2C non-zeros a row): cheap X^T X and X V."""
        rows, cols, vals = [], [], []
        idx = np.arange(enc.n)
        for j, b in enumerate(self.blocks):
            codes = enc.codes[:, j].astype(np.int64)
            if not b.scaled:
                rows.append(idx), cols.append(b.start + codes), vals.append(np.ones(enc.n))
                continue
            nreg = b.column.n_regular
            regular = codes < nreg
            sv = _scaled_midpoints(b.column)[np.where(regular, codes, 0)]
            rows += [idx[regular], idx[regular], idx[~regular]]
            cols += [np.full(regular.sum(), b.start), np.full(regular.sum(), b.start + 1),
                     b.start + 2 + codes[~regular] - nreg]
            vals += [1.0 - sv[regular], sv[regular], np.ones((~regular).sum())]
        X = sp.csr_matrix((np.concatenate(vals) * self.scale, (np.concatenate(rows), np.concatenate(cols))),
                          shape=(enc.n, self.dim))
        X.sum_duplicates()
        return X

    def project_k(self, Y: np.ndarray) -> np.ndarray:
        """Euclidean projection of each row onto K (one simplex projection per block)."""
        Y = np.asarray(Y, dtype=np.float64) / self.scale
        out = np.empty_like(Y)
        for b in self.blocks:
            sl = slice(b.start, b.start + b.width)
            out[:, sl] = project_simplex_rows(Y[:, sl])
        return out * self.scale

    def code_probabilities(self, Y: np.ndarray, j: int) -> np.ndarray:
        """Rows of K -> distribution over column j's codes that rounding draws from."""
        b = self.blocks[j]
        P = np.clip(np.asarray(Y[:, b.start : b.start + b.width], dtype=np.float64) / self.scale, 0.0, None)
        if not b.scaled:
            out = P
        else:
            col = b.column
            out = np.zeros((P.shape[0], col.cardinality))
            reg = P[:, 0] + P[:, 1]
            s = np.where(reg > 0, P[:, 1] / np.where(reg > 0, reg, 1.0), 0.5)
            value = col.edges[0] + s * (col.edges[-1] - col.edges[0])
            code = np.clip(np.searchsorted(np.asarray(col.edges[1:-1]), value, side="right"), 0, col.n_regular - 1)
            out[np.arange(P.shape[0]), code] = reg
            out[:, col.n_regular :] = P[:, 2:]
        tot = out.sum(axis=1, keepdims=True)
        uniform = np.full_like(out, 1.0 / out.shape[1])
        return np.where(tot > 0, out / np.where(tot > 0, tot, 1.0), uniform)

    def round_records(self, Y: np.ndarray, pick: np.ndarray, rng: np.random.Generator) -> EncodedTable:
        """Randomized rounding of the rows ``Y[pick]`` of K to valid records, columns independently."""
        pick = np.asarray(pick, dtype=np.int64)
        m = pick.size
        codes = np.empty((m, len(self.schema.columns)), dtype=code_dtype(self.schema.cardinalities))
        for j in range(len(self.blocks)):
            cdf = np.cumsum(self.code_probabilities(Y, j), axis=1)
            cdf /= cdf[:, -1:]
            u = rng.random(m)
            codes[:, j] = np.minimum((u[:, None] >= cdf[pick]).sum(axis=1), cdf.shape[1] - 1)
        return EncodedTable(schema=self.schema, codes=codes)

    def implied_marginals(
        self, Y: np.ndarray, weights: np.ndarray, total: float, pairs: bool = True
    ) -> dict[tuple[str, ...], np.ndarray]:
        """Expected counts of the rounded records: total * sum_j w_j P_j (and P_j[a] x P_j[b])."""
        w = np.asarray(weights, dtype=np.float64)
        probs = [self.code_probabilities(Y, j) for j in range(len(self.blocks))]
        names = self.schema.names
        out: dict[tuple[str, ...], np.ndarray] = {}
        for j, P in enumerate(probs):
            out[(names[j],)] = total * (w @ P)
        if pairs:
            for a in range(len(probs)):
                Wa = probs[a] * w[:, None]
                for b in range(a + 1, len(probs)):
                    out[(names[a], names[b])] = total * (Wa.T @ probs[b])
        return out
