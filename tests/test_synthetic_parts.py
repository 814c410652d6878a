"""Synthesis in parts on a runner (serial, a local process pool, Dask): the same bytes as
one writer, parts joined by copying bytes, and nothing published when a part fails."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsynth import pipeline
from dpsynth.measurement import Measurement
from dpsynth.pipeline import cluster, parts, synthetic
from dpsynth.pipeline.synthetic import part_ranges, write_synthetic
from dpsynth.rows.pool_runner import default_workers, pool
from dpsynth.rows.rowsource import SerialRunner

FILES = ("synthetic-codes.parquet", "synthetic.parquet", "synthetic.csv")


def _digests(folder: Path) -> dict[str, str]:
    return {f: hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in FILES}


def _tables(n: int) -> list[pa.Table]:
    rng = np.random.default_rng(0)
    return [pa.table({"a": rng.integers(0, 5, 300), "s": pa.array(rng.choice(["x", "y", None], 300)),
                      "f": rng.random(300)}) for _ in range(n)]


def _write(path: Path, tables: list[pa.Table]) -> None:
    with pq.ParquetWriter(str(path), tables[0].schema, compression="zstd") as w:
        for t in tables:
            w.write_table(t, row_group_size=len(t))


def test_a_footer_reads_and_writes_back_byte_for_byte(tmp_path):
    _write(tmp_path / "a.parquet", _tables(3))
    raw = (tmp_path / "a.parquet").read_bytes()
    meta, end = parts.read_footer(tmp_path / "a.parquet")
    assert parts.write_footer(meta) == raw[end:]


@pytest.mark.parametrize("cuts", [(0, 7), (0, 1, 7), (0, 3, 4, 6, 7)])
def test_joined_parquet_parts_are_the_bytes_of_one_writer(tmp_path, cuts):
    tables = _tables(7)
    _write(tmp_path / "one.parquet", tables)
    paths = []
    for k, (a, b) in enumerate(zip(cuts, cuts[1:])):
        paths.append(tmp_path / f"p{k}.parquet")
        _write(paths[-1], tables[a:b])
    assert parts.concat_parquet(paths, tmp_path / "joined.parquet") == 2100
    assert (tmp_path / "joined.parquet").read_bytes() == (tmp_path / "one.parquet").read_bytes()
    assert pq.read_table(tmp_path / "joined.parquet").equals(pa.concat_tables(tables))


def test_a_join_of_many_row_groups_is_one_writer_s_bytes_and_holds_one_part_footer_at_a_time(tmp_path):
    """Issue 25 (flat memory at 100M rows on Dask): the join held every part's decoded
    footer at once (Python lists, ~30x their bytes), growing with the table's row groups.
    Now one part's decoded footer is held at a time and the others as encoded bytes."""
    import tracemalloc

    wide = [pa.table({f"c{j}": pa.array([j, j + 1], pa.int16()) for j in range(20)}) for _ in range(400)]
    _write(tmp_path / "one.parquet", wide)
    paths = []
    for k in range(8):  # 8 parts of 50 row groups x 20 columns (a list head in the long form)
        paths.append(tmp_path / f"p{k}.parquet")
        _write(paths[-1], wide[50 * k:50 * (k + 1)])
    part_footer = max(p.stat().st_size - parts.read_footer(p)[1] for p in paths)
    tracemalloc.start()
    try:
        assert parts.concat_parquet(paths, tmp_path / "joined.parquet") == 800
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (tmp_path / "joined.parquet").read_bytes() == (tmp_path / "one.parquet").read_bytes()
    # held: one part decoded (~30x its footer's bytes) plus every part's encoded row groups
    # and the joined footer (~3x the parts' footers); all 8 decoded at once was ~8 x 30x
    assert peak < 60 * part_footer + 4 * 8 * part_footer, (peak, part_footer)


def test_parts_of_different_schemas_are_refused(tmp_path):
    _write(tmp_path / "a.parquet", _tables(1))
    _write(tmp_path / "b.parquet", [pa.table({"z": [1.0, 2.0]})])
    with pytest.raises(ValueError, match="schema"):
        parts.concat_parquet([tmp_path / "a.parquet", tmp_path / "b.parquet"], tmp_path / "j.parquet")


