"""Method ``pgm``: plans, ledger, the exponential mechanism, releases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpsynth.rows.encoding import EncodedTable
from dpsynth.methods import ParamError, get_method
from dpsynth.methods.pgm import PgmMethod, PgmParams
from dpsynth.privacy import Budget, Ledger, gaussian_sigma
from dpsynth.privacy.mechanisms import (
    exponential_epsilon_for_rho,
    exponential_mechanism,
    exponential_probabilities,
    exponential_charge,
)
from dpsynth.schema import schema_from_dict

ALPHA = 1e-6


def _table(cards, rows, rng, correlated=True) -> EncodedTable:
    s = schema_from_dict({"name": "t", "columns": [
        {"name": f"c{j}", "type": "categorical", "values": [str(i) for i in range(c)]} for j, c in enumerate(cards)]})
    codes = np.empty((rows, len(cards)), dtype=np.int64)
    codes[:, 0] = rng.integers(0, cards[0], rows)
    for j in range(1, len(cards)):
        noise = rng.integers(0, cards[j], rows)
        codes[:, j] = np.where(rng.random(rows) < (0.7 if correlated else 0.0), codes[:, j - 1] % cards[j], noise)
    return EncodedTable(schema=s, codes=codes.astype(np.uint8))


# --- plans and the ledger ----------------------------------------------------------------------


def test_mst_plan_is_msts_budget_split():
    rng = np.random.default_rng(0)
    t = _table([3, 4, 5, 2, 3], 10, rng)
    b = Budget(epsilon=1.0, delta=1e-9)
    plan = PgmMethod(PgmParams(select="mst")).plan(t.schema, b)
    d = 5
    assert sum(c.rho for c in plan) == pytest.approx(b.rho, rel=1e-12)
    ones = [c for c in plan if c.stage.startswith("measure/1-way/")]
    selects = [c for c in plan if c.mechanism == "exponential"]
    pairs = [c for c in plan if c.stage.startswith("measure/2-way/")]
    assert len(ones) == d and len(selects) == d - 1 and len(pairs) == d - 1
    assert all(c.rho == pytest.approx(b.rho / 3 / d) for c in ones)
    eps = math.sqrt(8 * (b.rho / 3) / (d - 1))  # MST's per-round epsilon
    for c in selects:
        assert c.detail["epsilon"] == pytest.approx(eps)
        assert c.rho == pytest.approx(eps**2 / 8)
        assert c.detail["sensitivity"] == 1.0
    assert all(c.rho == pytest.approx(b.rho / 3 / (d - 1)) for c in pairs)


def test_aim_plan_spends_the_budget_in_units():
    rng = np.random.default_rng(1)
    t = _table([3, 4, 5, 2], 10, rng)
    b = Budget(epsilon=2.0, delta=1e-9)
    plan = PgmMethod(PgmParams(select="aim", units=10)).plan(t.schema, b)
    assert sum(c.rho for c in plan) == pytest.approx(b.rho, rel=1e-12)
    sel = [c for c in plan if c.mechanism == "exponential"]
    meas = [c for c in plan if c.stage.endswith("/measure")]
    assert len(sel) == len(meas) == 10
    assert all(s.rho / (s.rho + m.rho) == pytest.approx(0.1) for s, m in zip(sel, meas))
    # AIM's sensitivity with a workload of every 3-way marginal: 3 * C(d-1, 2).
    assert all(s.detail["sensitivity"] == 3 * math.comb(3, 2) for s in sel)


@pytest.mark.parametrize("select", ["mst", "aim"])
def test_measure_spends_exactly_the_plan(select):
    rng = np.random.default_rng(2)
    t = _table([3, 4, 5, 2, 3], 2000, rng)
    b = Budget(epsilon=1.0, delta=1e-9)
    method = get_method("pgm", {"select": select, "units": "12"})
    plan = method.plan(t.schema, b)
    ledger = Ledger(b, plan)
    m = method.measure(t, ledger, rng)
    assert [c.stage for c in ledger.spent] == sorted((c.stage for c in plan), key=[c.stage for c in ledger.spent].index)
    assert {c.stage for c in ledger.spent} == {c.stage for c in plan}
    assert ledger.rho_spent == pytest.approx(b.rho, rel=1e-12)
    assert m.rho == pytest.approx(b.rho, rel=1e-12)
    # Every stated noise scale is what its Gaussian charges pay for.
    assert all(nm.stddev > 0 and nm.mechanism == "gaussian" for nm in m.measured)
    assert m.statement.differentially_private and "add or remove" in m.statement.neighbours
    one_way = [c for c in plan if c.stage.startswith("measure/1-way/")]
    assert m.stddev(("c0",)) == pytest.approx(gaussian_sigma(1.0, one_way[0].rho))
    synth = method.synthesize(m, t.schema, None, rng)
    assert synth.codes.shape[1] == 5 and abs(synth.codes.shape[0] - 2000) < 200


def test_aim_degree_2_learns_the_chain_with_pairs_only():
    """AIM limited to 1- and 2-way candidates: never a triple, and with a strong chain and a
    large budget it measures the chain's pairs (its scores query pairs across cliques)."""
    rng = np.random.default_rng(13)
    t = _table([4, 4, 4, 4, 4, 4], 20_000, rng)
    b = Budget(epsilon=8.0, delta=1e-9)
    method = get_method("pgm", {"select": "aim", "degree": 2, "units": 30})
    m = method.measure(t, Ledger(b, method.plan(t.schema, b)), rng)
    chosen = {frozenset(s) for s in m.meta["selected"]}
    assert all(len(s) <= 2 for s in chosen)
    chain = {frozenset((f"c{j}", f"c{j + 1}")) for j in range(5)}
    assert chain <= chosen


