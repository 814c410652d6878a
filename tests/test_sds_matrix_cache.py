"""benchmarks/sds_matrix.py's flags for one-cell runs over the 1M interaction tables:
``--table-cache`` (one-cell processes over the same table read its baseline and ceilings from
the cache instead of scoring them again, with the same values) and ``--release-path`` (the
records scored are those the method's sampler hands the release's writer)."""

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


def test_release_path_synthesises_with_the_methods_sampler(monkeypatch):
    """``--release-path``: the records scored and gated are those ``SdsMethod.sampler`` hands the
    release's writer (the pipeline's call), not the whole-table ``synthesize`` (which at 1M x 20
    never expands)."""
    import numpy as np

    import benchmarks.sds_matrix as sm
    from dpsynth.methods.sds import SdsMethod

    schema, codes = sm.make_table(800, 5, 4, 0.0, 0.0, seed=5, name="release")
    table = sm.Table("release-table", "generated", "tuning", schema, codes)
    handed: list[np.ndarray] = []
    real_sampler = SdsMethod.sampler

    class Spy:
        def __init__(self, inner):
            self.inner, self.rows = inner, inner.rows

        def sample(self, n, rng):
            out = self.inner.sample(n, rng)
            handed.append(np.array(out, copy=True))
            return out

    def spy(self, m, schema, rows, rng):
        return Spy(real_sampler(self, m, schema, rows, rng))

    monkeypatch.setattr(SdsMethod, "sampler", spy)
    _meas, synth, _r, _wall = sm.run_method("sds", table, 2.0, 0, release_path=True)
    assert len(handed) == 1 and np.array_equal(synth.codes, handed[0])
    sm.run_method("sds", table, 2.0, 0)  # the default path is unchanged: no sampler
    assert len(handed) == 1
