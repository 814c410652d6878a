"""The gate's speed-ups change nothing it checks (issue 14, item 3).

The gate now validates on one ephemeral GE context per process, warmed up in a
background thread, with GE's BASIC result format and without storing suites. These
tests pin the expectations to the list the gate ran before that change (main at
e62b005, demo table), show that a failing marginal still fails, and that reusing the
context carries nothing from one run into the next.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpsynth.rows.encoding import EncodedTable, decode
from dpsynth.gate import run_gate, session
from tests.test_gate import release  # noqa: F401 - the module-scoped fixture

_SET, _BETWEEN, _TYPE = ("expect_column_values_to_be_in_set", "expect_column_values_to_be_between",
                         "expect_column_values_to_be_in_type_list")
_EXISTS, _NOT_NULL = "expect_column_to_exist", "expect_column_values_to_not_be_null"


def _column(name: str, in_domain: str, not_null: bool) -> list[tuple]:
    out = [("exists", name, _EXISTS), ("type", name, _TYPE), ("in_domain", name, in_domain)]
    return out + ([("not_null", name, _NOT_NULL)] if not_null else [])


#: The gate's expectations on the demo table before the change, in order (name, column, GE type).
BEFORE = [
    ("columns_match_schema", None, "expect_table_columns_to_match_ordered_list"),
    # the row count is asserted on the statistics table since the gate reads the table in chunks
    ("row_count", None, "expect_column_values_to_be_between"),
    *_column("region", _SET, True), *_column("age", _BETWEEN, True), *_column("sex", _SET, True),
    *_column("education", _SET, True), *_column("employment", _SET, True), *_column("income", _BETWEEN, False),
    *_column("hours_per_week", _BETWEEN, False), *_column("smoker", _SET, False), *_column("health", _SET, True),
    *_column("children", _SET, True),
    ("codes_match_table", None, "expect_column_max_to_be_between"),
    ("max_tvd_k1", None, "expect_column_values_to_be_between"),
    ("mean_tvd_k1", None, "expect_column_mean_to_be_between"),
]


@pytest.fixture(scope="module")
def demo(release):  # test_gate's honest demo release (marginals, epsilon 1, fixed seed)
    return release.schema, release.measurement, release.codes, release.table


def _listing(summary: dict) -> list[tuple]:
    return [(e["name"], e.get("column"), e["expectation"]) for e in summary["expectations"]]


def test_the_gate_runs_the_same_expectations_as_before(demo):
    schema, m, codes, table = demo
    summary = run_gate(table, codes, m, None)
    assert _listing(summary) == BEFORE
    assert summary["success"], summary["failed"]
    # the counts GE reports are still there (BASIC keeps them)
    region = next(e for e in summary["expectations"] if e["name"] == "in_domain" and e.get("column") == "region")
    assert region["observed"]["element_count"] == codes.n and region["observed"]["unexpected_count"] == 0


def test_a_failing_marginal_still_fails_and_the_reused_context_forgets_it(demo):
    schema, m, codes, table = demo
    first = run_gate(table, codes, m, None)
    c = codes.codes.copy()
    j = schema.index("education")
    c[:, j] = np.random.default_rng(3).integers(0, schema.columns[j].cardinality, size=codes.n)  # uniform
    broken = EncodedTable(schema, c)
    bad = run_gate(decode(broken, np.random.default_rng(0)), broken, m, None)
    assert not bad["success"]
    assert "max_tvd_k1" in bad["failed"]
    assert _listing(bad) == BEFORE  # a failure runs the same expectations
    row = next(e for e in bad["expectations"] if e["name"] == "max_tvd_k1")
    assert row["observed"]["over_threshold"] >= 1 and row["observed"]["unexpected_count"] >= 1
    again = run_gate(table, codes, m, None)
    assert json.dumps(again, sort_keys=True) == json.dumps(first, sort_keys=True)
    assert session._STATE["context"] is not None


def test_warm_up_starts_once_per_process_and_shares_the_context(demo):
    schema, m, codes, table = demo
    thread = session.warm_up_in_background()
    assert session.warm_up_in_background() is thread
    thread.join(timeout=120)
    assert not thread.is_alive()
    ctx = session._STATE["context"]
    run_gate(table, codes, m, None)
    assert session._STATE["context"] is ctx  # one context per process
    session.warm_up()  # runs every expectation type the gate uses without error
