"""sds's large releases expanded from one fitted pool (issue 25): the switch, the copies'
rounding bound, the same bytes whatever ``chunk_rows`` and runner, and the gate."""

from __future__ import annotations

import dataclasses

import hashlib

import numpy as np
import pytest

from dpsynth import pipeline
from dpsynth.methods.sds import chunked, expand
from dpsynth.methods.sds.refit import table_checks
from dpsynth.pipeline.synthetic import write_synthetic
from dpsynth.schema import schema_from_dict
from tests.sds_cases import sds_measured, tied_pairs_ratios  # noqa: F401 - sds_measured: a fixture

FILES = ("synthetic-codes.parquet", "synthetic.parquet", "synthetic.csv")


def _digests(folder) -> dict[str, str]:
    return {f: hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in FILES}


def _small_chunks(monkeypatch, rows: int = 100) -> None:
    monkeypatch.setattr(chunked, "chunk_rows_for", lambda columns: rows)


def rounding_violations(pool: np.ndarray, weights: np.ndarray, counts: np.ndarray, rows: int,
                        cards, subsets) -> list[tuple]:
    """Cells of the given column subsets where the release (pool record i written
    ``counts[i]`` times) misses its expected count (``rows`` x the cell's share of the
    weights) by as many records as the pool holds in the cell, or more: the bound of a
    rounding that gives each record the floor or the ceiling of its expected copies."""
    bad = []
    w = np.asarray(weights, dtype=np.float64)
    expected_copies = rows * w / w.sum()
    fractional = (np.abs(expected_copies - np.round(expected_copies)) > 1e-9).astype(np.float64)
    if int(counts.sum()) != rows:
        bad.append(("total", int(counts.sum())))
    for sub in subsets:
        shape = tuple(cards[j] for j in sub)
        cell = np.ravel_multi_index(tuple(pool[:, j].astype(np.int64) for j in sub), shape)
        size = int(np.prod(shape))
        got = np.bincount(cell, weights=counts.astype(np.float64), minlength=size)
        want = np.bincount(cell, weights=expected_copies, minlength=size)
        slack = np.bincount(cell, weights=fractional, minlength=size)
        over = np.flatnonzero(np.abs(got - want) > slack + 1e-6)
        bad += [(sub, int(c)) for c in over]
    return bad


def test_copies_are_the_floor_or_ceiling_of_each_share_and_sum_to_the_rows():
    rng = np.random.default_rng(3)
    w = rng.gamma(0.3, size=5_000)
    c = expand.copies(w, 123_457, np.random.default_rng(4))
    e = 123_457 * w / w.sum()
    assert c.sum() == 123_457 and c.dtype == np.int64
    assert np.all((c == np.floor(e)) | (c == np.ceil(e)))


def test_the_switch_is_above_eight_chunks_and_the_pool(monkeypatch):
    per = chunked.chunk_rows_for(20)
    assert per == 65_536 and expand.pool_rows_for(20) == 8 * per
    assert not expand.expands(8 * per, 20) and expand.expands(8 * per + 1, 20)
    assert expand.expands(10_000_000, 20) and not expand.expands(200_000, 20)


def test_below_the_switch_the_release_is_chunked(sds_measured, monkeypatch):
    plan, m = sds_measured
    _small_chunks(monkeypatch, 300)  # 1234 records: 5 chunks, below the switch
    s = plan.method().sampler(m, plan.schema, 1234, np.random.default_rng(5))
    assert isinstance(s, chunked.ChunkedSampler)


