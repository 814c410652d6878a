"""Chunked and partitioned reading: encode and measure give today's results in bounded memory.

The golden digests below were computed by the code before row sources existed (main at
e62b005, the whole table in memory): every chunking, partitioning and runner must
reproduce them bit for bit with the same seed.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import dpsynth.methods.sds.tuple_counts as tuple_counts
from dpsynth.rows.encode_parts import encode_to_parts, input_sha256
from dpsynth.rows.encoding import DataError, EncodedTable, encode, read_table
from dpsynth.methods import get_method
from dpsynth.privacy.budget import Budget, Ledger
from dpsynth.rows.rowsource import ParquetPart, RowSource, SerialRunner, add_counts, advance, count_marginals, load_rows
from dpsynth.rows.counting import count_marginals as count_in_memory, column_major
from dpsynth.schema import schema_from_dict

# Digests of the whole-table measurement (main at e62b005 for marginals and pgm, all rows
# re-recorded when the noise samplers became exact, issue 23 section 6; the sds rows
# were refreshed when sds's measurement gained auto_length's fields, issue 9, and again when it
# stated its 2- and 3-way tables in ``measured``: its meta, aggregates, 1-way tables and record
# count were checked unchanged then; the pgm AIM row when its meta gained "units", issue 26:
# without that key its digest is the one recorded before, 38a5d84a...); the sds rows with
# public 1-way codes again when their Delta_1 became p and the stated record count the DP
# count pooled with the 1-way totals (issue 27 §3; the one_way="paper" row is unchanged, and
# the chunked paths were checked to give the new digests before recording them). Every chunked,
# Parquet and Dask path below must reproduce them byte for byte.
GOLDEN = {
    ("marginals", "{}"): "4d115ac9d6031197affcbd4bd3d0264fc4e3f490d87134f58ef6876793dcb7ae",
    ("pgm", '{"degree": 2, "select": "aim", "units": 12}'):
        "fda6ad84bc414575634a0403734bc39e1ed7ac72c2fb3ab8ccb7d3fc4e57e255",
    ("pgm", '{"select": "mst"}'): "539257aff854faefdbd2581ba03b4fd4396353e6f5b326a2ff06edf156b6cb8e",
    ("sds", '{"empty_cells": "deficit", "fabrication_mode": "balanced", "percentile_percentage": 20, '
            '"reporting_length": 4}'): "5c5d55515786e5008c6d562dfb8984a2895b31a0b55297df0a34a6b4840eadb5",
    ("sds", '{"empty_cells": "deficit", "fabrication_mode": "minimize", "percentile_percentage": 30}'):
        "485804464766e13cd6c770f822d4ed397881a0a3fbed4c3c7335e06d149f7310",
    ("sds", '{"empty_cells": "deficit", "one_way": "paper", "percentile_percentage": 40}'):
        "c36b1ed19f0e1bd8af959bf5f07cb476d244c79012392e304842de9ed4e01d12",
    ("sds", '{"empty_cells": "value", "reporting_length": 2}'):
        "5c5fda5e3dec92cec9244c638d38b5e7ea02b0fd208abb148d30135bcc5136d9",
    ("sds", '{"percentile_percentage": 10, "reporting_length": 4}'):
        "de6b9beca42e5828407081669ffeaa1fce8b848a1e2a142405d601dc8bca68db",
    ("sds", "{}"): "a9c92ab445af9395839a34bf658b83ef40d776446e04453b34d6a4e393e8adb4",
}


def table(n: int = 3000, seed: int = 1) -> EncodedTable:
    """Correlated codes, a missing code in every third column."""
    rng = np.random.default_rng(seed)
    cards = [3, 4, 2, 5, 3, 6, 2, 4]
    cols = [{"name": f"c{j}", "type": "categorical", "values": [f"v{v}" for v in range(c)],
             **({"missing": [""]} if j % 3 == 0 else {})} for j, c in enumerate(cards)]
    schema = schema_from_dict({"name": "t", "columns": cols})
    z = rng.integers(0, 3, n)
    codes = np.empty((n, len(cards)), dtype=np.uint8)
    for j, c in enumerate(schema.cardinalities):
        x = (z + rng.integers(0, 2, n) * (j % 2)) % c
        noise = rng.random(n) < 0.3
        x[noise] = rng.integers(0, c, noise.sum())
        codes[:, j] = x
    return EncodedTable(schema=schema, codes=codes)


def digest(m) -> str:
    h = hashlib.sha256()
    for nm in m.measured:
        h.update(repr(nm.attrs).encode())
        h.update(np.ascontiguousarray(nm.counts, dtype=np.float64).tobytes())
        h.update(repr(nm.stddev).encode())
    if m.records is not None:
        h.update(repr((m.records.value, m.records.stddev)).encode())
    for k, df in sorted(m.tables.items()):
        h.update(k.encode())
        h.update(df.to_csv(index=False).encode())
    h.update(json.dumps(dict(m.meta), sort_keys=True, default=str).encode())
    return h.hexdigest()


def measure_digests(codes_for, t: EncodedTable) -> dict[tuple[str, str], str]:
    out = {}
    for name, text in GOLDEN:
        method = get_method(name, json.loads(text))
        budget = Budget(epsilon=1.0, delta=1e-6)
        ledger = Ledger(budget, method.plan(t.schema, budget))
        out[(name, text)] = digest(method.measure(codes_for(t), ledger, np.random.default_rng(11)))
    return out


def test_in_memory_measurement_is_todays():
    assert measure_digests(lambda t: t, table()) == GOLDEN


@pytest.mark.parametrize("chunk_rows,part_rows", [
    (700, 2100), pytest.param(97, 1000, marks=pytest.mark.slow), pytest.param(5000, None, marks=pytest.mark.slow)])
def test_chunked_measurement_is_todays(chunk_rows, part_rows, monkeypatch):
    capped = []
    real = tuple_counts.capped_counts

    def spy(cm, cards, cand, rows, allowed, rng):
        capped.append(rows.size)
        return real(cm, cards, cand, rows, allowed, rng)

    monkeypatch.setattr(tuple_counts, "capped_counts", spy)
    got = measure_digests(lambda t: RowSource.from_table(t, chunk_rows=chunk_rows, part_rows=part_rows), table())
    assert got == GOLDEN
    assert sum(capped) > 0  # the random choices of capped records were exercised


def test_chunked_parquet_measurement_is_todays(tmp_path):
    t = table()
    path = tmp_path / "codes.parquet"
    pq.write_table(t.to_arrow(), path, row_group_size=500)
    got = measure_digests(lambda _: RowSource.from_parquet(path, t.schema, chunk_rows=300, part_rows=1000), t)
    assert got == GOLDEN


def test_count_marginals_sums_partitions_exactly():
    t = table(2000, 3)
    subsets = [(0,), (1, 3), (0, 2, 5), (4, 6, 7)]
    want = count_in_memory(column_major(t.codes), t.schema.cardinalities, subsets)
    got = count_marginals(RowSource.from_table(t, chunk_rows=77, part_rows=333), subsets)
    assert set(got) == set(want)
    for s in want:
        assert got[s].dtype == np.int64 and np.array_equal(got[s], want[s])
    wrong = count_marginals(RowSource.from_table(EncodedTable(schema=t.schema, codes=t.codes[:-1])), subsets)
    assert not np.array_equal(wrong[(0,)], want[(0,)])


def test_advance_equals_sequential_draws():
    rng = np.random.default_rng(5)
    rng.integers(0, 10, size=1, dtype=np.uint32)  # leaves a buffered 32-bit half
    jumped = advance(rng, 7 * 3)
    rng.random((7, 3))
    assert np.array_equal(jumped.random((4, 3)), rng.random((4, 3)))
    assert np.array_equal(jumped.integers(0, 2**32, size=5, dtype=np.uint32),
                          rng.integers(0, 2**32, size=5, dtype=np.uint32))
    assert not np.array_equal(advance(rng, 1).random(3), rng.random(3))


def test_parquet_chunks_are_bounded(tmp_path):
    t = table(1000)
    path = tmp_path / "codes.parquet"
    pq.write_table(t.to_arrow(), path, row_group_size=400)
    src = RowSource.from_parquet(path, t.schema, chunk_rows=64)
    assert all(isinstance(p, ParquetPart) for p in src.parts) and src.rows == 1000
    sizes = [cm.shape[1] for p in src.parts for cm in p.chunks(t.schema, src.chunk_rows)]
    assert max(sizes) <= 64 and sum(sizes) == 1000
    assert np.array_equal(load_rows(src, "x").codes, t.codes)


def _raw(n: int, seed: int) -> tuple[object, pa.Table]:
    rng = np.random.default_rng(seed)
    schema = schema_from_dict({"name": "raw", "columns": [
        {"name": "a", "type": "categorical", "values": ["x", "y", "z"], "other": True, "missing": ["NA"]},
        {"name": "b", "type": "numeric", "bounds": [0, 100], "bins": 8, "missing": ["NA"]},
    ]})
    a = np.array(["x", "y", "z", "w", "NA", " y "], dtype=object)[rng.integers(0, 6, n)]
    b = rng.normal(50, 40, n).round(1).astype(str).astype(object)
    b[rng.random(n) < 0.1] = "NA"
    b[rng.random(n) < 0.05] = "oops"
    return schema, pa.table({"a": a, "b": b})


def test_encode_to_parts_gives_the_codes_of_encode(tmp_path):
    schema, raw = _raw(5000, 0)
    whole = encode(raw, schema).codes
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    for i, start in enumerate(range(0, 5000, 1700)):  # a folder of CSV files
        pacsv.write_csv(raw.slice(start, 1700), csv_dir / f"part-{i}.csv")
    one_csv = tmp_path / "all.csv"
    pacsv.write_csv(raw, one_csv)
    pq_dir = tmp_path / "pq"
    pq_dir.mkdir()
    pq.write_table(raw.slice(0, 2500), pq_dir / "a.parquet", row_group_size=300)
    pq.write_table(raw.slice(2500), pq_dir / "b.parquet", row_group_size=1000)
    for i, src in enumerate((csv_dir, one_csv, pq_dir)):
        out = encode_to_parts(src, schema, tmp_path / f"codes{i}", chunk_rows=256)
        assert out.rows == 5000
        assert np.array_equal(load_rows(out, "x").codes, whole), src
        assert np.array_equal(EncodedTable.from_parquet(tmp_path / f"codes{i}", schema).codes, whole)
    assert encode(read_table(one_csv, schema), schema).codes.tolist() == whole.tolist()


def test_encode_to_parts_refuses_bad_inputs(tmp_path):
    schema, raw = _raw(10, 0)
    empty = tmp_path / "empty.csv"
    empty.write_text("a,b\n")
    with pytest.raises(DataError, match="no rows"):
        encode_to_parts(empty, schema, tmp_path / "o1")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    pacsv.write_csv(raw, mixed / "x.csv")
    pq.write_table(raw, mixed / "y.parquet")
    with pytest.raises(DataError, match="mixes CSV and Parquet"):
        encode_to_parts(mixed, schema, tmp_path / "o2")
    extra = tmp_path / "extra.csv"
    pacsv.write_csv(raw.append_column("secret", pa.array(["s"] * 10)), extra)
    with pytest.raises(DataError, match="secret"):
        encode_to_parts(extra, schema, tmp_path / "o3")


def _folder_digest(folder) -> list[tuple[str, bytes]]:
    return [(f.name, f.read_bytes()) for f in sorted(folder.iterdir())]


def test_a_large_input_is_encoded_on_a_pool_with_the_same_bytes(tmp_path, monkeypatch):
    """Without a runner, an input of several partitions and at least POOL_MIN_BYTES is encoded
    on a process pool, each partition to its own file: the same bytes as in this process, and
    the rows counted as the rounds end."""
    from dpsynth import progress
    from dpsynth.rows import encode_parts

    schema, raw = _raw(6000, 3)
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(3):
        pq.write_table(raw.slice(2000 * i, 2000), folder / f"p{i}.parquet", row_group_size=700)
    serial = encode_to_parts(folder, schema, tmp_path / "serial", chunk_rows=500)
    parts = encode_parts.input_parts(folder, schema, 500)
    assert encode_parts.pooled(parts) == 1  # a few kB: not worth a pool's start
    monkeypatch.setattr(encode_parts, "POOL_MIN_BYTES", 0)
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "2")
    assert encode_parts.pooled(parts) == 2 and encode_parts.pooled(parts[:1]) == 1
    seen = []

    class Watch:
        def count(self, label, done, total=None, unit=""):
            seen.append((label, done))

    calls = []
    real = encode_parts._on_pool
    monkeypatch.setattr(encode_parts, "_on_pool", lambda *a: calls.append(a[-1]) or real(*a))
    with progress.reporting(Watch()):
        pooled = encode_to_parts(folder, schema, tmp_path / "pooled", chunk_rows=500)
    assert calls == [2]
    assert pooled.rows == serial.rows == 6000
    assert _folder_digest(tmp_path / "pooled") == _folder_digest(tmp_path / "serial")
    counted = [d for label, d in seen if label == "encode"]
    assert len(parts) == 9 and len(counted) == 5 and counted[-1] == 6000  # after each round of two partitions
    assert counted == sorted(counted) and counted[0] == 1400
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "1")
    assert encode_parts.pooled(parts) == 1


def test_a_cut_row_on_the_pool_names_its_file(tmp_path, monkeypatch):
    """A CSV whose last row is cut, encoded on the pool: the worker's DataError reaches the
    caller naming the file and quoting no row."""
    from dpsynth.rows import encode_parts

    schema, raw = _raw(300, 4)
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(3):
        pacsv.write_csv(raw.slice(100 * i, 100), folder / f"p{i}.csv")
    cut = folder / "p1.csv"
    cut.write_text(cut.read_text().rstrip("\n") + "\n\"secret-value\n")
    monkeypatch.setattr(encode_parts, "POOL_MIN_BYTES", 0)
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "2")
    with pytest.raises(DataError, match="p1.csv") as err:
        encode_to_parts(folder, schema, tmp_path / "codes")
    assert "secret" not in str(err.value)


def test_input_hash_of_a_folder_covers_every_file(tmp_path):
    schema, raw = _raw(100, 0)
    folder = tmp_path / "in"
    folder.mkdir()
    pacsv.write_csv(raw.slice(0, 50), folder / "a.csv")
    pacsv.write_csv(raw.slice(50), folder / "b.csv")
    before = input_sha256(folder)
    pacsv.write_csv(raw.slice(49), folder / "b.csv")
    assert input_sha256(folder) != before


class _Elsewhere(SerialRunner):
    """A runner that is not this process's (stands for a Dask cluster)."""

    local = False


