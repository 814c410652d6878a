"""The method conformance suite: every registered method, the same contract.

Parametrised over :data:`dpsynth.methods.METHODS`, so a method registered later is
checked by registering it. Each method runs on one tiny generated table whose raw
input holds special values in every column type. What is checked (docs/measurement.md):

* the plan fits the budget (the Ledger accepts it; its total epsilon is within budget);
* ``measure`` spends exactly the plan: every planned stage, nothing else, and the
  measurement's charges are those stages;
* the synthetic output is valid under the schema: row count as asked, every code inside
  its column's cardinality, the decoded table passes the record checks;
* every stated noise scale passes a variance test: repeated measurements of one fixed
  table (fixed seeds), noise = published value - true value on the cells the contract
  says are plain noisy counts (thresholded marginals: cells far above the threshold;
  derived cells never), pooled chi-square at alpha 1e-6; a wrong scale (x0.7, x1.3)
  put into a method's sampler makes it fail (:func:`test_a_wrong_noise_scale_turns_the_suite_red`);
* the measurement survives save/load; the same seed gives the same bytes;
* special raw values (NaN, inf, -inf, None, empty string, unseen category, out of
  range, very long strings) are mapped by encode, never raised.

A new method adds an entry to :data:`PARAMS` when its defaults are slow on a tiny
table or need an opt-in (the entry says why); otherwise it runs with its defaults.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dpsynth.rows.counting import marginal_counts
from dpsynth.rows.encoding import EncodedTable, decode, encode
from dpsynth.measurement import Measurement
from dpsynth.methods import METHODS, get_method
from dpsynth.privacy.budget import Budget, Ledger, total_epsilon
from dpsynth.schema import schema_from_dict
from dpsynth.gate.validation import record_checks
from noise_stats import ALPHA, pooled_pvalue

# Parameters that make each method run in about a second on the tiny table.
PARAMS: dict[str, dict[str, str]] = {
    "marginals": {},
    "sds": {"reporting_length": "2"},
    # Theorem 12.2 certifies no row of a table this small: the suite runs it in its
    # stated heuristic mode (the measurement then says "not DP"); d=1 keeps it fast.
    "private-sampling": {"k": "40", "d": "1", "m": "64", "heuristic": "true"},
    # NOT DP: needs its explicit opt-in; 5 records per block on the 400-row table.
    "microaggregation": {"anonymous_only": "true", "group_size": "5"},
    "microaggregation-dp": {},
}
BUDGET = Budget(epsilon=4.0, delta=1e-6)
REPS = 100  # repeated measurements of one table for the variance test
SAFE_SDS = 8.0  # a thresholded cell is tested when its true count exceeds threshold + 8 stddev

SCHEMA = schema_from_dict({
    "name": "conformance",
    "columns": [
        {"name": "colour", "type": "categorical", "values": ["red", "green", "blue"], "other": True,
         "missing": [""]},
        {"name": "size", "type": "categorical", "values": ["s", "m", "l"]},
        {"name": "age", "type": "numeric", "bounds": [0, 100], "bins": 4, "integer": True, "missing": ["NA"]},
        {"name": "score", "type": "numeric", "bounds": [0.0, 1.0], "bins": 3},
    ],
})
LONG = "x" * 10_000
# Row-level oddities of the raw input, per column type (text as a CSV gives it; floats
# as a typed Parquet column gives them).
SPECIAL_TEXT = ["", None, "unseen", LONG, "NaN", "inf", "-inf", " red ", "RED", "0"]
SPECIAL_NUMBER_TEXT = ["", None, "NaN", "inf", "-inf", "-5", "1e308", "abc", LONG, "100.5"]
SPECIAL_FLOAT = [math.nan, math.inf, -math.inf, None, -0.5, 2.0, 1e308, -1e308, 0.5, 1.0]


def _raw_table(n: int = 400, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    colour = rng.choice(["red", "green", "blue"], n, p=[0.5, 0.3, 0.2]).tolist()
    size = np.where(rng.random(n) < 0.7, np.array(["s", "m", "l"])[np.array([0, 1, 2])[rng.integers(0, 2, n)]],
                    rng.choice(["s", "m", "l"], n)).tolist()
    age = rng.integers(0, 101, n).astype(str).tolist()
    score = rng.random(n).tolist()
    return pa.table({
        "colour": pa.array(colour + SPECIAL_TEXT, type=pa.string()),
        "size": pa.array(size + SPECIAL_TEXT, type=pa.string()),
        "age": pa.array(age + SPECIAL_NUMBER_TEXT, type=pa.string()),
        "score": pa.array(score + SPECIAL_FLOAT, type=pa.float64()),
    })


@pytest.fixture(scope="module")
def table() -> EncodedTable:
    return encode(_raw_table(), SCHEMA)


def _method(name: str):
    return get_method(name, PARAMS.get(name, {}))


def _measure(name: str, table: EncodedTable, seed: int) -> tuple[Measurement, Ledger]:
    method = _method(name)
    ledger = Ledger(BUDGET, method.plan(SCHEMA, BUDGET))
    return method.measure(table, ledger, np.random.default_rng(seed)), ledger


NAMES = sorted(METHODS)


# --- the contract ----------------------------------------------------------------------


def test_every_registered_method_is_checked():
    assert set(NAMES) == set(METHODS)
    for name, cls in METHODS.items():
        assert cls.name == name and hasattr(cls, "takes_rows_as") and hasattr(cls, "params_type")


@pytest.mark.parametrize("name", NAMES)
def test_a_measurement_never_claims_more_than_its_class_guarantee(name, table):
    """``dpsynth methods`` prints the class's guarantee: a release of the method may state
    less (a heuristic run), never DP where the class says NOT DP, nor another relation."""
    declared = METHODS[name].guarantee
    m, _ = _measure(name, table, 0)
    if m.statement.differentially_private:
        assert declared.differentially_private and m.statement.neighbours == declared.neighbours
    if not declared.differentially_private:
        assert m.statement.kind == declared.kind


def test_a_method_class_without_a_guarantee_is_refused():
    from dpsynth.methods.base import MethodBase

    with pytest.raises(TypeError, match="must declare guarantee"):
        type("NoStatement", (MethodBase,), {"name": "no-statement"})


@pytest.mark.parametrize("name", NAMES)
def test_special_raw_values_are_mapped_never_raised(name):
    raw = _raw_table()
    enc = encode(raw, SCHEMA)  # must not raise
    assert enc.n == raw.num_rows
    cards = np.asarray(SCHEMA.cardinalities)
    assert enc.codes.min() >= 0 and np.all(enc.codes.max(axis=0) < cards)
    special = enc.codes[-len(SPECIAL_TEXT):]
    for j, col in enumerate(SCHEMA.columns):  # a missing cell maps to the missing code where there is one
        if col.missing_code is not None:
            assert col.missing_code in special[:, j]
    m, _ = _measure(name, enc, 0)  # and the method runs on them
    _method(name).synthesize(m, SCHEMA, 10, np.random.default_rng(0))


@pytest.mark.parametrize("name", NAMES)
def test_plan_fits_the_budget(name):
    plan = _method(name).plan(SCHEMA, BUDGET)
    assert plan, "a plan states at least one charge"
    Ledger(BUDGET, plan)  # refuses a plan over budget
    assert total_epsilon(plan, BUDGET.delta) <= BUDGET.epsilon * (1 + 1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_measure_spends_exactly_the_plan(name, table):
    m, ledger = _measure(name, table, 1)
    planned = [c.stage for c in ledger.planned]
    assert sorted(c.stage for c in ledger.spent) == sorted(planned)
    assert sorted(c.stage for c in m.charges) == sorted(planned)
    planned_by_stage = {c.stage: c.to_dict() for c in ledger.planned}
    assert [c.to_dict() for c in m.charges] == [planned_by_stage[c.stage] for c in m.charges]


@pytest.mark.parametrize("name", NAMES)
def test_output_is_valid_under_the_schema(name, table):
    m, _ = _measure(name, table, 2)
    rng = np.random.default_rng(3)
    for rows in (123, None):
        out = _method(name).synthesize(m, SCHEMA, rows, rng)
        assert out.codes.shape[1] == len(SCHEMA.columns)
        if rows is not None:
            assert out.n == rows
        if out.n:
            assert out.codes.min() >= 0
            assert np.all(out.codes.max(axis=0) < np.asarray(SCHEMA.cardinalities))
        checks = record_checks(decode(out, rng), SCHEMA, out.n)
        assert all(c["success"] for c in checks), [c for c in checks if not c["success"]]


@pytest.mark.parametrize("name", NAMES)
def test_measurement_survives_save_and_load(name, table, tmp_path):
    m, _ = _measure(name, table, 4)
    m.save(tmp_path)
    back = Measurement.load(tmp_path)
    assert back.method == m.method and dict(back.params) == dict(m.params)
    assert [c.to_dict() for c in back.charges] == [c.to_dict() for c in m.charges]
    assert [x.to_dict() for x in back.measured] == [x.to_dict() for x in m.measured]
    for a, b in zip(back.measured, m.measured):
        np.testing.assert_array_equal(a.counts, b.counts)
    assert (back.records is None) == (m.records is None)
    if m.records is not None:
        assert back.records.to_dict() == m.records.to_dict()
    assert back.statement == m.statement
    assert sorted(back.tables) == sorted(m.tables)
    for k, df in m.tables.items():
        assert back.tables[k].equals(df.reset_index(drop=True))
    back.save(tmp_path / "again")  # and what was loaded saves to the same bytes
    for f in sorted(p.name for p in tmp_path.iterdir() if p.is_file()):
        assert (tmp_path / f).read_bytes() == (tmp_path / "again" / f).read_bytes(), f


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_gives_the_same_bytes(name, table, tmp_path):
    outs = []
    for i in range(2):
        m, _ = _measure(name, table, 5)
        m.save(tmp_path / str(i))
        outs.append(_method(name).synthesize(m, SCHEMA, 50, np.random.default_rng(6)).codes)
    assert _files(tmp_path / "0") == _files(tmp_path / "1")
    assert outs[0].dtype == outs[1].dtype and outs[0].tobytes() == outs[1].tobytes()


# --- the stated noise ------------------------------------------------------------------


def _truth(table: EncodedTable, attrs: tuple[str, ...]) -> np.ndarray:
    idx = [SCHEMA.index(a) for a in attrs]
    return marginal_counts(table.codes, SCHEMA.cardinalities, idx).astype(np.float64)


def _tested_cells(nm, truth: np.ndarray) -> np.ndarray:
    """Flat indices of the cells the contract says are plain noisy counts."""
    keep = np.ones(truth.size, dtype=bool)
    keep[list(nm.derived)] = False
    if nm.threshold is not None:
        keep &= truth.ravel() > nm.threshold + SAFE_SDS * nm.stddev
    return np.flatnonzero(keep)


def stated_noise(name: str, table: EncodedTable, reps: int = REPS) -> tuple[list, int]:
    """Noise draws of ``reps`` measurements, grouped by stated scale, and how many there are."""
    groups, draws = [], 0
    truths: dict[tuple[str, ...], np.ndarray] = {}
    for r in range(reps):
        m, _ = _measure(name, table, 1000 + r)
        for nm in m.measured:
            # A marginal on merged values (groups) states noise per merged cell: fold the truth.
            truth = nm.fold(truths.setdefault(nm.attrs, _truth(table, nm.attrs)))
            cells = _tested_cells(nm, truth)
            if cells.size == 0:
                continue  # every cell derived: nothing here is a plain noisy count
            noise = nm.counts.ravel()[cells] - truth.ravel()[cells]
            if nm.mechanism == "none":
                assert np.all(noise == 0), f"{nm.key}: stated exact, but differs from the true counts"
                continue
            groups.append((noise, nm.stddev, nm.mechanism))
            draws += noise.size
        if m.records is not None and m.records.mechanism != "none":
            groups.append((np.array([m.records.value - table.n]), m.records.stddev, m.records.mechanism))
            draws += 1
        if r == 0 and not m.measured and m.records is None:
            break  # the method states no noise (e.g. a sample is its whole output)
    return groups, draws


def check_stated_noise(name: str, table: EncodedTable) -> float:
    """Asserts every stated noise scale of the method; returns the pooled p-value."""
    groups, draws = stated_noise(name, table)
    if not groups:
        m, _ = _measure(name, table, 0)
        # exact statements (mechanism "none") were compared with the truth in stated_noise
        exact = all(nm.mechanism == "none" for nm in m.measured) and (
            m.records is None or m.records.mechanism == "none")
        assert exact, f"{name}: noise is stated but no cell is testable"
        return 1.0
    assert draws >= REPS, f"{name}: too few testable cells ({draws}) to check the stated noise"
    p = pooled_pvalue(groups)
    assert p > ALPHA, f"{name}: the noise does not have its stated scale (p = {p:.3g})"
    return p


@pytest.mark.parametrize("name", NAMES)
def test_stated_noise_scales_pass_a_variance_test(name, table):
    check_stated_noise(name, table)


# The sampler each noisy method draws its marginal noise from.
SAMPLERS = {"marginals": "dpsynth.privacy.mechanisms.discrete_gaussian",
            "sds": "dpsynth.methods.sds.aggregation.discrete_gaussian"}


@pytest.mark.parametrize("factor", [0.7, 1.3])
@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_a_wrong_noise_scale_turns_the_suite_red(name, factor, table, monkeypatch):
    from dpsynth.privacy import noise

    def wrong(sigma, size, rng):
        return noise.discrete_gaussian(sigma * factor, size, rng)

    monkeypatch.setattr(SAMPLERS[name], wrong)
    with pytest.raises(AssertionError, match="stated scale"):
        check_stated_noise(name, table)


def test_private_sampling_states_its_neighbour_relation():
    """Theorem 12.2 holds for tables of equal size: a certified release must not claim add/remove."""
    from dpsynth.methods.private_sampling import REPLACE_ONE

    assert REPLACE_ONE.differentially_private and "replace one record" in REPLACE_ONE.neighbours


@pytest.mark.parametrize("factor", [0.7, 1.3])
def test_a_wrong_two_way_scale_of_sds_turns_the_suite_red(factor, table, monkeypatch):
    """sds states the noise of its 2-way tuples too: drawing them at a wrong scale, 1-way
    noise left right, must fail the suite (the gate checks the 2-way with that scale)."""
    from dpsynth.methods.sds import aggregation

    right = aggregation._report_level

    def wrong(k, counts, cand, eligible, sd, *rest):
        return right(k, counts, cand, eligible, sd * factor if k == 2 else sd, *rest)

    monkeypatch.setattr(aggregation, "_report_level", wrong)
    m, _ = _measure("sds", table, 0)
    assert any(len(nm.attrs) == 2 for nm in m.measured), "sds states its 2-way tuples"
    with pytest.raises(AssertionError, match="stated scale"):
        check_stated_noise("sds", table)
