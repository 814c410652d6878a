"""What the two microaggregation methods share: the published block table and synthesis.

A block table has one row per block: ``weight`` (a count, exact or noisy) and one
column per embedding coordinate, named ``column=label`` for one-hot coordinates and
``column:low`` / ``column:high`` / ``column=label`` for a scaled numeric column. Values
are shares in [0, 1] (the embedding's sqrt(C) scale removed), so a reader sees each
block as per-column distributions.

Synthesis (post-processing only): weights projected onto the simplex, means projected
onto K, ``rows`` blocks drawn with those weights (bootstrap), each rounded to a record.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..rows.encoding import EncodedTable
from ..measurement import NoisyMarginal
from ..microaggregation import Embedding, bootstrap, project_weights, split_numeric_mode
from ..schema import Schema
from .base import ParamError

__all__ = ["coordinate_names", "blocks_frame", "blocks_from_frame", "implied_measured", "block_distribution", "embeddings", "check_numeric",
           "synthesize_blocks"]

BLOCKS = "blocks"
# Multiply-adds allowed for the implied 2-way marginals (blocks x pairs of cells); above it
# only the 1-way marginals are stated (about 10 s on this machine's BLAS at the limit).
PAIR_COST_LIMIT = 3e8


def coordinate_names(emb: Embedding) -> list[str]:
    """Column names of the embedding's coordinates, as the published blocks table names them."""
    names = []
    for b in emb.blocks:
        labels = b.column.labels()
        if b.scaled:
            names += [f"{b.column.name}:low", f"{b.column.name}:high"]
            names += [f"{b.column.name}={lab}" for lab in labels[b.column.n_regular :]]
        else:
            names += [f"{b.column.name}={lab}" for lab in labels]
    return names


def blocks_frame(emb: Embedding, weights: np.ndarray, means: np.ndarray) -> pd.DataFrame:
    """The publishable table: weights and the block means as shares (unscaled)."""
    data: dict[str, Any] = {"weight": np.asarray(weights, dtype=np.float64)}
    shares = np.asarray(means, dtype=np.float64) / emb.scale
    for j, name in enumerate(coordinate_names(emb)):
        data[name] = shares[:, j]
    return pd.DataFrame(data)


def blocks_from_frame(emb: Embedding, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Block weights and means (in embedding units) from a published blocks table."""
    names = coordinate_names(emb)
    return df["weight"].to_numpy(dtype=np.float64), df[names].to_numpy(dtype=np.float64) * emb.scale


def implied_measured(
    emb: Embedding, Y: np.ndarray, w: np.ndarray, total: float, stddev: tuple[float, float], mechanism: str,
    pairs: bool,
) -> tuple[NoisyMarginal, ...]:
    """1-way (and 2-way, when they cost at most PAIR_COST_LIMIT) marginals the blocks imply:
    the expected counts of the synthetic records, with the stated per-cell stddev."""
    out = []
    cards = np.asarray(emb.schema.cardinalities, dtype=np.float64)
    pair_cost = float(np.count_nonzero(w)) * (cards.sum() ** 2 - (cards**2).sum()) / 2
    pairs = pairs and pair_cost <= PAIR_COST_LIMIT
    keep = w > 0  # blocks without weight add nothing
    exact = mechanism == "none" and not any(b.scaled for b in emb.blocks)
    for attrs, counts in emb.implied_marginals(Y[keep], w[keep], total, pairs=pairs).items():
        if exact and len(attrs) == 1:  # exact block means of one-hot columns: the data's own counts
            out.append(NoisyMarginal(attrs=attrs, counts=np.round(counts), stddev=0.0, mechanism="none"))
            continue
        # everything else is computed from the published blocks: derived, not a plain noisy count
        out.append(NoisyMarginal(attrs=attrs, counts=counts, stddev=stddev[len(attrs) - 1], mechanism=mechanism,
                                 derived=tuple(range(counts.size))))
    return tuple(out)


def block_distribution(emb: Embedding, df: pd.DataFrame, total: float) -> tuple[np.ndarray, np.ndarray]:
    """Weights on the simplex (l1 projection of count / total) and means projected onto K."""
    counts, means = blocks_from_frame(emb, df)
    return project_weights(counts / max(float(total), 1.0)), emb.project_k(means)


def embeddings(schema: Schema, numeric: str) -> tuple[Embedding, Embedding]:
    """The (geometry, values) embeddings for a method's ``numeric`` parameter."""
    geo, val = split_numeric_mode(numeric)
    return Embedding(schema=schema, numeric=geo), Embedding(schema=schema, numeric=val)


def check_numeric(numeric: str) -> None:
    """Refuses an unknown ``numeric`` mode with a parameter error."""
    try:
        split_numeric_mode(numeric)
    except ValueError as exc:
        raise ParamError(str(exc)) from None


def synthesize_blocks(
    schema: Schema, numeric: str, df: pd.DataFrame, total: float, rows: int, rng: np.random.Generator
) -> EncodedTable:
    """Synthetic records from a blocks table: bootstrap blocks by weight, round each mean."""
    emb = Embedding(schema=schema, numeric=split_numeric_mode(numeric)[1])
    w, Y = block_distribution(emb, df, total)
    return emb.round_records(Y, bootstrap(w, rows, rng), rng)
