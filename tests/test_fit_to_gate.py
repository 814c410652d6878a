"""The released pgm fit follows the gate: more steps while a measured marginal's model TVD is
above a share of the threshold the gate will give it (issue 25), within a step bound.

Large tables are emulated without their rows: a small table's counts times a factor, noised
as a table of that many rows would be (the noise scale does not depend on the rows)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dpsynth.methods.pgm as pgm
from dpsynth.evaluation.metrics import tvd
from dpsynth.evaluation.predicted import allowed_tvds
from dpsynth.inference import (Domain, EstimatorOptions, FitTarget, Observation, estimate, fit_to_target)
from dpsynth.methods import get_method
from dpsynth.pipeline.synthetic import write_synthetic
from dpsynth.privacy.budget import Budget, Ledger
from dpsynth.rows.encoding import EncodedTable
from dpsynth.schema import schema_from_dict


def _table(cards, rows, seed) -> EncodedTable:
    rng = np.random.default_rng(seed)
    s = schema_from_dict({"name": "t", "columns": [
        {"name": f"c{j}", "type": "categorical", "values": [str(i) for i in range(c)]} for j, c in enumerate(cards)]})
    codes = np.empty((rows, len(cards)), dtype=np.int64)
    codes[:, 0] = rng.integers(0, cards[0], rows)
    for j in range(1, len(cards)):
        codes[:, j] = np.where(rng.random(rows) < 0.7, codes[:, j - 1] % cards[j], rng.integers(0, cards[j], rows))
    return EncodedTable(schema=s, codes=codes.astype(np.uint8))


def _scaled_measurement(monkeypatch, params, scale, seed=3, cards=(4, 5, 3, 6), rows=4000):
    """A pgm measurement of a table of ``scale`` x ``rows`` rows (its counts, scaled)."""
    monkeypatch.setattr(pgm, "FIT_CELL_STEPS", None)  # the cap is iters, as on a large model
    real = pgm.count_marginals
    monkeypatch.setattr(pgm, "count_marginals",
                        lambda src, subsets, **kw: {k: v * scale for k, v in real(src, subsets, **kw).items()})
    t = _table(list(cards), rows, seed)
    b = Budget(epsilon=1.0, delta=1e-6)
    method = get_method("pgm", params)
    m = method.measure(t, Ledger(b, method.plan(t.schema, b)), np.random.default_rng(seed))
    monkeypatch.setattr(pgm, "count_marginals", real)
    return method, m, t.schema


def _worst_ratio(model, m, rows: int) -> float:
    """Largest model TVD / gate threshold over the measured marginals (no merged values here)."""
    allowed = allowed_tvds(m, rows)
    return max(tvd(model.project(nm.attrs).ravel(), np.clip(nm.counts, 0, None).ravel()) / allowed[tuple(nm.attrs)]
               for nm in m.measured)


@pytest.mark.parametrize("select", ["mst", "aim"])
def test_a_fit_stopped_at_its_cap_is_fitted_on_to_the_share_of_the_gate_threshold(monkeypatch, select):
    params = {"select": select, "iters": "5", "compress": "false", **({"units": "8"} if select == "aim" else {})}
    method, m, schema = _scaled_measurement(monkeypatch, params, scale=50_000)
    rows = m.estimated_records()
    monkeypatch.setattr(pgm, "GATE_FIT_ROWS", 1000)  # a bound this test does not reach
    capped, none = method.released_fit(m, schema, None)  # the old released fit: the cap only
    assert none is None
    assert _worst_ratio(capped, m, rows) > pgm.GATE_FIT_SHARE  # the cap leaves a marginal too far
    model, report = method.released_fit(m, schema, rows)
    assert report.extra_steps > 0 and report.met and report.ratio_at_stop > 1.0, report
    assert report.steps <= pgm.gate_fit_steps(5, rows)
    assert _worst_ratio(model, m, rows) <= pgm.GATE_FIT_SHARE * (1 + 1e-9)


def _observations(n: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    dom = Domain(names=("a", "b", "c"), sizes=(4, 5, 3))
    p = rng.dirichlet(np.ones(60) * 0.5).reshape(4, 5, 3)
    sigma = 30.0
    obs = [Observation(attrs=attrs, counts=n * p.sum(axis=axes) + rng.normal(0, sigma, dom.shape(attrs)), stddev=sigma)
           for attrs, axes in ((("a", "b"), 2), (("b", "c"), 0), (("a",), (1, 2)))]
    return dom, obs


def test_a_fit_already_within_its_limits_is_the_capped_fit_bit_for_bit():
    dom, obs = _observations(1e4)
    opts = EstimatorOptions(iters=40)
    plain = estimate(dom, obs, options=opts)
    model, report = fit_to_target(dom, obs, FitTarget(limits={frozenset(o.attrs): 1.0 for o in obs}, most_steps=10**6),
                                  options=opts)
    assert report.extra_steps == 0 and report.met
    assert all(np.array_equal(a, b) for a, b in zip(plain.theta, model.theta))


def test_the_step_bound_is_honoured():
    dom, obs = _observations(1e9)
    opts = EstimatorOptions(iters=10, tol=0.0)
    # a limit no fit meets, and no plateau stop
    target = FitTarget(limits={frozenset(("a", "b")): 0.0}, most_steps=37, window=10**9)
    _, report = fit_to_target(dom, obs, target, options=opts)
    assert report.steps == 37 and report.extra_steps == 27 and not report.met and report.most_steps == 37
    _, shorter = fit_to_target(dom, obs, FitTarget(limits=target.limits, most_steps=5), options=opts)
    assert shorter.steps == 10 and shorter.extra_steps == 0  # a bound below the cap adds nothing


def test_the_fit_stops_once_the_worst_ratio_no_longer_falls():
    dom, obs = _observations(1e6, seed=2)
    opts = EstimatorOptions(iters=10, tol=0.0)
    limits = {frozenset(o.attrs): 1e-12 for o in obs}  # below what any consistent model reaches
    model, report = fit_to_target(dom, obs, FitTarget(limits=limits, most_steps=10**6, window=20, min_gain=0.01),
                                  options=opts)
    assert not report.met and 10 < report.steps < 10**5
    assert report.ratio < report.ratio_at_stop
    # the released state is the one of the best ratio the report states
    worst = max(tvd(model.project(o.attrs).ravel(), np.clip(o.counts, 0, None).ravel()) for o in obs) / 1e-12
    assert worst == pytest.approx(report.ratio, rel=1e-6)
    # without the plateau stop the same fit goes on (the stop above was not the step size's collapse)
    _, longer = fit_to_target(dom, obs, FitTarget(limits=limits, most_steps=report.steps + 50, window=10**9),
                              options=opts)
    assert longer.steps == report.steps + 50


def test_the_step_bound_grows_with_the_rows_up_to_its_ceiling():
    assert pgm.gate_fit_steps(1000, 1000) == 1  # below GATE_FIT_ROWS rows: under the cap, no step more
    assert pgm.gate_fit_steps(1000, pgm.GATE_FIT_ROWS) == 1000
    assert pgm.gate_fit_steps(1000, 10 * pgm.GATE_FIT_ROWS) == 10_000
    assert pgm.gate_fit_steps(1000, 10**15) == pgm.GATE_FIT_MOST_ITERS


def test_the_released_fit_is_a_function_of_the_measurement_whatever_chunk_rows(monkeypatch, tmp_path):
    method, m, schema = _scaled_measurement(monkeypatch, {"select": "mst", "iters": "2"}, scale=10)
    monkeypatch.setattr(pgm, "GATE_FIT_ROWS", 1000)  # a bound this test does not reach
    digests = set()
    for k, chunk_rows in enumerate((997, 40_000, 997)):
        sampler = method.sampler(m, schema, None, np.random.default_rng(1))
        assert sampler.fit["extra_steps"] > 0 and sampler.fit["met"]
        out = tmp_path / f"run-{k}"
        out.mkdir()
        write_synthetic(out, schema, sampler, np.random.default_rng(5), np.random.default_rng(6),
                        chunk_rows=chunk_rows, block_rows=10_000)
        digests.add((json.dumps(sampler.fit, sort_keys=True), (out / "synthetic.parquet").read_bytes(),
                     (out / "synthetic.csv").read_bytes()))
    assert len(digests) == 1


def test_the_manifest_states_the_released_fit(tmp_path, demo_paths, seed_file, monkeypatch):
    from small_release import pgm_release

    from dpsynth.pipeline import synthetic as synth

    synthetic = pgm_release(tmp_path, demo_paths, seed_file, monkeypatch)[3]
    fit = synth.synthesis_entries(synthetic)["synthesis"]["fit"]  # what publish puts in the manifest
    assert fit == json.loads((synthetic / synth.FIT_RECORD).read_text())
    assert fit["gate_share"] == pgm.GATE_FIT_SHARE and fit["steps"] >= 1 and fit["most_steps"] >= 1
    assert fit["extra_steps"] == 0  # 1234 rows: the bound is under the cap, the fit is as before
