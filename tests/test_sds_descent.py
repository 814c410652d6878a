"""``sds``'s record update as a descent on one misfit (dpsynth/methods/sds/descent.py).

The defect it addresses: the table-by-table update (update.py) moves records for one table
at a time, and with many tables off the moves for one table break others: it does not
converge (docs/sds-generalisation.md, fourteenth round, second part). The descent accepts
only moves that lower one objective over every table, so it cannot diverge.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.gate.checks import _marginal_checks
from dpsynth.methods import get_method
from dpsynth.methods.sds import descent, expand, update
from dpsynth.methods.sds.refit import misfit_ratios, misfit_tables, table_checks
from dpsynth.privacy.budget import Budget, Ledger
from dpsynth.rows.encoding import EncodedTable
from dpsynth.schema import schema_from_dict

P = 8


def _schema():
    return schema_from_dict({"name": "chain", "columns": [
        {"name": f"c{j}", "type": "categorical", "values": [f"v{v}" for v in range(4)]} for j in range(P)]})


def _chain(n: int, seed: int) -> np.ndarray:
    """c_j = c_{j-1} + c_{j-2} + c_{j-3} mod 4 on 95% of the records (j >= 2): many
    overlapping triples far from what independent columns give."""
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 4, size=(n, P))
    for j in range(2, P):
        c[:, j] = np.where(rng.random(n) < 0.95, (c[:, j - 1] + c[:, j - 2] + c[:, max(j - 3, 0)]) % 4, c[:, j])
    return c.astype(np.uint8)


@pytest.fixture(scope="module")
def chain_case():
    """The chain table measured by sds (epsilon 2), and independent uniform records: every
    triple of the chain far off."""
    schema = _schema()
    n = 20_000
    method = get_method("sds", {})
    budget = Budget(epsilon=2.0, delta=1e-6)
    m = method.measure(EncodedTable(schema, _chain(n, 5)), Ledger(budget, method.plan(schema, budget)),
                       np.random.default_rng(0))
    ones = {schema.index(nm.attrs[0]): np.asarray(nm.counts, dtype=np.float64) for nm in m.measured if len(nm.attrs) == 1}
    raw = np.random.default_rng(1).integers(0, 4, size=(n, P))
    return schema, m, ones, float(m.records.value), raw


def _gate(schema, m, codes) -> float:
    gate = _marginal_checks(EncodedTable(schema, codes.astype(np.uint8)), m, float(m.records.value), {})
    return max(e["tvd"] / e["threshold"] for e in gate.errors)


def test_the_descent_never_raises_its_objective(chain_case, monkeypatch):
    """J after every batch is at most J before it (a batch whose moves together raised it
    is undone), over a case with most tables off; and it falls far overall."""
    schema, m, ones, total, raw = chain_case
    steps = []
    real_try = descent._try

    def watched(obj, *args):
        before = obj.value
        kept = real_try(obj, *args)
        exact = obj.j(np.bincount(obj.table, weights=obj.terms, minlength=len(obj.checks)))
        steps.append((before, obj.value, exact, kept))
        return kept

    monkeypatch.setattr(descent, "_try", watched)
    checks = table_checks(m, schema)
    assert len(misfit_tables(checks, np.ones(raw.shape[0]), total, pool=np.asfortranarray(raw))) > 40
    _, info = descent.descend(raw, checks, ones, total, schema.cardinalities, np.random.default_rng(2))
    assert len(steps) > 20
    for before, after, exact, _ in steps:
        assert after <= before + 1e-9 * before
        assert abs(exact - after) <= 1e-6 * max(exact, 1.0)  # the tracked J is the true one
    assert info["j_after"] < 0.01 * info["j_before"]


def test_the_descent_publishes_overlapping_triples_the_table_by_table_update_leaves_off(chain_case, monkeypatch):
    """Six overlapping triples (and their pairs) off: the table-by-table update oscillates
    and leaves tables far off (the gate refuses at about 10 times its threshold); the descent
    brings every table within its noise and the gate passes. With up to 30 rounds: it stops
    after 14 here (every table under ``STOP_RATIO``); the product's 8 (``ROUNDS``) bound its
    cost on a 524,288-record pool and leave this case at 44 tables off, the gate at 3.5."""
    monkeypatch.setattr(descent, "ROUNDS", 30)
    schema, m, ones, total, raw = chain_case
    checks = table_checks(m, schema)
    old, _ = update.update_tables(raw, m, schema, ones, total, np.random.default_rng(3))
    assert len(misfit_tables(checks, np.ones(raw.shape[0]), total, pool=np.asfortranarray(old))) > 20
    assert _gate(schema, m, old) > 2.0
    out, _ = descent.descend(raw, checks, ones, total, schema.cardinalities, np.random.default_rng(3))
    assert misfit_tables(checks, np.ones(out.shape[0]), total, pool=np.asfortranarray(out)) == []
    assert _gate(schema, m, out) < 1.0


def test_the_descent_rewrites_a_column_into_a_cell_no_record_had():
    """One triple whose measured mass sits on cells the records never hold (c2 = c0 xor c1
    never drawn): only a rewrite of a column can reach them; the descent does, and the pairs
    and columns stay within their noise."""
    from dpsynth.methods.sds.refit import TableCheck

    rng = np.random.default_rng(4)
    n = 4000
    raw = rng.integers(0, 2, size=(n, 3))
    raw[:, 2] = 1 - (raw[:, 0] ^ raw[:, 1])  # odd parity only
    cells = list(np.ndindex(2, 2, 2))
    triple = np.array([800.0 if (a ^ b) == c else 200.0 for a, b, c in cells])  # mostly even parity
    mk = lambda cols, shape, noisy: TableCheck(cols=cols, shape=shape, cells=np.zeros(0, dtype=np.int64),
                                               noisy=noisy, suppressed=np.zeros(noisy.size, dtype=bool),
                                               threshold=0.0, stddev=5.0)
    checks = [mk((0, 1), (2, 2), np.full(4, 1000.0)), mk((0, 2), (2, 2), np.full(4, 1000.0)),
              mk((1, 2), (2, 2), np.full(4, 1000.0)), mk((0, 1, 2), (2, 2, 2), triple)]
    ones = {j: np.array([2000.0, 2000.0]) for j in range(3)}
    even = lambda x: int(np.sum((x[:, 0] ^ x[:, 1]) == x[:, 2]))
    assert even(raw) == 0
    out, _ = descent.descend(raw, checks, ones, 4000.0, (2, 2, 2), np.random.default_rng(5))
    assert even(out) > 2800  # the truth: 3,200
    assert max(misfit_ratios(np.asfortranarray(out), checks, np.ones(n), 4000.0)) < 1.0
    for j in range(3):
        assert np.array_equal(np.bincount(out[:, j], minlength=2), [2000, 2000])


def test_the_descent_same_bytes_for_a_seed_and_exact_one_way_tables(chain_case):
    """The same generator gives the same records; another gives others; every column's counts
    are the 1-way targets rounded to whole records (floor or ceiling of each share)."""
    schema, m, ones, total, raw = chain_case
    checks = table_checks(m, schema)
    a, _ = descent.descend(raw, checks, ones, total, schema.cardinalities, np.random.default_rng(7))
    b, _ = descent.descend(raw, checks, ones, total, schema.cardinalities, np.random.default_rng(7))
    c, _ = descent.descend(raw, checks, ones, total, schema.cardinalities, np.random.default_rng(8))
    assert a.tobytes() == b.tobytes() and a.tobytes() != c.tobytes()
    n = raw.shape[0]
    for j, t in ones.items():
        share = np.clip(t, 0, None) / np.clip(t, 0, None).sum() * n
        got = np.bincount(a[:, j], minlength=t.size)
        assert got.sum() == n and np.all(got >= np.floor(share)) and np.all(got <= np.ceil(share))


def test_the_pool_update_is_the_descent_with_no_cap_on_tables_off(monkeypatch):
    """Above the switch the pool is updated by the descent (``expand.POOL_DESCENT``), whatever
    the number of tables off (``UPDATE_MAX_TABLES`` bounds the table-by-table update only)."""
    calls = []
    monkeypatch.setattr(descent, "descend", lambda records, *a: (calls.append(records.shape) or records[::-1].copy(), {}))
    monkeypatch.setattr(expand, "table_checks", lambda m, s: ["t"])
    monkeypatch.setattr(expand, "misfit_ratios", lambda *a: [3.0])
    monkeypatch.setattr(expand, "UPDATE_MAX_TABLES", 0)
    pool = np.arange(12).reshape(6, 2) % 3
    schema = schema_from_dict({"name": "two", "columns": [
        {"name": f"b{j}", "type": "categorical", "values": ["0", "1", "2"]} for j in range(2)]})
    out = expand.update_pool(pool, np.ones(6), None, schema, {}, 6.0, np.random.default_rng(0))
    assert calls == [(6, 2)] and out is not None and out.shape == (6, 2)
    monkeypatch.setattr(expand, "POOL_DESCENT", False)
    assert expand.update_pool(pool, np.ones(6), None, schema, {}, 6.0, np.random.default_rng(0)) is None


def test_the_descent_ends_when_no_record_can_leave_a_table_off():
    """A table off only by cells short of records (its noisy counts twice the records': no
    record's leaving lowers J) offers no move; the descent ends its round and returns (it
    drew tables for ever before ``EMPTY_DRAWS``) with the records as they were."""
    from dpsynth.methods.sds.refit import TableCheck

    raw = np.random.default_rng(0).integers(0, 2, size=(1000, 2))
    check = TableCheck(cols=(0, 1), shape=(2, 2), cells=np.zeros(0, dtype=np.int64), noisy=np.full(4, 500.0),
                       suppressed=np.zeros(4, dtype=bool), threshold=0.0, stddev=1.0)
    out, info = descent.descend(raw, [check], {}, 1000.0, (2, 2), np.random.default_rng(1))
    assert info["rounds"] == 1 and info["batches"] == 0 and np.array_equal(out, raw)


def test_the_descent_trace_is_the_objective_recomputed_from_scratch_and_changes_nothing(chain_case):
    """Each round's trace row (J, tables above ``STOP_RATIO`` and above 1, the worst ratio)
    equals an :class:`~dpsynth.methods.sds.descent.Objective` built afresh on the records as
    they are after that round; looking after each round leaves the same bytes; the stop that
    fired is named."""
    schema, m, ones, total, raw = chain_case
    checks = table_checks(m, schema)
    seen = []

    def look(rnd, codes, obj, one_checks, rng):
        fresh = descent.Objective([*checks, *one_checks], codes, total, len(checks))
        r = fresh.ratio[: fresh.measured]
        seen.append((rnd, fresh.value, int((r > descent.STOP_RATIO).sum()), int((r > 1).sum()), float(r.max())))

    out, info = descent.descend(raw, checks, ones, total, schema.cardinalities, np.random.default_rng(2), after_round=look)
    plain, plain_info = descent.descend(raw, checks, ones, total, schema.cardinalities, np.random.default_rng(2))
    assert np.array_equal(out, plain) and info["j"] == plain_info["j"]
    assert len(info["trace"]) == info["rounds"] == len(seen) >= 3
    for row, (rnd, j, above, off, worst) in zip(info["trace"], seen):
        assert row["round"] == rnd
        assert abs(row["j"] - j) <= 1e-6 * max(j, 1.0)
        assert row["above_stop"] == above and row["above_1"] == off
        assert abs(row["worst"] - worst) <= 1e-9 * max(worst, 1.0)
        assert row["accepted"] > 0 and row["cpu_s"] >= 0
    js = [row["j"] for row in info["trace"]]
    assert all(b <= a for a, b in zip(js, js[1:]))
    assert sum(row["accepted"] for row in info["trace"]) == info["accepted"]
    assert info["stop"] in ("rounds", "min_gain", "stop_ratio")
    if info["rounds"] == descent.ROUNDS:
        assert info["trace"][-1]["above_stop"] > 0  # the 8-round cap stops this case short


def test_the_round_cap_grows_with_the_square_of_the_copies_above_reach_copies():
    """8 rounds up to ``REACH_COPIES`` release records per record (1M-5M releases from the
    524,288-record pool: 1.9-9.5 copies), then 8 x (copies / REACH_COPIES)^2 rounds."""
    assert descent.REACH_COPIES == 10.0
    for copies in (1.0, 1.9, 5.7, 9.54, 10.0):
        assert descent.round_cap(copies) == descent.ROUNDS == 8
    assert descent.round_cap(10_000_000 / 524_288) == 30  # 19.07 copies: 29.1, up
    assert descent.round_cap(7_500_000 / 524_288) == 17  # 14.3 copies: 16.4, up
    assert descent.round_cap(20.0) == 32


def test_records_standing_for_many_release_records_get_more_rounds(chain_case, monkeypatch):
    """Records standing for 20 release records each (the checks' ``sample_rows``, as the
    expanded pool's at 10M rows): the cap is 32 rounds, the descent goes past 8 and ends
    with fewer tables off and a lower J than the same run capped at 8 (what it did before
    the cap grew with the copies); at 5 copies it is the 8-round descent to the byte."""
    import dataclasses

    schema, m, ones, total, raw = chain_case
    n = raw.shape[0]
    many = [dataclasses.replace(c, sample_rows=20.0 * n) for c in table_checks(m, schema)]
    out, info = descent.descend(raw, many, ones, total, schema.cardinalities, np.random.default_rng(4))
    assert info["cap"] == 32 and info["rounds"] > descent.ROUNDS
    with monkeypatch.context() as mp:
        mp.setattr(descent, "REACH_COPIES", float("inf"))
        short, sinfo = descent.descend(raw, many, ones, total, schema.cardinalities, np.random.default_rng(4))
    assert sinfo["rounds"] == descent.ROUNDS and sinfo["stop"] == "rounds"
    assert sinfo["trace"][-1]["above_1"] > 0
    assert info["trace"][-1]["above_1"] < sinfo["trace"][-1]["above_1"]
    assert info["j_after"] < 0.5 * sinfo["j_after"]
    assert info["j"][: descent.ROUNDS] == sinfo["j"]  # the same first 8 rounds
    few = [dataclasses.replace(c, sample_rows=5.0 * n) for c in table_checks(m, schema)]
    a, ainfo = descent.descend(raw, few, ones, total, schema.cardinalities, np.random.default_rng(4))
    with monkeypatch.context() as mp:
        mp.setattr(descent, "REACH_COPIES", float("inf"))
        b, _ = descent.descend(raw, few, ones, total, schema.cardinalities, np.random.default_rng(4))
    assert ainfo["cap"] == descent.ROUNDS and np.array_equal(a, b)