def test_row_methods_refused_on_a_remote_runner():
    t = table(100)
    src = RowSource.from_table(t, runner=_Elsewhere())
    assert src.remote
    with pytest.raises(ValueError, match="'one-step' reads every row"):
        load_rows(src, "one-step")


@pytest.mark.slow
def test_dask_local_cluster_gives_the_single_process_measurement(tmp_path):
    """Two worker processes of a LocalCluster started here: encode and measure per partition."""
    pytest.importorskip("distributed")
    from dpsynth.rows.dask_runner import connect

    t = table()
    path = tmp_path / "codes.parquet"
    pq.write_table(t.to_arrow(), path, row_group_size=500)
    schema, raw = _raw(4000, 1)
    folder = tmp_path / "raw"
    folder.mkdir()
    for i in range(4):
        pq.write_table(raw.slice(1000 * i, 1000), folder / f"p{i}.parquet", row_group_size=400)
    with connect("local:2") as runner:
        got = measure_digests(lambda _: RowSource.from_parquet(path, t.schema, chunk_rows=300, part_rows=700,
                                                               runner=runner), t)
        enc = encode_to_parts(folder, schema, tmp_path / "codes", chunk_rows=128, runner=runner)
        assert len(enc.parts) >= 4
        remote = count_marginals(enc, [(0, 1)])
    assert got == GOLDEN
    want = count_in_memory(column_major(encode(raw, schema).codes), schema.cardinalities, [(0, 1)])
    assert np.array_equal(remote[(0, 1)], want[(0, 1)])