def test_the_expanded_release_meets_its_tables_within_the_rounding_bound(sds_measured, monkeypatch):
    """Every measured table (and every 1-way one) of the written release is the weighted
    pool's, up to the rounding: per cell, fewer records off than the pool holds there. A
    multinomial allocation of the copies breaks that bound (the checker can fail)."""
    plan, m = sds_measured
    _small_chunks(monkeypatch)
    rows = 20_000
    s = plan.method().sampler(m, plan.schema, rows, np.random.default_rng(5))
    assert isinstance(s, expand.ExpandedSampler) and s.pool.shape[0] == expand.pool_rows_for(len(plan.schema.columns))
    weights = s.weights
    out = np.concatenate([s.sample(k, np.random.default_rng(0)) for k in (1, 4_999, 10_000, 5_000)])
    assert out.shape == (rows, len(plan.schema.columns))
    with pytest.raises(ValueError, match="more than the release"):
        s.sample(1, np.random.default_rng(0))
    cards = plan.schema.cardinalities
    p = len(cards)
    subsets = [tuple(sorted(plan.schema.index(a) for a in nm.attrs)) for nm in m.measured]
    subsets += [(j,) for j in range(p)]
    assert any(len(x) == 2 for x in subsets)
    # the written records are the pool's records, each as many times as its copies
    expected: dict[bytes, int] = {}
    for r, k in zip(np.ascontiguousarray(s.pool), s.counts):
        expected[r.tobytes()] = expected.get(r.tobytes(), 0) + int(k)
    uniq, n_each = np.unique(np.ascontiguousarray(out), axis=0, return_counts=True)
    assert {np.ascontiguousarray(r).tobytes(): int(k) for r, k in zip(uniq, n_each)} == \
        {b: k for b, k in expected.items() if k > 0}
    assert rounding_violations(s.pool, weights, s.counts, rows, cards, subsets) == []
    wrong = np.random.default_rng(1).multinomial(rows, weights / weights.sum())
    assert rounding_violations(s.pool, weights, wrong, rows, cards, subsets)


def test_the_pool_is_fitted_with_the_release_size_sampling_allowance(sds_measured):
    """The pool's tables are tested as if they were a release of ``rows`` records: the
    estimate's variance is a ``rows``-record sample's, not the pool's."""
    plan, m = sds_measured
    scaled = expand.scaled_measurement(m, 0.01, 1_000_000)
    checks = table_checks(scaled, plan.schema)
    pairs = {nm.attrs: nm for nm in m.measured if len(nm.attrs) == 2}
    c = checks[0]
    assert c.sample_rows == 1_000_000 and c.share == 1.0
    nm = pairs[tuple(plan.schema.columns[j].name for j in c.cols)]
    assert c.stddev == pytest.approx(nm.stddev * 0.01)
    pool = np.zeros((100, len(plan.schema.columns)), dtype=np.int64)
    _, var = c.on(pool).estimate(np.ones(100), 100.0)
    _, var_pool = table_checks(m, plan.schema)[0].on(pool).estimate(np.ones(100), 100.0)
    assert var.max() == pytest.approx(var_pool.max() * 100 / 1_000_000)


def test_same_bytes_whatever_chunk_rows_and_runner(sds_measured, tmp_path, monkeypatch):
    from dpsynth.pipeline.stages import synthesis_runner
    from dpsynth.rows.pool_runner import pool

    plan, m = sds_measured
    _small_chunks(monkeypatch)
    seen = []
    for chunk_rows, use_pool in ((1, False), (97, False), (333, False), (10_000, False), (97, True)):
        out = tmp_path / f"chunk-{chunk_rows}-{use_pool}"
        out.mkdir()
        sampler = plan.method().sampler(m, plan.schema, 2345, plan.rng("synthesize"))
        assert isinstance(sampler, expand.ExpandedSampler) and sampler.sequential
        with synthesis_runner(None, sampler) as chosen:
            assert chosen is None
        if use_pool:
            with pool(2) as runner:
                write_synthetic(out, plan.schema, sampler, plan.rng("synthesize"), plan.rng("decode"),
                                chunk_rows=chunk_rows, block_rows=100, runner=runner, parts=3)
        else:
            written = write_synthetic(out, plan.schema, sampler, plan.rng("synthesize"), plan.rng("decode"),
                                      chunk_rows=chunk_rows, block_rows=100)
            assert written.rows == 2345
        seen.append(_digests(out))
    assert all(d == seen[0] for d in seen[1:])
    other = tmp_path / "other-seed"
    other.mkdir()
    sampler = plan.method().sampler(m, plan.schema, 2345, np.random.default_rng(99))
    write_synthetic(other, plan.schema, sampler, plan.rng("synthesize"), plan.rng("decode"), chunk_rows=97,
                    block_rows=100)
    assert _digests(other)["synthetic-codes.parquet"] != seen[0]["synthetic-codes.parquet"]