def test_aim_rounds_still_reach_a_debug_logger(caplog):
    """pgm imports ``logging`` no more (about 0.4 MB of the head-to-head's process); where the
    caller has it (here pytest) and asks for debug records, every AIM round still logs one."""
    import logging

    rng = np.random.default_rng(13)
    t = _table([3, 3, 3], 2000, rng)
    b = Budget(epsilon=1.0, delta=1e-9)
    method = get_method("pgm", {"select": "aim", "degree": 2, "units": 6})
    with caplog.at_level(logging.DEBUG, logger="dpsynth.methods.pgm"):
        m = method.measure(t, Ledger(b, method.plan(t.schema, b)), rng)
    rounds = [r for r in caplog.records if r.name == "dpsynth.methods.pgm" and r.getMessage().startswith("aim round:")]
    assert len(rounds) >= len(m.meta["selected"]) > 0  # one record per round (a round may choose a 1-way)


def test_mst_learns_the_chain():
    """With a strong chain c0 - c1 - ... and a large budget, MST picks the chain's pairs."""
    rng = np.random.default_rng(3)
    t = _table([4, 4, 4, 4], 20_000, rng)
    b = Budget(epsilon=8.0, delta=1e-9)
    method = PgmMethod(PgmParams(select="mst"))
    m = method.measure(t, Ledger(b, method.plan(t.schema, b)), rng)
    assert sorted(tuple(s) for s in m.meta["selected"]) == [("c0", "c1"), ("c1", "c2"), ("c2", "c3")]


def test_bad_parameters_and_oversized_domains_fail_before_any_row():
    with pytest.raises(ParamError, match="select"):
        get_method("pgm", {"select": "best"})
    with pytest.raises(ParamError, match="degree"):
        get_method("pgm", {"degree": "4"})
    with pytest.raises(ParamError, match="noise_tol"):
        get_method("pgm", {"noise_tol": "-0.1"})
    with pytest.raises(ParamError, match="precision"):
        get_method("pgm", {"precision": "half"})
    rng = np.random.default_rng(4)
    t = _table([30, 3], 10, rng)
    with pytest.raises(ParamError, match="c0"):
        PgmMethod(PgmParams(max_clique_cells=20)).plan(t.schema, Budget(epsilon=1.0, delta=1e-9))