@pytest.mark.parametrize("method", ["sds", "pgm", "microaggregation-dp"])
def test_stages_in_small_chunks_write_todays_measurement(tmp_path, demo_paths, seed_file, method):
    """encode_stage + measure_stage in chunks of a few rows write the bytes the whole-table
    path writes (the table read at once, ``measure`` on the EncodedTable)."""
    from dpsynth import pipeline

    data, schema_path = demo_paths
    config = pipeline.ReleaseConfig(data=data, schema=schema_path, method=method, epsilon=1.0,
                                    out=tmp_path / "out", workspace=tmp_path / "ws", seed_file=seed_file)
    plan = pipeline.prepare(config)
    codes = pipeline.encode_stage(data, plan.schema, config.workspace, plan.data_sha256, chunk_rows=333)
    assert len(list(codes.glob("part-*.parquet"))) == 1 and RowSource.from_parquet(codes, plan.schema).rows > 333
    folder = pipeline.measure_stage(plan, codes, pipeline.charge_dataset(plan).draw, chunk_rows=97)
    whole = encode(read_table(data, plan.schema), plan.schema)
    assert np.array_equal(EncodedTable.from_parquet(codes, plan.schema).codes, whole.codes)
    ledger = Ledger(plan.budget, plan.charges)
    today = plan.method().measure(whole, ledger, plan.rng("measure"))
    today.save(tmp_path / "today")
    for name in ("measurement.parquet", "measurement.json"):
        assert (folder / name).read_bytes() == (tmp_path / "today" / name).read_bytes(), name


