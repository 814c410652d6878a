"""The estimator as post-processing: fit a graphical model to any method's measurement.

Reads the noisy marginals of a measurement and their per-cell noise standard
deviations, from the typed contract (``measured``: NoisyMarginal with ``stddev``) when
present, else from ``marginals`` with the scales in ``meta`` (``stddev`` keyed by
``"a|b"``, or the ``marginals`` method's ``sigma`` keyed by column). Marginals without
a stated noise scale, or with zero noise, are refused: the estimator weights every
measurement by its noise. Duplicate measurements of one set are merged by inverse-variance
weighting (their exact sufficient statistic). Post-processing only: it never reads rows.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .estimate import EstimatorOptions, Observation, estimate
from .junction_tree import Domain
from .model import GraphicalModel

__all__ = ["domain_of", "merge_observations", "observations_of", "fit_measurement"]


def domain_of(schema: Any) -> Domain:
    """The public domain of a schema: its columns and cardinalities."""
    return Domain(names=tuple(c.name for c in schema.columns), sizes=tuple(int(c.cardinality) for c in schema.columns))


def _scale_from_meta(meta: Any, attrs: tuple[str, ...]) -> float | None:
    for key in ("stddev", "sigma"):
        table = meta.get(key) if hasattr(meta, "get") else None
        if isinstance(table, dict):
            for k in ("|".join(attrs), attrs[0] if len(attrs) == 1 else None):
                if k is not None and k in table:
                    return float(table[k])
    return None


def merge_observations(observations: Sequence[Observation]) -> list[Observation]:
    """One observation per column set: repeats combined by inverse-variance weights."""
    groups: dict[frozenset[str], list[Observation]] = {}
    for o in observations:
        groups.setdefault(frozenset(o.attrs), []).append(o)
    out = []
    for group in groups.values():
        first = group[0]
        if len(group) == 1:
            out.append(first)
            continue
        acc = np.zeros(first.counts.shape)
        wsum = 0.0
        for o in group:
            arr = np.transpose(np.asarray(o.counts, dtype=np.float64), [o.attrs.index(a) for a in first.attrs])
            w = 1.0 / o.stddev**2
            acc += w * arr
            wsum += w
        out.append(Observation(attrs=first.attrs, counts=acc / wsum, stddev=float(wsum**-0.5)))
    return out


def observations_of(m: Any) -> list[Observation]:
    """Every noisy marginal of measurement ``m`` with its noise scale."""
    found: list[Observation] = []
    measured = getattr(m, "measured", None)
    if measured:
        for nm in measured:
            found.append(Observation(attrs=tuple(nm.attrs), counts=np.asarray(nm.counts, dtype=np.float64),
                                     stddev=float(nm.stddev)))
        return merge_observations(found)
    for attrs, counts in m.marginals.items():
        attrs = tuple(attrs)
        sd = _scale_from_meta(m.meta, attrs)
        if sd is None or not sd > 0:
            raise ValueError(f"marginal {list(attrs)} has no positive noise scale; the estimator needs one")
        found.append(Observation(attrs=attrs, counts=np.asarray(counts, dtype=np.float64), stddev=sd))
    return merge_observations(found)


def fit_measurement(
    m: Any, schema: Any, *, options: EstimatorOptions | None = None, total: float | None = None
) -> GraphicalModel:
    """A graphical model fitted to every noisy marginal of ``m`` over ``schema``'s domain."""
    obs = observations_of(m)
    if not obs:
        raise ValueError("the measurement holds no noisy marginal to fit")
    return estimate(domain_of(schema), obs, options=options, total=total)
