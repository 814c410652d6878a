"""The complete sampler of ``sds`` (default): records completed from the aggregates.

A degree R-1 Bayesian network learnt from the DP aggregates, whose tables are made
consistent top-down (proportional fitting, shrinkage towards shorter tuples), sampled
and finally raked to the published 1-way marginals. Post-processing only; see docs/sds.md.
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Sequence

import numpy as np

from ...postprocess.fitting import AxisMargin, proportional_fit
from ...postprocess.histograms import project_to_total
from ...schema import Schema
from ..base import Measurement
from .aggregation import Combo, _shape
from .params import SdsParams
from .strict import _draw

#: Column orders (each with its own first column) mixed by the complete sampler.
_COMPLETE_ORDERS = 4
#: Parent sets of a column are drawn from its this many best single parents (by MI).
_PARENT_POOL = 4
#: ... plus this many pairs of placed columns whose measured 3-way table with the column
#: holds the most information beyond its two 2-way tables (parity-like interactions),
#: chosen among the _JOINT_SHORTLIST pairs with the most on the raw noisy counts.
_JOINT_PAIRS = 2
_JOINT_SHORTLIST = 4
#: Pseudo-count of a slice, in units of its noise level (sd_k * sqrt(values)).
_SHRINK = 4.0
#: Rounds of proportional fitting of each family table to its shorter sub-tables.
_IPF_ROUNDS = 5
#: Rounds per order when ``use_synthetic_counts`` steers the complete sampler.
_COMPLETE_ROUNDS = 8


def pooled_total(count: float, count_sd: float, tables: Sequence[np.ndarray], sd1: float
                 ) -> tuple[float, float, float]:
    """The record count as the inverse-variance mean of a DP ``count`` (sd ``count_sd``)
    and of every table's total (each a sum of its cells, each of noise sd ``sd1``);
    returns (estimate, its sd, the weight share of the tables). Post-processing only.

    At small n the DP record count is the noisiest figure of an ``sds`` release (epsilon_N
    is 0.5% of epsilon: sd 283 records at epsilon 1), while each 1-way table's total has
    sd ``sd1 * sqrt(cells)`` (about 30 records on a 300-row table at epsilon 1).
    """
    est, wts = [float(count)], [1.0 / count_sd**2 if count_sd > 0 else 0.0]
    if sd1 > 0 and count_sd > 0:
        for t in tables:
            est.append(float(np.sum(t)))
            wts.append(1.0 / (np.size(t) * sd1**2))
    w = np.asarray(wts)
    if w.sum() <= 0:
        return float(count), float(count_sd), 0.0
    return float(np.dot(est, w) / w.sum()), float(1.0 / math.sqrt(w.sum())), float(1.0 - w[0] / w.sum())


def public_one_way(m: Measurement, schema: Schema) -> tuple[dict[int, np.ndarray], float]:
    """Consistent 1-way tables from a ``one_way="public"`` measurement (post-processing).

    The record count is :func:`pooled_total` of the DP record count (discrete Laplace;
    ``meta["dp_record_count"]`` when the measurement's ``records`` already holds the pooled
    figure) and of every column's total; each column's table is then projected onto the
    non-negative tables with that total.
    """
    sd1 = float(m.meta["noise_sd"][0])
    tables = {j: np.asarray(m.marginals[(c.name,)], dtype=np.float64) for j, c in enumerate(schema.columns)}
    raw = m.meta.get("dp_record_count")
    if raw is not None:
        count, count_sd = float(raw["value"]), float(raw["stddev"])
    else:
        count = float(m.records.value)
        count_sd = float(m.records.stddev) if m.records is not None else 0.0
    total = max(1.0, pooled_total(count, count_sd, list(tables.values()), sd1)[0])
    return {j: project_to_total(t, total) for j, t in tables.items()}, total


def _rake_to_one_way(raw: np.ndarray, targets: dict[int, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """Complete mode's last step: reweight the records so that each column matches the
    published DP 1-way marginal (raking), resample as many, and shuffle.

    The complete sampler reconciles the 1-way counts with the noisier 2- and 3-way
    tables and gives suppressed values a share of their column's deficit, so its 1-way
    marginals drift from the 1-way statistic the release publishes (by up to ~0.02 TVD
    on NIST national2019), which the validation gate rightly flags. The 1-way counts are
    the least noisy statistic relative to their size; matching them exactly makes the
    synthetic table agree with its own published measurement and lowered the mean 1-, 2-
    and 3-way TVD against the real data in our benchmarks. Post-processing only.
    """
    from ...postprocess.correction import rake, resample

    # A column whose DP 1-way counts were all suppressed (small inputs), or whose target
    # puts no mass on any code the sample holds, has no usable target: it is left as
    # sampled. The outcome depends on the data only through DP output, and never raises
    # (a crash that depends on the rows would leak them).
    targets = {
        j: t for j, t in targets.items()
        if raw.shape[0] and raw[:, j].max(initial=0) < np.size(t)
        and float(np.clip(np.asarray(t, dtype=np.float64), 0, None)[np.unique(raw[:, j])].sum()) > 0
    }
    if not targets or raw.shape[0] == 0:
        return raw
    try:
        weights = rake(raw.astype(np.int64), targets)
    except ValueError:  # targets the sample cannot reach at all: keep the sample as drawn
        return raw
    out = resample(raw, weights, raw.shape[0], rng)
    return out[rng.permutation(out.shape[0])]


class _Model:
    """Full tables (missing code as a value) and smoothed conditionals from the aggregates."""

    def __init__(self, levels, schema: Schema, records: int, noise_sd: Sequence[float],
                 threshold1: float | None = None, one_way: dict[int, np.ndarray] | None = None,
                 missing_measured: bool = False):
        self.cards = list(schema.cardinalities)
        self.miss = list(schema.missing_codes)
        self.p = len(self.cards)
        self.R = len(levels)
        self.n = float(max(records, 1))
        self.sd = [float(s) if math.isfinite(s) else 0.0 for s in noise_sd]
        self.counts = {c: np.clip(t, 0, None).astype(np.float64) for lv in levels for c, t in lv.items()}
        tau = threshold1 if threshold1 is not None and math.isfinite(threshold1) else 0.0
        if tau <= 0 and levels and levels[0]:  # no recorded threshold: the smallest reported 1-count
            tau = float(min((v[v > 0].min() for v in levels[0].values() if (v > 0).any()), default=0.0))
        self.tau1 = max(0.0, tau)
        self.full: dict[Combo, np.ndarray] = {(): np.array(self.n)}
        self.missing_measured = missing_measured
        if one_way is not None:
            # Measured directly (missing code included): nothing to infer from deficits.
            for j, t in one_way.items():
                self.full[(j,)] = np.clip(t, 0.0, None)
            self.has_missing = [m is not None and bool(self.full[(j,)][m] > 0) for j, m in enumerate(self.miss)]
        else:
            self.has_missing = self._detect_missing(levels)
        self._cond_cache: dict[tuple[Combo, int], np.ndarray] = {}
        self._mi_cache: dict[tuple[Combo, int], float] = {}
        self._gain_cache: dict[Combo, float] = {}
        self._raw_gain_cache: dict[Combo, float] = {}

    def _detect_missing(self, levels) -> list[bool]:
        """A nullable column holds empty cells when its DP 1-way total falls short of n_p
        by more than noise (3 sd) plus what suppressed rare values can explain."""
        out = []
        sd1 = self.sd[0] if self.sd else 0.0
        for j in range(self.p):
            if self.miss[j] is None:
                out.append(False)
                continue
            t = self.counts.get((j,), np.zeros(self.cards[j]))
            regular = self.cards[j] - 1
            deficit = self.n - float(t.sum())
            suppressed = regular - int(np.count_nonzero(t))
            # values below tau_1 were suppressed: they hold about tau_1 / 2 records each
            slack = 3.0 * sd1 * math.sqrt(max(regular, 1)) + suppressed * self.tau1 / 2.0
            out.append(deficit > slack)
        return out

    def _fill_suppressed(self, j: int, F: np.ndarray) -> np.ndarray:
        """1-way counts of values suppressed at k = 1 (noisy count <= tau_1): they share the
        deficit of the column's total, at most tau_1 (tau_1 / 2 when empty cells compete)."""
        regular = np.ones(self.cards[j], dtype=bool)
        if self.miss[j] is not None:
            regular[self.miss[j]] = False
        supp = regular & (F <= 0)
        ns = int(supp.sum())
        deficit = max(0.0, self.n - float(F[regular].sum()))
        if ns and deficit > 0 and self.tau1 > 0:
            share = min(self.tau1 / 2.0, deficit / (ns + 1)) if self.has_missing[j] else min(self.tau1, deficit / ns)
            F = F.copy()
            F[supp] = share
        return F

    def table(self, combo: Combo) -> np.ndarray:
        """Counts over the full codes of ``combo`` (empty cells from deficits), clipped >= 0."""
        if combo in self.full:
            return self.full[combo]
        shape = _shape(self.cards, combo)
        base = self.counts.get(combo)
        F = np.zeros(shape) if base is None else base.copy()
        if len(combo) == 1:
            F = self._fill_suppressed(combo[0], F)
        for i, j in enumerate(combo):
            if not self.has_missing[j] or self.missing_measured:
                continue
            # (sub-tuple count) - (sum of its extensions over j's non-missing values)
            rest = tuple(c for c in combo if c != j)
            parent = self.table(rest)
            mj = self.miss[j]
            idx = [slice(None)] * len(combo)
            idx[i] = mj
            known = F.sum(axis=i) - np.take(F, mj, axis=i)
            F[tuple(idx)] = np.clip(parent - known, 0.0, None)
        if len(combo) >= 2 and _IPF_ROUNDS:
            F = self._rake(combo, F)
        self.full[combo] = F
        return F

    def _rake(self, combo: Combo, F: np.ndarray) -> np.ndarray:
        """Top-down consistency: fit a k-table to its (already consistent) (k-1)-tables.

        Shorter tuples carry less noise (fewer cells share the record's contribution and
        their sums average many noisy cells), so they set the margins; the k-table keeps
        its interaction. Possible cells that were not reported get a half count first,
        so that every margin can be reached.
        """
        possible = np.ones(F.shape, dtype=bool)
        for axis, j in enumerate(combo):
            ok = self.table((j,)) > 0
            shape = [1] * len(combo)
            shape[axis] = self.cards[j]
            possible &= ok.reshape(shape)
        fitted = self._ipf(combo, np.where(possible, np.maximum(F, 0.5), 0.0))
        # James-Stein-like shrinkage towards the table the (k-1)-tables alone imply (no
        # k-way interaction): the share of the deviation that the noise can explain.
        plain = self._ipf(combo, possible.astype(np.float64))
        k = len(combo)
        sd = self.sd[k - 1] if k - 1 < len(self.sd) else 0.0
        dev = float(np.sum((F - plain)[possible] ** 2))
        noise = sd * sd * float(np.count_nonzero(possible))
        lam = 1.0 if dev <= 0 else min(1.0, noise / dev)
        return self._ipf(combo, (1.0 - lam) * fitted + lam * plain)

    def _ipf(self, combo: Combo, F: np.ndarray) -> np.ndarray:
        """Proportional fitting of a table over ``combo`` to each of its (k-1)-sub-tables."""
        margins = [AxisMargin(d, self.table(combo[:d] + combo[d + 1 :])) for d in range(len(combo))]
        return proportional_fit(F, margins, rounds=_IPF_ROUNDS)

    def marginal(self, j: int) -> np.ndarray:
        """Column j's fitted 1-way counts (uniform over its possible codes when all are 0)."""
        t = self.table((j,))
        if t.sum() <= 0:
            t = np.ones(self.cards[j])
            if self.miss[j] is not None and not self.has_missing[j]:
                t[self.miss[j]] = 0.0
        return t

    def conditional(self, parents: Combo, j: int) -> np.ndarray:
        """P(j | parents) as an array (parents' cards..., card_j), rows summing to 1."""
        key = (parents, j)
        if key in self._cond_cache:
            return self._cond_cache[key]
        mj = self.marginal(j)
        if not parents:
            cond = mj / mj.sum()
            self._cond_cache[key] = cond
            return cond
        combo = tuple(sorted(parents + (j,)))
        joint = np.moveaxis(self.table(combo), combo.index(j), -1)  # parents sorted, j last
        k = len(combo)
        if len(parents) == 1:
            prior = np.broadcast_to(mj / mj.sum(), joint.shape)
        else:
            # What the (k-1)-tuples predict: product of single-parent-drop conditionals
            # divided by the marginal (a naive-Bayes combination), normalised per row.
            logp = np.zeros(joint.shape)
            for drop in range(len(parents)):
                sub = parents[:drop] + parents[drop + 1 :]
                c = self.conditional(sub, j)
                shape = [1] * len(parents) + [self.cards[j]]
                for a, par in enumerate(parents):
                    if par in sub:
                        shape[a] = self.cards[par]
                logp = logp + np.log(np.maximum(c.reshape(shape), 1e-12))
            logp -= (len(parents) - 1) * np.log(np.maximum(mj / mj.sum(), 1e-12))
            logp -= logp.max(axis=-1, keepdims=True)
            prior = np.exp(logp)
            prior *= (mj > 0)
            prior /= np.maximum(prior.sum(axis=-1, keepdims=True), 1e-300)
        # Pseudo-count: the slice's noise level, so noise-dominated slices follow the prior.
        support = max(1, int(np.count_nonzero(mj)))
        alpha = max(1.0, _SHRINK * self.sd[k - 1] * math.sqrt(support)) if k - 1 < len(self.sd) else 1.0
        w = joint + alpha * prior
        cond = w / np.maximum(w.sum(axis=-1, keepdims=True), 1e-300)
        if _IPF_ROUNDS:
            cond = self._fit_margins(parents, j, cond)
        self._cond_cache[key] = cond
        return cond

    def _fit_margins(self, parents: Combo, j: int, cond: np.ndarray) -> np.ndarray:
        """Iterative proportional fitting of the family's joint to its (k-1)-sub-tables.

        The joint (parents..., j) = count(parents) x cond is rescaled so that summing out
        any one column gives that shorter tuple table (less noisy than the k-tuple table):
        a consistent projection of the noisy counts, which keeps their interaction.
        """
        cols = parents + (j,)
        ptab = self.table(parents) if len(parents) > 1 else self.marginal(parents[0])
        J = np.clip(ptab, 0, None)[..., None] * cond
        subs = [cols[:d] + cols[d + 1 :] for d in range(len(cols))]
        margins = [AxisMargin(d, self._aligned(sub) if len(sub) > 1 else self.marginal(sub[0]))
                   for d, sub in enumerate(subs) if sub]
        J = proportional_fit(J, margins, rounds=_IPF_ROUNDS)
        rows = J.sum(axis=-1, keepdims=True)
        fitted = J / np.maximum(rows, 1e-300)
        return np.where(rows > 0, fitted, cond)

    def _aligned(self, cols: Combo) -> np.ndarray:
        """Full table of ``cols`` with axes in the given (not necessarily sorted) order."""
        srt = tuple(sorted(cols))
        tab = np.clip(self.table(srt), 0, None)
        return np.transpose(tab, [srt.index(c) for c in cols])

    def mutual_information(self, parents: Combo, j: int) -> float:
        """I(parents; j) under the smoothed conditional and the fitted parents' table."""
        key = (parents, j)
        if key in self._mi_cache:
            return self._mi_cache[key]
        cond = self.conditional(parents, j)
        ptab = self.table(parents) if len(parents) > 1 else self.marginal(parents[0])
        pp = np.clip(ptab, 0, None)
        pp = pp / max(pp.sum(), 1e-300)
        joint = pp[..., None] * cond
        px = joint.reshape(-1, joint.shape[-1]).sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = joint / (pp[..., None] * px)
            mi = float(np.nansum(np.where(joint > 0, joint * np.log(ratio), 0.0)))
        self._mi_cache[key] = mi
        return mi

    def joint_gain(self, a: int, b: int, j: int, raw: bool = False) -> float:
        """What the measured 3-way table of (a, b, j) says about j beyond its 2-way tables:
        I(a, b; j) - I(a; j) - I(b; j) (the same for each of the three columns), from that
        one table as the model holds it (fitted to its 2-way tables and shrunk towards what
        they imply by as much as the noise explains), or with ``raw`` from its noisy counts
        (clipped at 0; cheap, but noise inflates it on large tables); 0 when the triple was
        not measured. Large for j = (a + b) mod c, whose parents each show almost nothing
        alone. Post-processing of the aggregates only."""
        combo = tuple(sorted((a, b, j)))
        cache = self._raw_gain_cache if raw else self._gain_cache
        gain = cache.get(combo)
        if gain is None:
            if combo not in self.counts or len(combo) != 3:
                gain = 0.0
            else:
                gain = _interaction(self.counts[combo] if raw else self.table(combo))
            cache[combo] = gain
        return gain

    def joint_pairs(self, shortlist: Sequence[Combo], j: int) -> list[Combo]:
        """The _JOINT_PAIRS pairs of ``shortlist`` (ranked by raw gain) with the largest
        positive :meth:`joint_gain` on the model's tables."""
        scored = sorted(((self.joint_gain(a, b, j), (a, b)) for a, b in shortlist), reverse=True)
        return [par for g, par in scored[:_JOINT_PAIRS] if g > 0]

    def _parent_sets(self, placed: list[int], j: int, size: int,
                     joint: Sequence[Combo] = ()) -> list[Combo]:
        """Candidate parent sets of ``j``: the ``size``-subsets of the _PARENT_POOL placed
        columns with the highest single-parent MI with ``j`` (all subsets when size <= 1),
        and the pairs ``joint`` (placed pairs ranked by :meth:`joint_gain`).

        Scoring every subset of the placed columns needs a smoothed k-table for each of
        C(p, 2) (p - 2) families at R = 3, which dominated the run time on wide tables.
        A shortlist by single-parent MI alone never offers a pair that matters only
        jointly (j = (a + b) mod c), hence the pairs from the 3-way tables.
        """
        if size <= 1 or len(placed) <= _PARENT_POOL:
            return list(combinations(sorted(placed), size))
        ranked = sorted(placed, key=lambda a: -self.mutual_information((a,), j))[: max(size, _PARENT_POOL)]
        sets = list(combinations(sorted(ranked), size))
        return sets + [par for par in joint if len(par) == size and par not in sets]

    def order(self, first: int) -> list[tuple[int, Combo]]:
        """Greedy order from ``first``: next the (column, parents) with the highest MI."""
        placed = [first]
        steps: list[tuple[int, Combo]] = [(first, ())]
        todo = [j for j in range(self.p) if j != first]
        width = self.R - 1
        # per column, the placed pairs with the largest raw joint gain (kept as columns are placed)
        joint: dict[int, list[tuple[float, Combo]]] = {j: [] for j in todo}
        while todo:
            best = (-1.0, todo[0], ())
            size = min(width, len(placed))
            for j in todo:
                pairs = self.joint_pairs([par for _, par in joint[j]], j) if size == 2 and joint[j] else []
                for par in self._parent_sets(placed, j, size, pairs):
                    mi = self.mutual_information(par, j) if par else 0.0
                    if mi > best[0]:
                        best = (mi, j, par)
            _, j, par = best
            steps.append((j, par))
            todo.remove(j)
            if width >= 2 and _JOINT_PAIRS:
                for t in todo:
                    new = [(self.joint_gain(a, j, t, raw=True), tuple(sorted((a, j)))) for a in placed]
                    joint[t] = sorted(joint[t] + [g for g in new if g[0] > 0], reverse=True)[:_JOINT_SHORTLIST]
            placed.append(j)
        return steps