# --- the exponential mechanism -------------------------------------------------------------------


def test_exponential_cost_is_bounded_range():
    assert exponential_charge("s", 0.4).rho == pytest.approx(0.02)
    assert exponential_epsilon_for_rho(exponential_charge("s", 1.7).rho) == pytest.approx(1.7)


def _selection_pvalue(draws: np.ndarray, scores, eps, sens) -> float:
    p = exponential_probabilities(np.asarray(scores), eps, sens)
    observed = np.bincount(draws, minlength=len(scores))
    return float(stats.chisquare(observed, p * draws.size).pvalue)


def test_exponential_mechanism_selection_frequencies():
    scores = np.array([0.0, 1.0, 2.0, 3.5, 5.0, 5.0, 2.5])
    eps, sens = 1.2, 1.0
    rng = np.random.default_rng(5)
    draws = np.array([exponential_mechanism(scores, eps, sens, rng) for _ in range(40_000)])
    assert _selection_pvalue(draws, scores, eps, sens) > ALPHA
    assert _selection_pvalue(draws, scores, eps * 0.7, sens) < ALPHA
    assert _selection_pvalue(draws, scores, eps * 1.3, sens) < ALPHA


def test_restricted_exponential_mechanism_is_the_mechanism_on_the_subset():
    scores = np.array([4.0, 0.0, 1.0, 3.0, 2.0])
    allowed = {1, 2, 4}
    rng = np.random.default_rng(6)
    draws = np.array([exponential_mechanism(scores, 2.0, 1.0, rng, allowed=allowed.__contains__)
                      for _ in range(20_000)])
    assert set(np.unique(draws)) <= allowed
    sub = sorted(allowed)
    p = exponential_probabilities(scores[sub], 2.0, 1.0)
    observed = np.array([(draws == i).sum() for i in sub])
    assert stats.chisquare(observed, p * draws.size).pvalue > ALPHA


