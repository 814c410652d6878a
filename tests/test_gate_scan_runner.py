"""The gate's pass over the synthetic table, partition by partition on a row runner: the
same scan, the same counts and the same gate summary whatever ``chunk_rows``, the runner
and the number of file pairs the table is split into."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from dpsynth.gate.checks import measured_subsets
from dpsynth.gate.scan import CodeCounts, Scan, file_chunks, merge_scans, scan_files, scan_parts, scan_table
from dpsynth.measurement import Measurement
from dpsynth.pipeline import stages
from dpsynth.gate.validation import column_domain
from dpsynth.rows.encoding import EncodedTable, decode
from dpsynth.schema import load_schema

from small_release import ThreadRunner, pgm_release


def _assert_same(a: Scan, b: Scan) -> None:
    assert a.columns == b.columns and a.dtypes == b.dtypes
    assert (a.rows, a.codes_rows, a.misaligned) == (b.rows, b.codes_rows, b.misaligned)
    assert a.nulls == b.nulls and a.outside == b.outside
    assert np.array_equal(a.mismatch_share(), b.mismatch_share())
    assert a.counts.keys() == b.counts.keys()
    assert all(np.array_equal(a.counts[k], b.counts[k]) for k in a.counts)
    pd.testing.assert_frame_equal(a.witness_frame(), b.witness_frame())


@pytest.fixture
def released(tmp_path, demo_paths, seed_file, monkeypatch):
    """A pgm release measured and synthesized on the demo table: 1234 rows in 13 row groups."""
    plan, _, measurement, folder = pgm_release(tmp_path, demo_paths, seed_file, monkeypatch, synth_chunk_rows=97)
    assert pq.ParquetFile(str(folder / "synthetic.parquet")).metadata.num_row_groups == 13
    return plan, measurement, folder


def _one_pass(plan, measurement, folder) -> Scan:
    subsets = measured_subsets(plan.schema, Measurement.load(measurement))
    chunks = file_chunks(folder / "synthetic-codes.parquet", folder / "synthetic.parquet", plan.schema)
    return scan_table(chunks, plan.schema, subsets)


def test_the_scan_is_the_one_pass_whatever_chunk_rows_and_runner(released):
    plan, measurement, folder = released
    want = _one_pass(plan, measurement, folder)
    assert want.rows == 1234 and len(want.counts) > len(plan.schema.columns)  # 2-way marginals measured
    subsets = measured_subsets(plan.schema, Measurement.load(measurement))
    pairs = stages.synthetic_pairs(folder)
    for chunk_rows in (1, 97, 250, 1 << 20):
        for runner in (None, ThreadRunner()):
            _assert_same(scan_files(pairs, plan.schema, subsets, chunk_rows=chunk_rows, runner=runner), want)
    assert len(scan_parts(pairs, plan.schema, 1)) == 13 and len(scan_parts(pairs, plan.schema, 250)) == 5


def test_a_table_split_into_several_file_pairs_scans_as_one(released, tmp_path):
    """The synthesize stage may write the table as several part files: each (codes, values)
    pair is a run of partitions, in row order."""
    plan, measurement, folder = released
    want = _one_pass(plan, measurement, folder)
    pairs = []
    for i, groups in enumerate(([0, 1, 2, 3, 4], [5], [6, 7, 8, 9, 10, 11, 12])):
        pair = []
        for name in ("synthetic-codes.parquet", "synthetic.parquet"):
            f = pq.ParquetFile(str(folder / name))
            out = tmp_path / f"part-{i}-{name}"
            with pq.ParquetWriter(str(out), f.schema_arrow) as w:
                for g in groups:
                    w.write_table(f.read_row_group(g))
            pair.append(out)
        pairs.append(tuple(pair))
    subsets = measured_subsets(plan.schema, Measurement.load(measurement))
    for chunk_rows in (1, 333):
        _assert_same(scan_files(pairs, plan.schema, subsets, chunk_rows=chunk_rows), want)
    counts = CodeCounts.of_file([c for c, _ in pairs], plan.schema, Measurement.load(measurement), 97)
    whole = CodeCounts.of_file(folder / "synthetic-codes.parquet", plan.schema, Measurement.load(measurement), 500)
    assert counts.n == whole.n == 1234
    assert all(np.array_equal(counts.counts[k], whole.counts[k]) for k in whole.counts)


def test_the_gate_summary_is_the_same_whatever_chunk_rows(released):
    plan, measurement, folder = released
    args = (1234, None, None, "w")
    one = stages.gate_files(plan.schema, folder, measurement, *args, chunk_rows=1)
    many = stages.gate_files(plan.schema, folder, measurement, *args, chunk_rows=1 << 20)
    assert one["success"] and json.dumps(one, sort_keys=True) == json.dumps(many, sort_keys=True)
    assert one["statistics"]["rows"] == 1234


def test_merging_partial_scans_keeps_the_exact_counts_of_a_broken_table(demo_paths):
    """Nulls, values outside the domain and a misaligned chunk in different partitions:
    the merged scan counts what one pass counts (and the gate sees the same witnesses)."""
    schema = load_schema(demo_paths[1])
    rng = np.random.default_rng(5)
    codes = np.stack([rng.integers(0, c, 300) for c in schema.cardinalities], axis=1).astype(np.uint8)
    table = decode(EncodedTable(schema=schema, codes=codes), np.random.default_rng(6)).astype(object)
    first = schema.columns[0].name
    cat = next(c.name for c in schema.columns if column_domain(c).values is not None)
    table.loc[[3, 150], first] = None
    table.loc[[10, 260, 270], cat] = "not-a-category"
    chunks = [(table.iloc[s:s + 100].reset_index(drop=True), codes[s:s + 100]) for s in range(0, 300, 100)]
    subsets = measured_subsets(schema, _FakeMeasurement())
    whole = scan_table(chunks, schema, subsets)
    assert whole.nulls[first] == 2 and whole.outside[cat] == 3
    for cut in (1, 2):
        _assert_same(merge_scans(scan_table(chunks[:cut], schema, subsets), scan_table(chunks[cut:], schema, subsets)),
                     whole)
    bad = chunks[:1] + [(chunks[1][0].iloc[:50], chunks[1][1])] + chunks[2:]
    merged = merge_scans(scan_table(bad[:1], schema, subsets),
                         merge_scans(scan_table(bad[1:2], schema, subsets), scan_table(bad[2:], schema, subsets)))
    assert merged.misaligned and np.all(merged.mismatch_share() == 1)
    _assert_same(merged, scan_table(bad, schema, subsets))


class _FakeMeasurement:
    """No measured marginals: the 1-way counts only."""

    marginals: dict = {}


@pytest.mark.slow
def test_validate_on_a_dask_cluster_writes_the_same_validation(released, monkeypatch):
    """--dask-address: the cluster's workers read the synthetic table, the gate gets the
    scan; validation.json is the one of a release without a cluster."""
    pytest.importorskip("distributed")
    plan, measurement, folder = released
    here = stages.validate_stage(plan, folder, measurement)
    local = (plan.release_dir() / "validation.json").read_bytes()
    import dataclasses

    dask_plan = dataclasses.replace(plan, config=dataclasses.replace(plan.config, dask_address="local:2",
                                                                     chunk_rows=300))
    there = stages.validate_stage(dask_plan, folder, measurement)
    assert here == there and (plan.release_dir() / "validation.json").read_bytes() == local


def test_a_scan_keeps_no_buffer_of_the_rows_it_read(released):
    """A partition's scan kept its first row as a slice (``iloc[:1]``) of the first chunk,
    and with it that chunk's whole Arrow buffers: about one row group (11 MB at 65,536 x 20)
    per partition, held until the window's scans were merged. That was most of the gate's
    growth from 1M to 10M rows (8 partitions held at once at 10M, 1 at 1M)."""
    import gc

    import pyarrow as pa

    plan, measurement, folder = released
    subsets = measured_subsets(plan.schema, Measurement.load(measurement))
    gc.collect()
    base = pa.total_allocated_bytes()
    chunks = list(file_chunks(folder / "synthetic-codes.parquet", folder / "synthetic.parquet", plan.schema, [0, 1]))
    held = pa.total_allocated_bytes() - base
    columns, first = list(chunks[0][0].columns), chunks[0][0].iloc[:1].astype(str).to_numpy().tolist()
    found = scan_table(iter(chunks), plan.schema, subsets)
    del chunks
    gc.collect()
    assert held > 0
    assert pa.total_allocated_bytes() - base < held / 4  # the rows' buffers are freed with the chunks
    assert found.rows == 200 and list(found.head.columns) == columns
    assert found.head.astype(str).to_numpy().tolist() == first  # the same first row, copied


def test_a_serial_scan_merges_each_partition_before_reading_the_next(released):
    """On a serial runner the partial scans were computed 8 at a time before being merged,
    each holding a copy of every count table (17.6 MB for sds at 20 columns): the gate's peak
    grew with the number of partitions up to 8. One is now computed at a time."""
    from dpsynth.rows.rowsource import SerialRunner

    plan, measurement, folder = released
    subsets = measured_subsets(plan.schema, Measurement.load(measurement))

    class Counting(SerialRunner):
        widest = 0

        def map(self, fn, parts, *args):
            Counting.widest = max(Counting.widest, len(parts))
            return super().map(fn, parts, *args)

    found = scan_files(stages.synthetic_pairs(folder), plan.schema, subsets, chunk_rows=97, runner=Counting())
    assert Counting.widest == 1
    _assert_same(found, _one_pass(plan, measurement, folder))


def _witness_table(schema, rows: int):
    rng = np.random.default_rng(11)
    codes = np.stack([rng.integers(0, c, rows) for c in schema.cardinalities], axis=1).astype(np.uint8)
    table = decode(EncodedTable(schema=schema, codes=codes), np.random.default_rng(12))
    return table, codes


def test_a_chunk_reduced_first_gives_the_one_pass_witness_and_counts(demo_paths, monkeypatch):
    """Each chunk is reduced to its own witness before it joins the scan's, and codes are
    counted in batches of COUNT_ROWS rows: the witness values (down to which of 0.0 and -0.0
    is kept, and which missing value) and the counts are those of the table in one chunk."""
    from dpsynth.gate import scan as gscan

    schema = load_schema(demo_paths[1])
    table, codes = _witness_table(schema, 240)
    num = next(c.name for c in schema.columns if column_domain(c).values is None and not column_domain(c).time)
    cat = next(c.name for c in schema.columns if column_domain(c).values is not None)
    x = table[num].astype(np.float64).to_numpy(copy=True)
    x[:] = 1.0
    x[[5, 130]] = 0.0
    x[[7, 60, 131]] = -0.0  # ties of the smallest value: the first one (0.0 at row 5) is kept
    x[[9, 200]] = np.nan
    x[[100, 239]] = 3.0
    table[num] = x
    table.loc[[2, 150], cat] = None
    subsets = measured_subsets(schema, _FakeMeasurement())
    whole = scan_table([(table, codes)], schema, subsets)
    assert not np.signbit(whole.witness[num].dropna()).any()
    monkeypatch.setattr(gscan, "COUNT_ROWS", 50)  # batches flushed, and chunks as large as a batch
    for size in (1, 7, 49, 50, 120):
        chunks = [(table.iloc[s:s + size].reset_index(drop=True), codes[s:s + size]) for s in range(0, 240, size)]
        found = scan_table(chunks, schema, subsets)
        _assert_same(found, whole)
        for name in table.columns:
            a, b = found.witness[name], whole.witness[name]
            assert a.astype(object).isna().tolist() == b.astype(object).isna().tolist()
            if a.dtype.kind == "f":
                assert np.array_equal(np.signbit(a.to_numpy()), np.signbit(b.to_numpy()))
    want = {s: np.zeros(tuple(schema.cardinalities[j] for j in s), dtype=np.int64) for s in whole.counts}
    for s, arr in want.items():
        np.add.at(arr, tuple(codes[:, j] for j in s), 1)
    assert all(np.array_equal(whole.counts[s], want[s]) for s in want)


def test_a_column_of_mixed_objects_keeps_its_distinct_values_in_first_seen_order(demo_paths):
    """A numeric column holding numbers in one chunk and text in the next cannot be reduced
    chunk by chunk (its smallest and largest values are not defined): its witness is the
    first distinct values of the whole column, in the order they first appear."""
    schema = load_schema(demo_paths[1])
    table, codes = _witness_table(schema, 6)
    num = next(c.name for c in schema.columns if column_domain(c).values is None and not column_domain(c).time)
    table = table.astype(object)
    table[num] = [1, 5, 3, "b", "a", "b"]
    subsets = measured_subsets(schema, _FakeMeasurement())
    chunks = [(table.iloc[:3].reset_index(drop=True), codes[:3]), (table.iloc[3:].reset_index(drop=True), codes[3:])]
    found = scan_table(chunks, schema, subsets)
    assert found.witness[num].tolist() == [1, 5, "b", "a"]  # not [1, 5, "a", "b"]


def _reduce_reference(kind: str, s: pd.Series, limit: int) -> pd.Series:
    """The witness as it was computed before rows were picked by position (masked copies)."""
    nulls = s[s.isna()].iloc[:1]
    present = s[s.notna()]
    if kind == "values":
        return pd.concat([present.drop_duplicates().iloc[:limit], nulls], ignore_index=True)
    if len(present) == 0:
        return nulls.reset_index(drop=True)
    try:
        ends = present.iloc[[present.argmin(), present.argmax()]]
    except TypeError:
        ends = present.drop_duplicates().iloc[:limit]
    return pd.concat([ends, nulls], ignore_index=True)


def test_witness_rows_picked_by_position_are_the_masked_copies_rows():
    from dpsynth.gate.scan import _reduce

    rng = np.random.default_rng(3)
    x = rng.choice([0.0, -0.0, 1.5, -2.0, np.nan, 7.0], 500)
    labels = rng.choice(np.array(["a", "b", "c", None], dtype=object), 500)
    cases = [
        ("range", pd.Series(x, name="x")),
        ("range", pd.Series(np.full(5, np.nan))),
        ("range", pd.Series(rng.integers(-3, 3, 50))),
        ("range", pd.Series(pd.array(rng.integers(0, 9, 40), dtype="Int64")).where(rng.random(40) > 0.2)),
        ("range", pd.Series(pd.to_datetime(rng.integers(0, 10**9, 30), unit="s")).where(rng.random(30) > 0.3)),
        ("range", pd.Series([3, "b", None, 1, "a"], dtype=object)),
        ("values", pd.Series(labels, dtype=pd.StringDtype())),
        ("values", pd.Series(labels, dtype=object)),
        ("values", pd.Series([None, None], dtype=object)),
        ("values", pd.Series([], dtype=pd.StringDtype())),
    ]
    for kind, s in cases:
        for limit in (1, 2, 1000):
            got, want = _reduce(kind, s, limit), _reduce_reference(kind, s, limit)
            pd.testing.assert_series_equal(got, want)
            if got.dtype.kind == "f":
                assert np.array_equal(np.signbit(got.to_numpy()), np.signbit(want.to_numpy()))
            assert [type(v) for v in got.tolist()] == [type(v) for v in want.tolist()]


def test_merging_with_reuse_adds_into_the_first_scans_counts_only(released):
    """``merge_scans(a, b, reuse=True)`` (the pass's own running scan) adds ``b``'s counts
    into ``a``'s arrays: the same merged scan, no third copy; ``b`` is left as it was, and
    read-only arrays (from a Dask worker) are added into a new array."""
    plan, measurement, folder = released
    subsets = measured_subsets(plan.schema, Measurement.load(measurement))
    codes, values = folder / "synthetic-codes.parquet", folder / "synthetic.parquet"

    def part(groups):
        return scan_table(file_chunks(codes, values, plan.schema, groups), plan.schema, subsets)

    want = merge_scans(part([0, 1]), part([2, 3]))
    a, b = part([0, 1]), part([2, 3])
    b_before = {k: v.copy() for k, v in b.counts.items()}
    got = merge_scans(a, b, reuse=True)
    _assert_same(got, want)
    key = next(iter(got.counts))
    assert got.counts[key] is a.counts[key]
    assert all(np.array_equal(b.counts[k], b_before[k]) for k in b.counts)
    ro, b2 = part([0, 1]), part([2, 3])
    for v in ro.counts.values():
        v.flags.writeable = False
    merged = merge_scans(ro, b2, reuse=True)
    _assert_same(merged, want)
    assert merged.counts[key] is not ro.counts[key]