def _interaction(t: np.ndarray) -> float:
    """I(a, b; c) - I(a; c) - I(b; c) of a 3-way table of counts (clipped at 0), which is
    H(ab) + H(ac) + H(bc) - H(abc) - H(a) - H(b) - H(c): symmetric in the three columns."""
    t = np.clip(np.asarray(t, dtype=np.float64), 0.0, None)
    n = float(t.sum())
    if n <= 0:
        return 0.0
    t = t / n
    pairs = [t.sum(axis=ax) for ax in range(3)]
    singles = [t.sum(axis=(1, 2)), t.sum(axis=(0, 2)), t.sum(axis=(0, 1))]
    return sum(_entropy(q) for q in pairs) - _entropy(t) - sum(_entropy(q) for q in singles)


def _entropy(q: np.ndarray) -> float:
    """Entropy (nats) of a table of probabilities."""
    q = q[q > 0]
    return float(-np.sum(q * np.log(q)))


def _sample_complete(model: _Model, rows: int, params: SdsParams, rng: np.random.Generator) -> np.ndarray:
    p = model.p
    out = np.zeros((rows, p), dtype=np.int64)
    n_orders = max(1, min(_COMPLETE_ORDERS, p, rows))
    # First columns: the most informative ones (highest total MI with a single partner).
    score = np.zeros(p)
    if model.R >= 2 and p > 1:
        for a in range(p):
            score[a] = sum(model.mutual_information((a,), b) for b in range(p) if b != a)
    firsts = list(np.argsort(-score, kind="stable")[:n_orders])
    bounds = np.linspace(0, rows, n_orders + 1).astype(int)
    perm = rng.permutation(rows)
    for g, first in enumerate(firsts):
        idx = perm[bounds[g] : bounds[g + 1]]
        if not idx.size:
            continue
        steps = model.order(int(first))
        rec = np.zeros((idx.size, p), dtype=np.int64)
        rounds = _COMPLETE_ROUNDS if params.use_synthetic_counts else 1
        edges = np.linspace(0, idx.size, rounds + 1).astype(int)
        synth: dict[tuple[Combo, int], np.ndarray] = {}
        for r in range(rounds):
            sl = slice(edges[r], edges[r + 1])
            nr = edges[r + 1] - edges[r]
            if nr == 0:
                continue
            for j, par in steps:
                cond = model.conditional(par, j)
                flat = cond.reshape(-1, cond.shape[-1])
                if par:
                    pidx = np.zeros(nr, dtype=np.int64)
                    for c in par:
                        pidx = pidx * model.cards[c] + rec[sl, c]
                else:
                    pidx = np.zeros(nr, dtype=np.int64)
                probs = flat[pidx]
                if params.use_synthetic_counts and r > 0:
                    # Remaining = what the group should hold so far minus what it holds.
                    done = synth[(par, j)]
                    target = flat * np.bincount(pidx, minlength=flat.shape[0])[:, None]
                    target = target + flat * done.sum(axis=1, keepdims=True)
                    rem = np.clip(target - done, 0.0, None)
                    rs = rem.sum(axis=1, keepdims=True)
                    adj = np.where(rs > 0, rem / np.maximum(rs, 1e-300), flat)
                    probs = adj[pidx]
                pick = _draw(probs, rng)
                rec[sl, j] = np.where(pick >= 0, pick, 0)
                if params.use_synthetic_counts:
                    key = (par, j)
                    add = np.zeros(flat.shape)
                    np.add.at(add, (pidx, rec[sl, j]), 1.0)
                    synth[key] = synth.get(key, 0) + add
        out[idx] = rec
    return out