def test_a_part_with_a_page_index_is_refused(tmp_path):
    t = _tables(1)[0]
    pq.write_table(t, tmp_path / "a.parquet", write_page_index=True)
    with pytest.raises(ValueError, match="page index"):
        parts.concat_parquet([tmp_path / "a.parquet"], tmp_path / "j.parquet")


def test_part_ranges_cover_every_block_once():
    for blocks, n in [(1, 4), (13, 1), (13, 4), (13, 13), (13, 40)]:
        ranges = part_ranges(blocks, n)
        assert [r[0] for r in ranges] == list(range(len(ranges))) and len(ranges) == min(blocks, n)
        assert ranges[0][1] == 0 and ranges[-1][2] == blocks
        assert all(a[2] == b[1] and a[1] < a[2] for a, b in zip(ranges, ranges[1:]))


def test_default_workers_reads_the_environment(monkeypatch):
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "3")
    assert default_workers() == 3
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "many")
    with pytest.raises(ValueError, match="DPSYNTH_SYNTH_WORKERS"):
        default_workers()


@pytest.fixture(params=["pgm", "marginals"])
def fitted(request, tmp_path, demo_paths, seed_file):
    """A release plan, its measurement and a sampler of 1234 rows (13 blocks of 100)."""
    data, schema_path = demo_paths
    config = pipeline.ReleaseConfig(data=data, schema=schema_path, method=request.param, epsilon=1.0, rows=1234,
                                    out=tmp_path / "out", workspace=tmp_path / "ws", seed_file=seed_file)
    plan = pipeline.prepare(config)
    codes = pipeline.encode_stage(data, plan.schema, config.workspace, plan.data_sha256)
    m = Measurement.load(pipeline.measure_stage(plan, codes, pipeline.charge_dataset(plan).draw))
    return plan, m


def _synth(plan, m, out: Path, **kw) -> dict[str, str]:
    out.mkdir()
    sampler = plan.method().sampler(m, plan.schema, 1234, plan.rng("synthesize"))
    written = write_synthetic(out, plan.schema, sampler, plan.rng("synthesize"), plan.rng("decode"),
                              block_rows=100, **kw)
    assert written.rows == 1234 and written.row_groups == 13
    assert not (out / "parts").exists()
    return _digests(out)


def test_same_bytes_whatever_runner_parts_and_chunk_rows(tmp_path, fitted):
    plan, m = fitted
    want = _synth(plan, m, tmp_path / "serial", chunk_rows=333)
    for n, chunk in [(1, 97), (2, 1), (3, 333), (5, 10_000), (13, 97)]:
        got = _synth(plan, m, tmp_path / f"parts-{n}-{chunk}", chunk_rows=chunk, runner=SerialRunner(), parts=n)
        assert got == want, (n, chunk)
    with pool(2) as runner:
        assert _synth(plan, m, tmp_path / "pool", chunk_rows=97, runner=runner) == want
    assert pq.ParquetFile(str(tmp_path / "pool" / "synthetic.parquet")).metadata.num_row_groups == 13


@pytest.mark.slow
def test_same_bytes_on_a_dask_local_cluster(tmp_path, fitted):
    from dpsynth.rows.dask_runner import connect

    plan, m = fitted
    want = _synth(plan, m, tmp_path / "serial", chunk_rows=333)
    with connect("local:2") as runner:
        assert runner.workers == 2
        assert _synth(plan, m, tmp_path / "dask", chunk_rows=97, runner=runner, parts=5) == want


class FailingSampler:
    """A sampler whose block of 7 records fails (module level: a pool worker unpickles it)."""

    def __init__(self, inner) -> None:
        self.inner, self.rows = inner, inner.rows

    def sample(self, n, rng):
        """The inner sampler's records, except for a block of 34 rows (the last)."""
        if n == 34:
            raise RuntimeError("a part failed")
        return self.inner.sample(n, rng)


def _release(tmp_path, demo_paths, seed_file, name):
    data, schema_path = demo_paths
    return pipeline.ReleaseConfig(data=data, schema=schema_path, method="pgm", epsilon=1.0, rows=1234,
                                  out=tmp_path / "out", workspace=tmp_path / "ws", seed_file=seed_file,
                                  name=name)


