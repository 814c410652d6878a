from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpsynth.rows.encoding import EncodedTable
from dpsynth.methods import get_method
from dpsynth.methods.marginals import MarginalsMethod, estimate_rows
from dpsynth.privacy import Budget, Ledger, gaussian_sigma
from dpsynth.schema import schema_from_dict

ALPHA = 1e-6


def _table(n_cols: int, card: int, rows: int, rng) -> EncodedTable:
    s = schema_from_dict({"name": "t", "columns": [
        {"name": f"c{j}", "type": "categorical", "values": [str(i) for i in range(card)]} for j in range(n_cols)]})
    return EncodedTable(schema=s, codes=rng.integers(0, card, (rows, n_cols)).astype(np.uint8))


def test_plan_splits_the_budget_evenly():
    rng = np.random.default_rng(0)
    t = _table(4, 3, 10, rng)
    b = Budget(epsilon=1.0, delta=1e-6)
    plan = MarginalsMethod().plan(t.schema, b)
    assert len(plan) == 4 and sum(c.rho for c in plan) == pytest.approx(b.rho)


def _noise_samples(scale_factor: float, runs: int, rng) -> tuple[np.ndarray, float]:
    """Noisy minus true counts over many measurements; optionally with the wrong scale."""
    t = _table(2, 100, 500, rng)
    b = Budget(epsilon=1.0, delta=1e-6)
    method = MarginalsMethod()
    truth = np.bincount(t.codes[:, 0], minlength=100)
    out = []
    for _ in range(runs):
        led = Ledger(b, method.plan(t.schema, b))
        m = method.measure(t, led, rng)
        out.append(m.marginals[("c0",)] - truth)
    sigma = m.stddev(("c0",))
    assert sigma == pytest.approx(gaussian_sigma(1.0, b.rho / 2))
    return np.concatenate(out), sigma * scale_factor


@pytest.mark.slow
def test_measured_noise_has_the_planned_scale():
    rng = np.random.default_rng(99)
    noise, sigma = _noise_samples(1.0, 2000, rng)

    def pvalue(x, s):
        # Kolmogorov-Smirnov against N(0, s^2) with a continuity shift; n = 200,000
        return stats.kstest(x + rng.random(x.size) - 0.5, stats.norm(scale=np.sqrt(s * s + 1 / 12)).cdf).pvalue

    assert pvalue(noise, sigma) > ALPHA
    assert pvalue(noise, sigma * 0.7) < ALPHA
    assert pvalue(noise, sigma * 1.3) < ALPHA


def test_synthesize_follows_the_noisy_marginals():
    rng = np.random.default_rng(5)
    s = schema_from_dict({"name": "t", "columns": [
        {"name": "a", "type": "categorical", "values": ["x", "y"]},
        {"name": "b", "type": "categorical", "values": ["p", "q", "r"]}]})
    codes = np.column_stack([np.r_[np.zeros(9000), np.ones(1000)], rng.integers(0, 3, 10000)]).astype(np.uint8)
    t = EncodedTable(schema=s, codes=codes)
    method = get_method("marginals")
    b = Budget(epsilon=5.0, delta=1e-6)
    m = method.measure(t, Ledger(b, method.plan(s, b)), rng)
    assert abs(estimate_rows(m) - 10000) < 50
    out = method.synthesize(m, s, None, rng)
    assert abs(out.n - 10000) < 50
    assert abs(np.mean(out.codes[:, 0] == 0) - 0.9) < 0.02
    assert method.synthesize(m, s, 123, rng).n == 123
