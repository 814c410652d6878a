"""The internal report counts the real codes and the synthetic table chunk by chunk: its
numbers equal the whole-table computation, whatever ``chunk_rows`` and the runner."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from dpsynth.evaluation.metrics import complete_share, tvd_by_k
from dpsynth.measurement import Measurement
from dpsynth.pipeline import stages
from dpsynth.report import internal
from dpsynth.rows.encoding import EncodedTable
from dpsynth.rows.rowsource import RowSource

from small_release import ThreadRunner, pgm_release


@pytest.fixture
def released(tmp_path, demo_paths, seed_file, monkeypatch):
    """A pgm release of 1234 rows on the demo table (13 row groups), its codes folder."""
    return pgm_release(tmp_path, demo_paths, seed_file, monkeypatch, encode_chunk_rows=300)


def _whole(plan, codes, measurement, folder) -> tuple[dict, str]:
    """What the internal report computed with both tables in memory (the code it replaced)."""
    real = EncodedTable.from_parquet(codes, plan.schema) if codes.is_file() else EncodedTable(
        schema=plan.schema, codes=np.concatenate(
            [EncodedTable.from_parquet(p, plan.schema).codes for p in sorted(codes.glob("*.parquet"))]))
    synth = EncodedTable.from_parquet(folder / "synthetic-codes.parquet", plan.schema)
    measured = {nm.attrs for nm in Measurement.load(measurement).measured}
    page, by_marginal = internal.internal_page(plan.name, stages.INTERNAL_LABEL, real, synth, measured)
    missing = plan.schema.missing_codes
    report = {
        "label": stages.INTERNAL_LABEL,
        "release": plan.name,
        "tvd_by_k": {str(k): v for k, v in tvd_by_k(real.codes, synth.codes, plan.schema.cardinalities,
                                                     (1, 2, 3)).items()},
        "complete_share": {"real": complete_share(real.codes, missing),
                           "synthetic": complete_share(synth.codes, missing)},
        "scored_marginals": by_marginal,
    }
    return report, page


def test_the_streamed_report_equals_the_whole_table_report(released, monkeypatch):
    plan, codes, measurement, folder = released
    want_json, want_page = _whole(plan, codes, measurement, folder)
    assert want_json["tvd_by_k"]["3"]["count"] == 120 and want_json["scored_marginals"]["2"]["marginals"] == 45
    out = plan.release_dir() / "internal-utility-report.json"
    for chunk_rows, runner, budget in ((1 << 20, None, internal.CELL_BUDGET), (97, ThreadRunner(), 3000)):
        monkeypatch.setattr(internal, "CELL_BUDGET", budget)  # 3000 cells: several counting groups
        cfg = dataclasses.replace(plan.config, chunk_rows=chunk_rows)
        page = stages.internal_report_stage(dataclasses.replace(plan, config=cfg), codes, folder, measurement,
                                            runner=runner)
        assert json.loads(out.read_text()) == json.loads(json.dumps(want_json))
        assert page.read_text() == want_page


def test_counting_groups_hold_at_most_the_budget():
    cards = (4, 5, 6, 7)
    subsets = [(0,), (1,), (0, 1), (2, 3), (0, 2, 3), (1, 2)]
    groups = internal._groups(subsets, cards, 60)
    assert [s for g in groups for s in g] == subsets
    for g in groups:
        cells = [int(np.prod([cards[j] for j in s])) for s in g]
        assert sum(cells) <= 60 or len(g) == 1
    assert [len(g) for g in groups] == [3, 1, 1, 1]  # 4+5+20 | 42 | 168 alone | 30


def test_complete_records_counts_missing_codes_by_chunk(demo_paths):
    from dpsynth.schema import load_schema

    schema = load_schema(demo_paths[1])
    miss = schema.missing_codes
    j = next(i for i, m in enumerate(miss) if m is not None)
    rng = np.random.default_rng(3)
    codes = np.stack([rng.integers(0, c, 500) for c in schema.cardinalities], axis=1).astype(np.uint8)
    codes[::7, j] = miss[j]
    table = EncodedTable(schema=schema, codes=codes)
    want = complete_share(codes, miss)
    assert want < 0.9
    for part_rows, chunk_rows in ((None, 1 << 20), (64, 5), (1, 1)):
        src = RowSource.from_table(table, chunk_rows=chunk_rows, part_rows=part_rows, runner=ThreadRunner())
        assert internal.complete_records(src) == want


@pytest.mark.slow
def test_the_report_counted_on_a_dask_cluster_is_the_same(released):
    """On a LocalCluster of 2 workers (each partition a task; only counts come back)."""
    pytest.importorskip("distributed")
    from dpsynth.rows.dask_runner import connect

    plan, codes, measurement, folder = released
    want_json, want_page = _whole(plan, codes, measurement, folder)
    cfg = dataclasses.replace(plan.config, chunk_rows=400)
    with connect("local:2") as runner:
        page = stages.internal_report_stage(dataclasses.replace(plan, config=cfg), codes, folder, measurement,
                                            runner=runner)
    assert json.loads((plan.release_dir() / "internal-utility-report.json").read_text()) == json.loads(
        json.dumps(want_json))
    assert page.read_text() == want_page