@pytest.mark.slow
def test_a_release_on_the_pool_publishes_the_serial_bytes_and_a_failing_part_publishes_nothing(
        tmp_path, demo_paths, seed_file, monkeypatch):
    monkeypatch.setattr(synthetic, "BLOCK_ROWS", 100)
    monkeypatch.setattr(cluster, "POOL_MIN_BLOCKS", 2)  # the pool rule reads it there, not stages' re-export
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "1")
    serial = pipeline.run_release(_release(tmp_path / "a", demo_paths, seed_file, "r"))
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "2")
    pooled = pipeline.run_release(_release(tmp_path / "b", demo_paths, seed_file, "r"))
    for f in FILES[1:]:
        assert (serial / f).read_bytes() == (pooled / f).read_bytes()
    method = type(pipeline.prepare(_release(tmp_path / "c", demo_paths, seed_file, "r")).method())
    real = method.sampler
    monkeypatch.setattr(method, "sampler", lambda self, *a: FailingSampler(real(self, *a)))
    config = _release(tmp_path / "c", demo_paths, seed_file, "broken")
    with pytest.raises(Exception, match="a part failed"):
        pipeline.run_release(config)
    assert not (tmp_path / "c" / "out" / "broken").exists()
    assert not [p for p in (tmp_path / "c" / "ws").rglob("*synthetic*") if p.is_dir()]


def test_csv_fields_taken_from_codes_are_those_of_the_decoded_labels(tmp_path):
    """Categorical fields formatted from the codes (the synthesize path) write the same
    bytes as from the decoded table: labels to escape and quote, ``other``, missing."""
    import io

    from dpsynth.rows.encoding import EncodedTable, decode, write_csv
    from dpsynth.schema import schema_from_dict

    schema = schema_from_dict({"name": "t", "columns": [
        {"name": "a", "type": "categorical", "values": ["x", 'say "hi"', "one, two", "=SUM(A1)", "-3"],
         "other": True, "missing": ["+NA"]},
        {"name": "b", "type": "categorical", "values": ["p", "q"]},
        {"name": "f", "type": "numeric", "bounds": [0, 10], "bins": 3, "missing": [""]}]})
    rng = np.random.default_rng(5)
    codes = np.stack([rng.integers(0, c.cardinality, 3000) for c in schema.columns], axis=1).astype(np.uint8)
    df = decode(EncodedTable(schema=schema, codes=codes), rng)
    plain, coded = io.StringIO(), io.StringIO()
    write_csv(df, schema, plain)
    write_csv(df, schema, coded, codes=codes)
    assert coded.getvalue() == plain.getvalue()
    assert '"say ""hi"""' in plain.getvalue() and "'+NA" in plain.getvalue() and "other" in plain.getvalue()


@pytest.mark.slow
def test_a_release_synthesized_on_dask_publishes_the_serial_bytes(tmp_path, demo_paths, seed_file, monkeypatch):
    """--dask-address: synthesize's parts are drawn and written on the workers (13 blocks
    of 100 rows), and the published files are those of the release in one process."""
    import dataclasses

    monkeypatch.setattr(synthetic, "BLOCK_ROWS", 100)
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "1")
    calls = []
    real = synthetic.write_part
    monkeypatch.setattr(synthetic, "write_part", lambda *a: calls.append(1) or real(*a))
    serial = pipeline.run_release(_release(tmp_path / "a", demo_paths, seed_file, "r"))
    assert not calls  # no pool: one process
    config = dataclasses.replace(_release(tmp_path / "b", demo_paths, seed_file, "r"), dask_address="local:2")
    monkeypatch.setattr(synthetic, "write_part", real)  # a lambda would not pickle
    spied = []
    real_join = synthetic._join
    monkeypatch.setattr(synthetic, "_join", lambda *a: spied.append(a[3]) or real_join(*a))
    on_dask = pipeline.run_release(config)
    assert spied and spied[0] > 1  # joined from several parts
    for f in FILES[1:]:
        assert (serial / f).read_bytes() == (on_dask / f).read_bytes()
