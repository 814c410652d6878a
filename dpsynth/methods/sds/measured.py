"""The measurement contract's view of the ``sds`` aggregates: one ``NoisyMarginal`` per
measured combination of columns (k = 1 .. R), each with its noise scale, threshold and
derived cells, so that the gate and the report check every measured k (docs/sds.md).
"""

from __future__ import annotations

import math

import numpy as np

from ...schema import Schema
from ..base import NoisyMarginal
from .aggregation import AggregateResult, Combo


def _finite_sd(sd: float) -> float:
    return float(sd) if math.isfinite(sd) else 0.0


def one_way_marginals(res: AggregateResult, schema: Schema) -> list[NoisyMarginal]:
    """Every column's 1-way marginal: measured whole (``one_way="public"``: every code, no
    threshold), or the reported 1-counts with the missing code derived as records - sum."""
    sd1 = _finite_sd(res.info["noise_sd"][0]) if res.info["noise_sd"] else 0.0
    # 1-counts at or below max(tau_1, 0) were suppressed (see aggregate).
    tau1 = max(0.0, res.info["thresholds"][0]) if math.isfinite(res.info["thresholds"][0]) else 0.0
    out = []
    for j, col in enumerate(schema.columns):
        if j in res.one_way:  # measured directly, every code, no threshold: a plain marginal
            out.append(NoisyMarginal(attrs=(col.name,), counts=res.one_way[j].astype(np.float64), stddev=sd1))
            continue
        t = res.levels[0].get((j,), np.zeros(col.cardinality, dtype=np.int64)).astype(np.float64)
        if col.missing_code is not None:
            t[col.missing_code] = max(0.0, res.records - float(t.sum()))
        out.append(NoisyMarginal(
            attrs=(col.name,), counts=t, stddev=sd1, threshold=tau1,
            derived=() if col.missing_code is None else (col.missing_code,)))
    return out


def _fill_deficits(combo: Combo, F: np.ndarray, full: dict[Combo, np.ndarray],
                   miss: list[int | None]) -> tuple[np.ndarray, tuple[int, ...]]:
    """``empty_cells="deficit"``: cells holding a missing code belong to no tuple; each is
    derived as its (k-1)-sub-table's count minus the measured extensions (clipped at 0)."""
    F = F.copy()
    derived = np.zeros(F.shape, dtype=bool)
    for i, j in enumerate(combo):
        mj = miss[j]
        if mj is None:
            continue
        rest = combo[:i] + combo[i + 1 :]
        idx: list[slice | int] = [slice(None)] * len(combo)
        idx[i] = mj
        known = F.sum(axis=i) - np.take(F, mj, axis=i)
        F[tuple(idx)] = np.clip(full[rest] - known, 0.0, None)
        derived[tuple(idx)] = True
    return F, tuple(int(x) for x in np.flatnonzero(derived))


def tuple_marginals(res: AggregateResult, schema: Schema, one_way: list[NoisyMarginal],
                    empty_as_value: bool) -> list[NoisyMarginal]:
    """Every measured k-tuple table (k >= 2) over the full cross-product of its columns' codes.

    Counts are the noisy counts before normalisation (normalisation is post-processing of
    the published aggregates), 0 where not above the threshold. A tuple is a candidate
    only when all its sub-tuples were reported, so the stated threshold of length k is the
    largest of tau_1 .. tau_k (and 0): a cell whose true count is far above it, measured
    in the noise of every length up to k, is a plain noisy count of sd ``noise_sd[k-1]``.
    """
    names = schema.names
    miss = list(schema.missing_codes)
    taus = [float(t) for t in res.info["thresholds"]]
    sds = res.info["noise_sd"]
    full: dict[Combo, np.ndarray] = {(schema.index(nm.attrs[0]),): nm.counts for nm in one_way}
    out = []
    for combo, raw in res.measured.items():
        k = len(combo)
        threshold = max([0.0] + [t for t in taus[:k] if math.isfinite(t)])
        counts, derived = raw.astype(np.float64), ()
        if not empty_as_value:
            counts, derived = _fill_deficits(combo, counts, full, miss)
            full[combo] = counts
        out.append(NoisyMarginal(attrs=tuple(names[j] for j in combo), counts=counts,
                                 stddev=_finite_sd(sds[k - 1]), threshold=threshold, derived=derived))
    return out


def _mutual_information(counts: np.ndarray) -> float:
    """Mutual information of a 2-way table of noisy counts (clipped at 0)."""
    joint = np.clip(np.asarray(counts, dtype=np.float64), 0.0, None)
    total = float(joint.sum())
    if total <= 0:
        return 0.0
    joint = joint / total
    outer = joint.sum(axis=1, keepdims=True) * joint.sum(axis=0, keepdims=True)
    nz = joint > 0
    return float(np.sum(joint[nz] * np.log(joint[nz] / outer[nz])))


def tree_view(measured: tuple[NoisyMarginal, ...]) -> tuple[NoisyMarginal, ...]:
    """The 1-way marginals and a maximum spanning tree of the 2-way ones (by the mutual
    information of their noisy tables): a model whose cliques are pairs, so that the
    graphical-model estimator stays tractable however many pairs were measured.
    Post-processing: it reads only the measurement."""
    ones = tuple(nm for nm in measured if len(nm.attrs) == 1)
    pairs = sorted((nm for nm in measured if len(nm.attrs) == 2), key=lambda nm: -_mutual_information(nm.counts))
    root: dict[str, str] = {}

    def find(a: str) -> str:
        while root.get(a, a) != a:
            a = root[a]
        return a

    tree = []
    for nm in pairs:
        a, b = find(nm.attrs[0]), find(nm.attrs[1])
        if a != b:
            root[a] = b
            tree.append(nm)
    return ones + tuple(tree)