def _clopper_pearson(k: int, n: int, conf: float) -> tuple[float, float]:
    lo = stats.beta.ppf(conf / 2, k, n - k + 1) if k > 0 else 0.0
    hi = stats.beta.ppf(1 - conf / 2, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


def _audit_lower_bound(sample_eps: float, trials: int, rng) -> float:
    """Lower confidence bound (1e-6 two-sided per proportion) on the epsilon of selecting
    candidate 0 when its score moves from 1 to 0 and the other's from 0 to 1
    (neighbouring tables: every score moves by at most the sensitivity, 1)."""
    d, d_prime = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    k = sum(exponential_mechanism(d, sample_eps, 1.0, rng) == 0 for _ in range(trials))
    k2 = sum(exponential_mechanism(d_prime, sample_eps, 1.0, rng) == 0 for _ in range(trials))
    lo, _ = _clopper_pearson(k, trials, ALPHA)
    _, hi = _clopper_pearson(k2, trials, ALPHA)
    return math.log(lo / hi)


@pytest.mark.slow
def test_privacy_audit_of_the_selection_step():
    claimed = 1.0
    rng = np.random.default_rng(7)
    assert _audit_lower_bound(claimed, 100_000, rng) <= claimed
    # An under-noised selection (epsilon x4 in the sampler, the charge unchanged) is caught.
    assert _audit_lower_bound(4 * claimed, 100_000, rng) > claimed


# --- releases through the pipeline (gate included) ----------------------------------------------


def _release(tmp_path, data, schema, **kw):
    from dpsynth import pipeline

    cfg = pipeline.ReleaseConfig(data=data, schema=schema, method="pgm", epsilon=1.0, out=tmp_path / "out",
                                 workspace=tmp_path / "ws", **kw)
    return pipeline.run_release(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("select", ["mst", "aim"])
def test_demo_release_passes_the_gate_and_publishes(tmp_path, demo_paths, select):
    import json

    data, schema = demo_paths
    folder = _release(tmp_path, data, schema, params={"select": select})
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["method"] == "pgm"
    assert (folder / "synthetic.parquet").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("schema_file", ["nist.yaml", "nist-fine.yaml"])
@pytest.mark.parametrize("name", ["ma2019", "tx2019", "national2019"])
def test_nist_release_passes_the_gate_and_publishes(tmp_path, shared_data_dir, name, schema_file):
    from pathlib import Path

    schema = Path(__file__).resolve().parents[1] / "schemas" / schema_file
    folder = _release(tmp_path, shared_data_dir / "nist" / f"{name}.csv", schema)
    assert (folder / "synthetic.csv").is_file()


def test_aim_refits_use_refit_iters_and_the_release_uses_iters(monkeypatch):
    """``refit_iters`` caps every refit after an AIM round; ``iters`` caps the released model's fit."""
    import dpsynth.inference.measurement as fitting
    import dpsynth.methods.pgm as pgm_module

    seen: list[int] = []

    def spying(real):
        def spy(*args, options=None, **kw):
            seen.append(options.iters)
            assert options.noise_tol == 0.05  # every fit stops by the same noise rule
            assert options.precision == "double"  # and runs in the arithmetic asked for
            return real(*args, options=options, **kw)
        return spy

    monkeypatch.setattr(pgm_module, "estimate", spying(pgm_module.estimate))
    monkeypatch.setattr(fitting, "estimate", spying(fitting.estimate))
    # the released fit: iters steps under the same stops, then on to the gate's thresholds
    monkeypatch.setattr(pgm_module, "fit_to_target", spying(pgm_module.fit_to_target))
    rng = np.random.default_rng(21)
    t = _table([3, 4, 3, 2], 3000, rng)
    b = Budget(epsilon=2.0, delta=1e-9)
    method = get_method("pgm", {"select": "aim", "units": "8", "refit_iters": "7", "iters": "11",
                                   "noise_tol": "0.05", "precision": "double"})
    m = method.measure(t, Ledger(b, method.plan(t.schema, b)), rng)
    # The first fit is on the 1-way measurements; every later one is a round's refit (a round
    # may choose a 1-way marginal, which meta["selected"] does not list).
    assert len(seen) >= 1 + len(m.meta["selected"]) and len(seen) >= 2 and set(seen[1:]) == {7}
    seen.clear()
    method.synthesize(m, t.schema, 100, rng)
    assert seen == [11]


def _aim_model_cells(params: dict, seed: int) -> tuple[int, set[frozenset[str]]]:
    from dpsynth.inference import build_junction_tree, domain_of

    rng = np.random.default_rng(seed)
    t = _table([4, 4, 4, 4, 4, 4], 20_000, rng)
    b = Budget(epsilon=8.0, delta=1e-9)
    method = get_method("pgm", {"select": "aim", "units": "30", **params})
    m = method.measure(t, Ledger(b, method.plan(t.schema, b)), rng)
    tree = build_junction_tree(domain_of(t.schema), [nm.attrs for nm in m.measured])
    return tree.total_cells(), {frozenset(s) for s in m.meta["selected"]}


def test_aim_keeps_the_model_within_max_model_cells():
    """AIM's size rule: the junction tree of everything measured stays within max_model_cells
    (which bounds every refit's and the final fit's work per iteration). Without the limit the
    same data and seed grow a larger model, so the limit is what holds it."""
    free, _ = _aim_model_cells({"max_model_cells": "10000000"}, seed=22)
    capped, chosen = _aim_model_cells({"max_model_cells": "150"}, seed=22)
    assert free > 150
    assert capped <= 150 and chosen


def test_aim_size_check_triangulates_what_the_next_fit_builds():
    """AIM's model-size limit must judge the tree the refit will build from the measured sets
    plus the candidate. It judged the current tree's cliques plus the candidate, a different
    graph whose greedy triangulation can be smaller: here 201 cells against the 273 the fit
    builds, so a candidate passed a limit of 250 and the refit after measuring it refused the
    model (a crash after the budget was spent, seen on a 30-column table)."""
    from dpsynth.inference.junction_tree import Domain, triangulate
    from dpsynth.methods.pgm import _size_check

    names = tuple(f"c{i}" for i in range(9))
    dom = Domain(names=names, sizes=(5, 4, 4, 4, 3, 6, 4, 2, 2))
    pairs = [(3, 7), (4, 5), (2, 4), (5, 8), (2, 8), (5, 7), (4, 6), (3, 4), (3, 6)]
    measured = [(n,) for n in names] + [(names[a], names[b]) for a, b in pairs]
    cands = [(3, 8), (3, 4)]

    def cells(sets):
        return sum(dom.cells(c) for c in triangulate(dom, sets))

    tree = [tuple(c) for c in triangulate(dom, measured)]
    assert cells(tree + [("c3", "c8")]) == 201 and cells(measured + [("c3", "c8")]) == 273
    ok = _size_check(dom, measured, cands, names, 250.0)
    assert not ok(0)  # the fit would need 273 cells
    assert ok(1)  # already measured: the tree does not change
    assert _size_check(dom, measured, cands, names, 273.0)(0)


def test_aim_judges_each_round_on_the_measured_sets(monkeypatch, demo_paths):
    """Each round's size check gets the measured sets (every 1-way set stays among them),
    not the current tree's maximal cliques, which absorb the 1-way sets of a chosen pair."""
    import dpsynth.methods.pgm as pgm_module
    from dpsynth.rows.encoding import encode, read_table
    from dpsynth.methods.pgm import PgmMethod, PgmParams
    from dpsynth.privacy.budget import Budget, Ledger
    from dpsynth.schema import load_schema

    schema = load_schema(demo_paths[1])
    enc = encode(read_table(demo_paths[0], schema), schema)
    seen: list[list[tuple[str, ...]]] = []
    real = pgm_module._size_check
    monkeypatch.setattr(pgm_module, "_size_check", lambda dom, sets, *a: seen.append(list(sets)) or real(dom, sets, *a))
    method = PgmMethod(PgmParams(select="aim", degree=2, units=12))
    budget = Budget(epsilon=4.0, delta=1e-6)
    m = method.measure(enc, Ledger(budget, method.plan(schema, budget)), np.random.default_rng(0))
    singles = {(n,) for n in schema.names}
    assert len(seen) >= 2 and all(singles <= set(s) for s in seen)
    assert {tuple(a) for a in m.meta["selected"]} <= set(seen[-1]) | {tuple(m.meta["selected"][-1])}


def test_aim_fits_scale_their_steps_with_the_model_and_stay_reproducible(monkeypatch):
    """Every fit is given FIT_CELL_STEPS / units cell-steps (a small model gets up to 1000 float64
    steps, see dpsynth.inference.scaled_options), and the same seed gives the same bytes twice."""
    import sys

    import dpsynth.methods.pgm as pgm_module

    est = sys.modules["dpsynth.inference.estimate"]
    real, used = est.scaled_options, []

    def spy(opts, cells, cliques=0):
        out = real(opts, cells, cliques)
        used.append((opts.cell_steps, out.iters, out.precision))
        return out

    monkeypatch.setattr(est, "scaled_options", spy)

    def release():
        rng = np.random.default_rng(22)
        t = _table([2, 3, 2, 2, 3], 4000, rng)
        b = Budget(epsilon=1.0, delta=1e-9)
        method = get_method("pgm", {"select": "aim", "degree": "2"})
        m = method.measure(t, Ledger(b, method.plan(t.schema, b)), rng)
        codes = method.synthesize(m, t.schema, None, rng).codes
        return codes, [nm.counts.tobytes() for nm in m.measured]

    first = release()
    assert used and all(cs == pgm_module.FIT_CELL_STEPS / 80 for cs, _, _ in used)  # 16 units per column
    assert all(iters == 1000 and prec == "double" for _, iters, prec in used)  # every model here is small
    second = release()
    assert np.array_equal(first[0], second[0]) and first[1] == second[1]
