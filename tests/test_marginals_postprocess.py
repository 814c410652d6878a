"""``marginals``' synthesis: noisy histograms projected onto a common total, rows allocated
to values by their expected counts (dpsynth.postprocess.histograms), and what it buys."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from scipy import stats

from dpsynth.methods.marginals import MarginalsMethod, estimate_rows, one_way_distributions
from dpsynth.postprocess.histograms import allocate_counts, allocated_draw, project_to_total
from dpsynth.privacy.budget import Budget, Ledger
from dpsynth.rows.encoding import EncodedTable
from dpsynth.schema import schema_from_dict

ALPHA = 1e-6


def _nearest_by_enumeration(v: np.ndarray, total: float) -> np.ndarray:
    """The projection by brute force: for every support S, the nearest vector with sum
    ``total`` that is zero off S is ``v_S - (sum v_S - total) / |S|`` on S; the nearest
    non-negative one of those is the projection (the problem is a strictly convex QP)."""
    best, best_d = None, np.inf
    for k in range(1, v.size + 1):
        for S in combinations(range(v.size), k):
            x = np.zeros_like(v)
            idx = list(S)
            x[idx] = v[idx] - (v[idx].sum() - total) / k
            if x.min() < -1e-12:
                continue
            d = float(np.sum((x - v) ** 2))
            if d < best_d:
                best, best_d = x, d
    assert best is not None
    return best


def test_the_projection_keeps_the_total_is_nonnegative_and_is_the_nearest():
    rng = np.random.default_rng(3)
    for _ in range(200):
        v = rng.normal(0, 5, size=int(rng.integers(1, 7))) + rng.integers(0, 8)
        total = float(rng.uniform(0.5, 30))
        x = project_to_total(v, total)
        assert x.min() >= 0 and x.sum() == pytest.approx(total)
        assert np.allclose(x, _nearest_by_enumeration(v, total), atol=1e-9)
    assert np.array_equal(project_to_total(np.array([3.0, -2.0]), 0.0), np.zeros(2))


def test_the_projection_drops_values_whose_count_is_noise():
    noisy = np.array([500.0, 300.0, 40.0, -35.0, 38.0, -10.0])  # 800 real records in the first two
    x = project_to_total(noisy, 800.0)
    assert np.allclose(x, [480.5, 280.5, 20.5, 0.0, 18.5, 0.0])  # 19.5 off every cell, then clipped
    clipped = np.clip(noisy, 0, None) / np.clip(noisy, 0, None).sum() * 800
    assert clipped[2:].sum() > 70  # clipping alone keeps 71 records of noise, the projection 39


def test_allocation_gives_each_value_the_floor_or_ceiling_of_its_expected_count():
    rng = np.random.default_rng(11)
    cases = [np.array([1 / 3] * 3), np.array([0.0, 1.0, 0.0]), np.array([0.1] * 10), np.array([0.0, 0.0]),
             np.array([2.0, 1.0, 1.0])]
    cases += [rng.dirichlet(np.full(int(rng.integers(1, 40)), 0.3)) for _ in range(300)]
    for w in cases:
        for n in (0, 1, 7, 9, 100, 65_536, 1_000_003):
            counts = allocate_counts(w, n, rng)
            p = w / w.sum() if w.sum() > 0 else np.full(w.size, 1 / w.size)
            exp = n * p
            assert counts.sum() == n and counts.min() >= 0
            assert np.all((counts == np.floor(exp + 1e-9)) | (counts == np.ceil(exp - 1e-9))), (w, n, counts)
    draw = allocated_draw(np.array([0.5, 0.25, 0.25]), 8, rng)
    assert sorted(draw.tolist()) == [0, 0, 0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="n must be"):
        allocate_counts(np.ones(3), -1, rng)
    with pytest.raises(ValueError, match="at least one value"):
        allocate_counts(np.ones(0), 3, rng)


def _allocation_pvalue(p_draw: np.ndarray, p_claim: np.ndarray, n: int, reps: int, seed: int) -> float:
    """Smallest Bonferroni-corrected p-value that the mean count of each value over ``reps``
    allocations is ``n p_claim`` (each count is its floor plus a Bernoulli)."""
    rng = np.random.default_rng(seed)
    counts = np.array([allocate_counts(p_draw, n, rng) for _ in range(reps)])
    exp = n * p_claim
    frac = exp - np.floor(exp)
    sd = np.sqrt(np.maximum(frac * (1 - frac), 1e-12) / reps)
    z = np.abs(counts.mean(axis=0) - exp) / sd
    return float(min(1.0, p_claim.size * 2 * stats.norm.sf(z.max())))


def test_allocation_is_unbiased_and_rejects_a_wrong_distribution():
    p = np.array([0.31, 0.27, 0.2013, 0.1187, 0.1])
    assert _allocation_pvalue(p, p, 97, 20_000, 0) > ALPHA
    wrong = np.array([0.31, 0.28, 0.1913, 0.1187, 0.1])  # one value moved by 0.97 records
    assert _allocation_pvalue(wrong, p, 97, 20_000, 0) < ALPHA


def _table(rows: int, seed: int) -> EncodedTable:
    """Three columns of 40 codes each, the records on 4 of them: most cells hold only noise."""
    s = schema_from_dict({"name": "t", "columns": [
        {"name": f"c{j}", "type": "categorical", "values": [str(i) for i in range(40)]} for j in range(3)]})
    rng = np.random.default_rng(seed)
    return EncodedTable(schema=s, codes=rng.choice(4, size=(rows, 3), p=[0.4, 0.3, 0.2, 0.1]).astype(np.uint8))


def _old_synthesis(m, schema, rng) -> np.ndarray:
    """What ``marginals`` drew before (the reference): negatives clipped, each histogram
    normalised on its own, i.i.d. draws."""
    n = estimate_rows(m)
    out = np.empty((n, len(schema.columns)), dtype=np.int64)
    for j, c in enumerate(schema.columns):
        q = np.clip(np.asarray(m.marginals[(c.name,)], dtype=np.float64), 0, None)
        out[:, j] = rng.choice(q.size, size=n, p=q / q.sum())
    return out


def _one_way_tvd(real: np.ndarray, synth: np.ndarray, card: int) -> float:
    return float(np.mean([0.5 * np.abs(np.bincount(real[:, j], minlength=card) / len(real)
                                       - np.bincount(synth[:, j], minlength=card) / len(synth)).sum()
                          for j in range(real.shape[1])]))


@pytest.mark.parametrize("delta", [1e-6, 0.0])
def test_the_new_synthesis_has_a_lower_one_way_tvd_where_noise_dominates(delta):
    """30 seeded measurements at epsilon 0.5 of a 2,000-row table whose columns hold 4 of
    40 codes: the new synthesis is closer to the real 1-way marginals than the old in at
    least 28 (a sign test: P(>= 28 of 30 | no difference) = 4.3e-7 < ALPHA). Both budgets:
    the discrete Gaussian and the pure-epsilon (discrete Laplace) histograms."""
    t = _table(2000, 1)
    method = MarginalsMethod()
    budget = Budget(epsilon=0.5, delta=delta)
    wins = 0
    for seed in range(30):
        rng = np.random.default_rng([seed, 5])
        m = method.measure(t, Ledger(budget, method.plan(t.schema, budget)), rng)
        new = method.synthesize(m, t.schema, None, rng).codes.astype(np.int64)
        old = _old_synthesis(m, t.schema, rng)
        wins += _one_way_tvd(t.codes, new, 40) < _one_way_tvd(t.codes, old, 40)
    assert stats.binomtest(wins, 30, 0.5, alternative="greater").pvalue < ALPHA


def test_a_block_holds_each_value_by_its_expected_count():
    """Every block's 1-way counts are the floor or ceiling of block rows x the projected
    distribution (i.i.d. draws miss by about sqrt(n p) records)."""
    t = _table(5000, 2)
    method = MarginalsMethod()
    budget = Budget(epsilon=1.0, delta=1e-6)
    m = method.measure(t, Ledger(budget, method.plan(t.schema, budget)), np.random.default_rng(0))
    dists = one_way_distributions(m, t.schema)
    sampler = method.sampler(m, t.schema, None, np.random.default_rng(1))
    assert sampler.rows == estimate_rows(m)
    first = sampler.sample(4_321, np.random.default_rng(0))
    assert len(np.unique(first[:50, 0])) > 1  # not sorted: a column's values come in a random order
    for n, seed in [(4_321, 0), (777, 1), (1, 2)]:
        codes = sampler.sample(n, np.random.default_rng(seed))
        for j, c in enumerate(t.schema.columns):
            got = np.bincount(codes[:, j].astype(np.int64), minlength=40)
            exp = n * dists[c.name]
            assert np.all((got == np.floor(exp + 1e-9)) | (got == np.ceil(exp - 1e-9))), c.name
            assert dists[c.name].sum() == pytest.approx(1.0) and dists[c.name].min() >= 0