@pytest.mark.slow
def test_an_expanded_release_of_tied_pairs_passes_the_gate(monkeypatch):
    """200,000 records from a pool of 20,000 (a sampler that draws every column alone, two
    tied pairs): the fitted pool, expanded ten times, passes the gate on every table.
    Seventeenth round, second part: the weighted pool's gate view has a triple at .985, so the
    pool is rounded to equal records, its columns set and passed (worst .98 -> .88); the
    rounding costs the tied pair c0|c1 its room (.63 -> .88 of its threshold), under the
    pass's margin. Without the pass both tied pairs are under .8."""
    _small_chunks(monkeypatch, 2_500)
    sampler, ratios = tied_pairs_ratios(monkeypatch, expand.ExpandedSampler)
    assert sampler.pool.shape[0] == 20_000 and sampler.info["pool_passed"] == 1
    assert max(ratios.values()) < 0.9, sorted(ratios.items(), key=lambda kv: -kv[1])[:3]
    monkeypatch.setattr(expand, "LAST_PASS", False)
    sampler, ratios = tied_pairs_ratios(monkeypatch, expand.ExpandedSampler)
    assert "pool_passed" not in sampler.info and max(ratios.values()) < 1.0
    assert ratios["c0|c1"] < 0.8 and ratios["c4|c5"] < 0.8


def _scale_forecast(records: float, eps: float = 1.0):
    from benchmarks.scale import schema as scale_schema
    from dpsynth.methods.sds import SdsParams, guard, noise_split
    from dpsynth.privacy.budget import Budget

    sch = scale_schema()
    split = noise_split(SdsParams(), sch, Budget(epsilon=eps, delta=1e-6))
    return guard.forecast(SdsParams(), sch.cardinalities, split, records)


def test_the_guard_accepts_the_10m_scale_table_and_int_like_tables_to_7_5m_and_refuses_int_like_tables_at_10m():
    """Seventeenth round: with the descent's rounds growing with the copies per pool record and
    the last pass on every expanded release, the 10M scale table (forecast 0.00107) published on
    both draws, int7's shape at 7.5M (generator 9106, 0.00108 on its 7.5M-row schema, held out) and int7's generator at
    5M (0.00133) published; int7's shape 9104 and int6's 9105 at 10M (0.00078) were refused by the
    gate after spending. The floor (0.001) accepts the first, refuses the second (and int7's
    generator 9103 at 10M, 0.00093, on which the rounds' cap was set). Below the switch the
    chunked floor is unchanged."""
    from benchmarks.sds_matrix import INTERACTIONS, interaction_table, make_table
    from dpsynth.methods.sds import SdsParams, guard, noise_split
    from dpsynth.privacy.budget import Budget

    assert guard.MIN_PAIR_THRESHOLD_EXPANDED == 0.001
    at_1m = _scale_forecast(1_000_000)
    assert at_1m is not None and at_1m.publishable and at_1m.floor == guard.MIN_PAIR_THRESHOLD_EXPANDED

    def int_forecast(index: int, rows: int, gen: int | None = None):
        gen = 8000 + index if gen is None else gen
        sch = interaction_table(index).schema if rows == INTERACTIONS[index][0] and gen == 8000 + index else make_table(
            2_000, *INTERACTIONS[index][1:5], seed=gen, interactions=INTERACTIONS[index][5])[0]
        split = noise_split(SdsParams(), sch, Budget(epsilon=1.0, delta=1e-6))
        return guard.forecast(SdsParams(), sch.cardinalities, split, rows)

    for index, rows, gen in ((6, 1_000_000, None), (7, 1_000_000, None), (7, 5_000_000, None), (7, 7_500_000, 9106)):
        f = int_forecast(index, rows, gen)  # published with the guard off
        assert f is not None and f.publishable and f.floor == guard.MIN_PAIR_THRESHOLD_EXPANDED, (index, rows, gen)
    at_10m = _scale_forecast(10_000_000)  # published with the guard off, worst pair .898 and .688
    assert at_10m is not None and at_10m.publishable and 0.001 < at_10m.min_pair_threshold < 0.0011
    for index, gen in ((7, 9104), (6, 9105), (7, 9103)):  # refused by the gate after spending (9103: before the cap)
        f = int_forecast(index, 10_000_000, gen)
        assert f is not None and not f.publishable, (index, gen)
    below = _scale_forecast(400_000)  # below the switch: chunked, the chunked floor
    assert below is not None and below.floor == guard.MIN_PAIR_THRESHOLD == 0.0055


