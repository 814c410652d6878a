"""The estimator as post-processing: fit a graphical model to any method's measurement.

Reads the noisy marginals of a measurement and their per-cell noise standard
deviations from the measurement contract (``measured``: NoisyMarginal with ``stddev``).
A marginal with zero noise (mechanism ``none``) is refused: the estimator weights
every measurement by its noise. Duplicate measurements of one set are merged by inverse-variance
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
        shape = np.shape(first.counts)
        acc = np.zeros(shape)
        wsum = np.zeros(shape)
        for o in group:
            perm = [o.attrs.index(a) for a in first.attrs]
            arr = np.transpose(np.asarray(o.counts, dtype=np.float64), perm)
            w = np.transpose(1.0 / o.variance(), perm)
            acc += w * arr
            wsum += w
        top = float(wsum.max())
        same = bool(np.all(wsum == top))
        out.append(Observation(attrs=first.attrs, counts=acc / wsum, stddev=float(top**-0.5),
                               weights=None if same else wsum / top))
    return out


def observations_of(m: Any) -> list[Observation]:
    """Every noisy marginal of measurement ``m`` with its noise scale."""
    found: list[Observation] = []
    for nm in m.measured:
        if not nm.stddev > 0:
            raise ValueError(f"marginal {list(nm.attrs)} has no noise (stddev 0); the estimator weights by noise")
        found.append(Observation(attrs=tuple(nm.attrs), counts=np.asarray(nm.counts, dtype=np.float64),
                                 stddev=float(nm.stddev)))
    return merge_observations(found)


def fit_measurement(
    m: Any, schema: Any, *, options: EstimatorOptions | None = None, total: float | None = None
) -> GraphicalModel:
    """A graphical model fitted to every noisy marginal of ``m`` over ``schema``'s domain."""
    obs = observations_of(m)
    if not obs:
        raise ValueError("the measurement holds no noisy marginal to fit")
    return estimate(domain_of(schema), obs, options=options, total=total)
