"""benchmarks/sds_matrix.py's ``--table-cache``: one-cell processes over the same table read
its baseline and ceilings from the cache instead of scoring them again, with the same values."""

from __future__ import annotations

import json

import pytest


def test_table_cache_reuses_the_baseline_and_ceilings_with_the_same_values(tmp_path, monkeypatch):
    import benchmarks.sds_matrix as sm

    monkeypatch.setattr(sm, "RESULTS", tmp_path)
    schema, codes = sm.make_table(600, 5, 4, 0.0, 0.0, seed=3, name="cache")
    table = sm.Table("cache-table", "generated", "tuning", schema, codes)

    fresh = sm.table_references(table)  # no cache: computed, nothing written
    assert not list(tmp_path.iterdir())
    first = sm.table_references(table, "refs")
    assert first == fresh
    stored = json.loads((tmp_path / "refs.json").read_text())["tables"]["cache-table"]
    assert stored == {"independent": fresh[0], "ceiling": fresh[1]}

    def no_scoring(*_a, **_k):
        raise AssertionError("the cache was not used")

    monkeypatch.setattr(sm, "baseline", no_scoring)
    monkeypatch.setattr(sm, "table_ceiling", no_scoring)
    assert sm.table_references(table, "refs") == fresh
    with pytest.raises(AssertionError, match="not used"):  # another table is not in it
        sm.table_references(sm.Table("other", "generated", "tuning", schema, codes), "refs")