def test_a_pool_the_fit_cannot_weight_is_kept_as_drawn_and_reported_off(sds_measured, monkeypatch):
    """Where the weighting fails (weights not finite, as targets the pool cannot reach can
    give), the pool is released as drawn, equal weights, and every table it missed is
    reported still off: never NaN copies."""
    plan, m = sds_measured
    rows = 1_000_000
    pool = np.random.default_rng(2).integers(0, 2, size=(500, len(plan.schema.columns)))
    pool = np.minimum(pool, np.asarray(plan.schema.cardinalities) - 1)
    scaled = expand.scaled_measurement(m, 500 / float(m.records.value), rows)
    monkeypatch.setattr(expand, "fit_weights", lambda *a, **k: (np.full(a[0].shape[0], np.nan), 3))
    fit = expand.fit_pool(pool, scaled, plan.schema, {}, 500.0)
    weights, tables = fit.weights, fit.tables
    assert tables["off"] > 0 and tables["left"] == tables["off"] and tables["refitted"] == 0
    assert np.array_equal(weights, np.ones(500))
    counts = expand.copies(weights, rows, np.random.default_rng(0))
    assert counts.sum() == rows and set(np.unique(counts)) <= {rows // 500, rows // 500 + 1}


def test_a_rejected_latent_pool_changes_no_byte(sds_measured, monkeypatch):
    """The latent-class step (latent.py) draws from a generator of its own: where its pool is
    rejected, the release's pool and copies are those of a sampler without the step."""
    from dpsynth.methods.sds import method as sds_method

    plan, m = sds_measured
    _small_chunks(monkeypatch)
    real = sds_method.latent_pool

    def rejected(pool, checks, ones, cards, rng):
        _, info = real(pool, checks, ones, cards, rng)  # fitted and drawn, then not chosen
        return pool, {**info, "ess_latent": 0}

    monkeypatch.setattr(sds_method, "latent_pool", rejected)
    a = plan.method().sampler(m, plan.schema, 20_000, np.random.default_rng(5))
    assert a.info["ess_sampler"] > 0 and a.info["ess_latent"] == 0
    monkeypatch.setattr(sds_method, "latent_pool", lambda pool, *args: (pool, {}))
    b = plan.method().sampler(m, plan.schema, 20_000, np.random.default_rng(5))
    assert np.array_equal(a.pool, b.pool) and np.array_equal(a.counts, b.counts)


def _parity_case():
    """A pool holding each of the 8 codes of three binary columns 500 times (every pair and
    column exactly as measured), a measured triple that puts 4/5 of the records on the cells
    of even parity (pairs uniform), and the checks: three pairs, then the triple."""
    from dpsynth.methods.sds.refit import TableCheck

    pool = np.asfortranarray(np.repeat(np.array(list(np.ndindex(2, 2, 2))), 500, axis=0))
    even = (np.array(list(np.ndindex(2, 2, 2))).sum(axis=1) % 2 == 0)
    triple = np.where(even, 800.0, 200.0)

    def check(cols, noisy):
        return TableCheck(cols=cols, shape=(2,) * len(cols), cells=np.zeros(0, dtype=np.int64), noisy=noisy,
                          suppressed=np.zeros(noisy.size, dtype=bool), threshold=0.0, stddev=5.0, sample_rows=40_000.0)

    checks = [check(c, np.full(4, 1000.0)) for c in ((0, 1), (0, 2), (1, 2))] + [check((0, 1, 2), triple)]
    return pool, checks, {j: np.array([2000.0, 2000.0]) for j in range(3)}, triple


def test_the_last_pass_fits_a_triple_left_off_and_keeps_the_pairs():
    """A triple the fit left off (the pairs are met) is fitted by the last pass, the pairs stay
    within their noise; with no rounds the weights come back unchanged (docs: thirteenth round,
    second part). Only tables more than ``ratio`` times off are targeted."""
    from dpsynth.methods.sds.refit import misfit_tables

    pool, checks, ones, triple = _parity_case()
    w = np.ones(pool.shape[0])
    off = misfit_tables(checks, w, 4000.0, pool=pool)
    assert off == [3]
    fitted, left = expand.fit_off_tables(pool, checks, w, ones, 4000.0, rounds=5)
    assert left == [] and fitted is not w
    got = np.bincount(checks[3].on(pool).cells, weights=fitted, minlength=8)
    assert np.abs(got - triple).max() < 30.0  # was 300 off in every cell
    for c in checks[:3]:
        assert np.abs(np.bincount(c.on(pool).cells, weights=fitted, minlength=4) - 1000.0).max() < 1.0
    same, still = expand.fit_off_tables(pool, checks, w, ones, 4000.0, rounds=0)
    assert same is w and still == off
    ratios = expand.misfit_ratios(pool, checks, w, 4000.0)
    assert max(ratios[:3]) <= 1.0 < ratios[3]
    same, still = expand.fit_off_tables(pool, checks, w, ones, 4000.0, rounds=5, ratio=ratios[3])  # none above
    assert same is w and still == off


def test_fit_pool_runs_the_last_pass_on_the_tables_its_fit_left(monkeypatch):
    """fit_pool hands the tables its fit left off to the last pass (here a fit that returns
    the pool as drawn stands for one that spent its passes on the pairs)."""
    pool, checks, ones, _ = _parity_case()
    schema = schema_from_dict({"name": "bits", "columns": [
        {"name": f"b{j}", "type": "categorical", "values": ["0", "1"]} for j in range(3)]})
    monkeypatch.setattr(expand, "table_checks", lambda m, s: checks)
    monkeypatch.setattr(expand, "fit_weights", lambda pool, checks, *a, **k: (np.ones(pool.shape[0]), len(checks)))
    tables = expand.fit_pool(pool, None, schema, ones, 4000.0).tables
    assert tables == {"off": 1, "refitted": 3, "left": 0}
    monkeypatch.setattr(expand, "OFF_ROUNDS", 0)
    tables = expand.fit_pool(pool, None, schema, ones, 4000.0).tables
    assert tables["left"] == 1


def test_fit_pool_fits_the_pairs_alone_before_the_last_pass(monkeypatch):
    """The pool's fit is to the 2-way tables alone (the fit to every table, which the 10M scale
    table then threw away, took most of its CPU); every table only where that fit fails."""
    pool, checks, ones, _ = _parity_case()
    schema = schema_from_dict({"name": "bits", "columns": [
        {"name": f"b{j}", "type": "categorical", "values": ["0", "1"]} for j in range(3)]})
    calls = []

    def fit(pool, checks, *a, **k):
        calls.append(sorted({len(c.cols) for c in checks}))
        return (np.full(pool.shape[0], np.nan) if len(calls) == 1 and fail else np.ones(pool.shape[0])), len(checks)

    monkeypatch.setattr(expand, "table_checks", lambda m, s: checks)
    monkeypatch.setattr(expand, "fit_weights", fit)
    fail = False
    expand.fit_pool(pool, None, schema, ones, 4000.0)
    assert calls == [[2]]
    calls.clear()
    fail = True  # the pairs' weights not finite: every table
    expand.fit_pool(pool, None, schema, ones, 4000.0)
    assert calls == [[2], [2, 3]]


def _odd_pool_case():
    """The parity case with a pool that holds only the four cells of odd parity (every pair
    still uniform), while the measured triple puts 4/5 of the records on the even ones: no
    weighting of this pool reaches the triple."""
    pool, checks, ones, triple = _parity_case()
    odd = np.asfortranarray(pool[pool.sum(axis=1) % 2 == 1])
    return np.asfortranarray(np.concatenate([odd, odd])), checks, ones, triple


def test_the_pool_update_reaches_cells_the_pool_never_drew(monkeypatch):
    """Fourteenth round: where the fitted pool leaves a table off because the pool has no
    record in the cells its measurement fills, ``update_pool`` moves records there (the
    weights cannot: ``fit_off_tables`` leaves the triple off) and keeps the pairs and columns;
    where no table is more than ``UPDATE_RATIO`` times off, or more than ``UPDATE_MAX_TABLES``
    tables are off (the held-out 10M scale table, seed 1: the update ran past 5 CPU minutes
    and 4.9 GB), it returns None."""
    from dpsynth.methods.sds import update
    from dpsynth.methods.sds.refit import misfit_tables

    pool, checks, ones, triple = _odd_pool_case()
    schema = schema_from_dict({"name": "bits", "columns": [
        {"name": f"b{j}", "type": "categorical", "values": ["0", "1"]} for j in range(3)]})
    w = np.ones(pool.shape[0])
    assert misfit_tables(checks, w, 4000.0, pool=pool) == [3]
    _, left = expand.fit_off_tables(pool, checks, w, ones, 4000.0, rounds=5)
    assert left == [3]  # reweighting cannot put mass where the pool has no record
    monkeypatch.setattr(update, "table_checks", lambda m, s, lengths=None: checks)
    monkeypatch.setattr(expand, "table_checks", lambda m, s: checks)
    worst = max(expand.misfit_ratios(pool, checks, w, 4000.0))
    monkeypatch.setattr(expand, "UPDATE_RATIO", worst)  # not more than the trigger off: not run
    assert expand.update_pool(pool, w, None, schema, ones, 4000.0, np.random.default_rng(3)) is None
    monkeypatch.setattr(expand, "UPDATE_RATIO", 2.0)
    monkeypatch.setattr(expand, "UPDATE_MAX_TABLES", 0)  # more tables off than the record update may take on
    monkeypatch.setattr(expand, "POOL_DESCENT", False)
    assert expand.update_pool(pool, w, None, schema, ones, 4000.0, np.random.default_rng(3)) is None
    for descent_on, cap in ((False, 1), (True, 0)):  # the descent (fifteenth round) has no such cap
        monkeypatch.setattr(expand, "POOL_DESCENT", descent_on)
        monkeypatch.setattr(expand, "UPDATE_MAX_TABLES", cap)
        out = expand.update_pool(pool, w, None, schema, ones, 4000.0, np.random.default_rng(3))
        assert out is not None and out.shape == pool.shape
        assert misfit_tables(checks, np.ones(out.shape[0]), 4000.0, pool=np.asfortranarray(out)) == []
        got = np.bincount(checks[3].on(out).cells, minlength=8)
        assert np.abs(got - triple).max() < 60.0  # was 800 off on the even cells
        for j in range(3):
            assert np.array_equal(np.bincount(out[:, j], minlength=2), [2000, 2000])
    fitted = np.asfortranarray(np.repeat(np.array(list(np.ndindex(2, 2, 2))), (triple / 2).astype(int), axis=0))
    assert expand.update_pool(fitted, np.ones(fitted.shape[0]), None, schema, ones, 4000.0,
                              np.random.default_rng(3)) is None


def test_the_pool_update_runs_only_on_tables_left_off_and_draws_its_own_generator(sds_measured, monkeypatch):
    """The sampler updates the pool only when its fit leaves tables off, from a generator of its
    own (part ``UPDATE_PART`` of the release key): an update that finds nothing off, and a fit
    that leaves nothing off, change no byte; an update that runs replaces the pool with its
    equally weighted records."""
    from dpsynth.methods.sds import method as sds_method

    plan, m = sds_measured
    _small_chunks(monkeypatch)
    real_fit, real_update = sds_method.fit_pool, sds_method.update_pool
    seen = []

    def left_off(*args, **kwargs):
        fit = real_fit(*args, **kwargs)
        return dataclasses.replace(fit, tables={**fit.tables, "left": 1})

    def nothing_off(pool, weights, scaled, schema, ones, total, rng, **kwargs):
        seen.append(rng.random())  # consumes its generator, then finds nothing off
        return None

    monkeypatch.setattr(sds_method, "fit_pool", left_off)
    monkeypatch.setattr(sds_method, "update_pool", nothing_off)
    a = plan.method().sampler(m, plan.schema, 20_000, np.random.default_rng(5))
    assert len(seen) == 1 and "pool_updated" not in a.info
    monkeypatch.setattr(expand, "POOL_UPDATE", False)
    b = plan.method().sampler(m, plan.schema, 20_000, np.random.default_rng(5))
    assert len(seen) == 1 and np.array_equal(a.pool, b.pool) and np.array_equal(a.counts, b.counts)
    monkeypatch.setattr(expand, "POOL_UPDATE", True)
    monkeypatch.setattr(sds_method, "update_pool", lambda pool, *a, **k: pool[::-1].copy())
    c = plan.method().sampler(m, plan.schema, 20_000, np.random.default_rng(5))
    assert c.info["pool_updated"] == 1 and np.array_equal(c.pool, b.pool[::-1])
    assert np.array_equal(c.weights, np.ones(c.pool.shape[0])) and c.counts.sum() == 20_000
    assert c.counts.max() - c.counts.min() <= 1  # equal weights: every record as often, up to the rounding