def test_config_refuses_bad_chunk_rows_and_dask_address(tmp_path, demo_paths):
    from dpsynth.pipeline import ReleaseConfig

    data, schema_path = demo_paths
    base = dict(data=data, schema=schema_path, method="sds", epsilon=1.0, out=tmp_path / "out")
    with pytest.raises(ValueError, match="chunk_rows"):
        ReleaseConfig(**base, chunk_rows=0)
    with pytest.raises(ValueError, match="dask address 'nowhere'"):
        ReleaseConfig(**base, dask_address="nowhere")
    with pytest.raises(ValueError, match="local:N"):
        ReleaseConfig(**base, dask_address="local:0")
    assert ReleaseConfig(**base, dask_address="tcp://10.0.0.1:8786", chunk_rows=5).chunk_rows == 5


@pytest.mark.slow
def test_release_on_a_local_dask_cluster_is_the_single_process_release(tmp_path, demo_paths, seed_file):
    """run_release with dask_address='local:2' publishes the bytes of the default run."""
    pytest.importorskip("distributed")
    from dpsynth import pipeline

    data, schema_path = demo_paths
    folders = []
    for label, extra in (("serial", {}), ("dask", {"dask_address": "local:2", "chunk_rows": 700})):
        config = pipeline.ReleaseConfig(data=data, schema=schema_path, method="sds", epsilon=1.0,
                                        out=tmp_path / label / "out", workspace=tmp_path / label / "ws",
                                        seed_file=seed_file, name="same", **extra)
        folders.append(pipeline.run_release(config))
    for name in ("measurement.parquet", "measurement.json", "synthetic.parquet", "synthetic.csv"):
        assert (folders[0] / name).read_bytes() == (folders[1] / name).read_bytes(), name


def test_add_counts_accepts_read_only_arrays():
    frozen = np.arange(4, dtype=np.int64)
    frozen.flags.writeable = False
    out = add_counts({(0,): frozen}, {(0,): np.ones(4, dtype=np.int64)})
    assert out[(0,)].tolist() == [1, 2, 3, 4] and frozen.tolist() == [0, 1, 2, 3]


def test_a_chunk_with_a_code_outside_the_domain_is_refused(tmp_path):
    t = table(50)
    bad = t.codes.copy()
    bad[7, 2] = 2  # column c2 has 2 codes: 0 and 1
    path = tmp_path / "codes.parquet"
    pq.write_table(pa.table({name: bad[:, j] for j, name in enumerate(t.schema.names)}), path)
    with pytest.raises(ValueError, match=r"columns \['c2'\]"):
        load_rows(RowSource.from_parquet(path, t.schema, chunk_rows=16), "x")
