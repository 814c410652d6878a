"""Synthesis streamed in blocks: the same bytes for the same seed whatever ``chunk_rows``,
and methods that hold the whole table refused before any charge when it would not fit."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from dpsynth import pipeline
from dpsynth.rows.encoding import EncodedTable
from dpsynth.pipeline import synthetic
from dpsynth.pipeline.synthetic import BlockRngs, TableSampler, block_sizes, write_synthetic
from dpsynth.precheck import PrecheckError, check_rows
from dpsynth.schema import load_schema

FILES = ("synthetic-codes.parquet", "synthetic.parquet", "synthetic.csv")


def _digests(folder) -> dict[str, str]:
    return {f: hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in FILES}


def test_block_sizes_cover_the_rows():
    assert block_sizes(0, 10) == [0]
    assert block_sizes(10, 10) == [10]
    assert block_sizes(25, 10) == [10, 10, 5]
    with pytest.raises(ValueError):
        block_sizes(-1, 10)


def test_block_generators_depend_on_the_stage_generator_and_the_index_only():
    a, b = BlockRngs(np.random.default_rng(7)), BlockRngs(np.random.default_rng(7))
    assert a(3).random() == b(3).random()
    assert a(3).random() != a(4).random()
    assert BlockRngs(np.random.default_rng(8))(3).random() != b(3).random()


@pytest.fixture
def measured(tmp_path, demo_paths, seed_file):
    """A pgm release measured on the demo table, 1234 rows asked (several blocks of 100)."""
    data, schema_path = demo_paths
    config = pipeline.ReleaseConfig(data=data, schema=schema_path, method="pgm", epsilon=1.0, rows=1234,
                                    out=tmp_path / "out", workspace=tmp_path / "ws", seed_file=seed_file)
    plan = pipeline.prepare(config)
    codes = pipeline.encode_stage(data, plan.schema, config.workspace, plan.data_sha256)
    return plan, pipeline.measure_stage(plan, codes, pipeline.charge_dataset(plan).draw)


@pytest.mark.parametrize("method", ["pgm", "marginals"])
def test_same_bytes_whatever_chunk_rows(tmp_path, demo_paths, seed_file, method):
    """Blocks of 100 rows, chunks of 1, 97, 333 and all rows: byte-identical files."""
    from dpsynth.measurement import Measurement

    data, schema_path = demo_paths
    config = pipeline.ReleaseConfig(data=data, schema=schema_path, method=method, epsilon=1.0, rows=1234,
                                    out=tmp_path / "out", workspace=tmp_path / "ws", seed_file=seed_file)
    plan = pipeline.prepare(config)
    codes = pipeline.encode_stage(data, plan.schema, config.workspace, plan.data_sha256)
    m = Measurement.load(pipeline.measure_stage(plan, codes, pipeline.charge_dataset(plan).draw))
    seen = []
    for chunk_rows in (1, 97, 333, 10_000):
        out = tmp_path / f"chunk-{chunk_rows}"
        out.mkdir()
        sampler = plan.method().sampler(m, plan.schema, 1234, plan.rng("synthesize"))
        written = write_synthetic(out, plan.schema, sampler, plan.rng("synthesize"), plan.rng("decode"),
                                  chunk_rows=chunk_rows, block_rows=100)
        assert written.rows == 1234 and written.row_groups == 13
        assert pq.ParquetFile(str(out / "synthetic.parquet")).metadata.num_row_groups == 13
        seen.append(_digests(out))
    assert all(d == seen[0] for d in seen[1:])
    table = pd.read_parquet(out / "synthetic.parquet")
    csv = pd.read_csv(out / "synthetic.csv", keep_default_na=False, dtype=str)
    assert len(table) == len(csv) == 1234 and list(csv.columns) == plan.schema.names
    enc = EncodedTable.from_parquet(out / "synthetic-codes.parquet", plan.schema)
    assert enc.n == 1234 and len(np.unique(enc.codes, axis=0)) > 50  # not one block repeated


def test_the_stage_writes_the_same_bytes_whatever_chunk_rows(measured, monkeypatch):
    plan, folder = measured
    monkeypatch.setattr(synthetic, "BLOCK_ROWS", 100)
    first = pipeline.synthesize_stage(plan, folder, chunk_rows=97)
    want = _digests(first)
    moved = first.with_name("synthetic-97")
    first.rename(moved)
    second = pipeline.synthesize_stage(plan, folder, chunk_rows=5000)
    assert _digests(second) == want
    assert pq.ParquetFile(str(second / "synthetic-codes.parquet")).metadata.num_row_groups == 13


def test_a_whole_table_is_written_block_by_block(tmp_path, demo_paths):
    schema = load_schema(demo_paths[1])
    codes = np.zeros((250, len(schema.columns)), dtype=np.uint8)
    codes[:, 0] = np.arange(250) % 4
    written = write_synthetic(tmp_path, schema, TableSampler(EncodedTable(schema=schema, codes=codes)),
                              np.random.default_rng(0), np.random.default_rng(1), chunk_rows=7, block_rows=60)
    assert written.row_groups == 5
    back = EncodedTable.from_parquet(tmp_path / "synthetic-codes.parquet", schema)
    assert np.array_equal(back.codes, codes)


def test_a_method_holding_the_whole_table_is_refused_when_it_would_not_fit(monkeypatch, demo_paths):
    schema = load_schema(demo_paths[1])
    monkeypatch.setenv("DPSYNTH_MAX_TABLE_BYTES", str(1 << 20))
    check_rows(10_000_000, schema, streams=True)  # streamed: no limit
    check_rows(None, schema, input_rows=None)  # unknown size: nothing to refuse
    with pytest.raises(PrecheckError, match="DPSYNTH_MAX_TABLE_BYTES"):
        check_rows(10_000_000, schema)
    with pytest.raises(PrecheckError, match="as large as the input"):
        check_rows(None, schema, input_rows=10_000_000)


def test_release_refuses_a_large_parquet_input_for_sds_before_any_charge(tmp_path, demo_paths, monkeypatch):
    """sds holds its whole table: a Parquet input of 5000 rows against a 3 MB limit is
    refused by prepare (no row read, nothing spent); pgm streams and is accepted."""
    data, schema_path = demo_paths
    pq.write_table(pacsv.read_csv(data), tmp_path / "in.parquet")
    monkeypatch.setenv("DPSYNTH_MAX_TABLE_BYTES", str(3_000_000))  # 5000 x 10 x 128 bytes = 6.4 MB
    base = dict(data=tmp_path / "in.parquet", schema=schema_path, epsilon=1.0, out=tmp_path / "out",
                workspace=tmp_path / "ws")
    with pytest.raises(PrecheckError, match="as large as the input"):
        pipeline.prepare(pipeline.ReleaseConfig(method="sds", **base))
    assert not (tmp_path / "ws" / "releases").exists()
    pipeline.prepare(pipeline.ReleaseConfig(method="pgm", **base))


def _reference_csv(df, schema, path) -> None:
    """The CSV writer before streaming (pandas' to_csv over Python strings, with main's
    formula escaping and its quote-everything rule for a carriage return), for comparison."""
    import csv

    from dpsynth.rows.encoding import csv_text

    out = {}
    for col in schema.columns:
        s = df[col.name]
        null = s.isna().to_numpy()
        if col.type == "numeric" and not col.integer:
            text = np.array([repr(float(v)) for v in s.to_numpy(dtype=np.float64, na_value=0.0)], dtype=object)
        elif col.type == "datetime":
            text = np.array(s.dt.strftime("%Y-%m-%d" if col.unit == "day" else "%Y-%m-%dT%H:%M:%S"), dtype=object)
        else:
            text = s.astype(object).to_numpy().copy()
        if col.type == "categorical":
            labels = {v: csv_text(v) for v in (*col.values, col.other_label)}
            text = np.array(pd.Series(text, dtype=object).map(lambda v: labels.get(v, v)), dtype=object)
        text[null] = csv_text(col.missing[0]) if col.nullable else ""
        out[col.name] = text
    has_cr = any(c.type == "categorical" and any("\r" in v for v in (*c.values, *c.missing)) for c in schema.columns)
    pd.DataFrame(out).to_csv(path, index=False, lineterminator="\n",
                             quoting=csv.QUOTE_ALL if has_cr else csv.QUOTE_MINIMAL)


def test_the_vectorised_csv_writer_writes_what_pandas_wrote(tmp_path, demo_paths):
    """Labels with commas, quotes and line breaks, floats of every magnitude, integers,
    missing tokens: the same bytes as the pandas writer it replaced."""
    from dpsynth.rows.encoding import decode, write_csv
    from dpsynth.schema import schema_from_dict

    schema = schema_from_dict({"name": "t", "columns": [
        {"name": "a,b", "type": "categorical", "values": ["x", 'say "hi"', "one, two", "line\nbreak", " pad ",
                                                         "=SUM(A1)", "-3", "@x"], "missing": ["NA"]},
        {"name": "f", "type": "numeric", "bounds": [1e-7, 1e18], "bins": 40, "missing": [""]},
        {"name": "g", "type": "numeric", "bounds": [-5, 5000], "bins": 9},  # Arrow's fast path
        {"name": "i", "type": "numeric", "bounds": [-50, 50], "bins": 7, "integer": True, "missing": ["?"]},
    ]})
    rng = np.random.default_rng(3)
    codes = np.stack([rng.integers(0, c.cardinality, 3000) for c in schema.columns], axis=1).astype(np.uint8)
    df = decode(EncodedTable(schema=schema, codes=codes), rng)
    write_csv(df, schema, tmp_path / "new.csv")
    _reference_csv(df, schema, tmp_path / "old.csv")
    assert (tmp_path / "new.csv").read_bytes() == (tmp_path / "old.csv").read_bytes()
    demo = load_schema(demo_paths[1])
    dcodes = np.stack([rng.integers(0, c.cardinality, 2000) for c in demo.columns], axis=1).astype(np.uint8)
    ddf = decode(EncodedTable(schema=demo, codes=dcodes), rng)
    write_csv(ddf, demo, tmp_path / "d-new.csv")
    _reference_csv(ddf, demo, tmp_path / "d-old.csv")
    assert (tmp_path / "d-new.csv").read_bytes() == (tmp_path / "d-old.csv").read_bytes()
    cr = schema_from_dict({"name": "cr", "columns": [
        {"name": "a", "type": "categorical", "values": ["x\ry", "z"], "missing": ["+NA"]},
        {"name": "f", "type": "numeric", "bounds": [0, 10], "bins": 3, "missing": [""]}]})
    ccodes = np.stack([rng.integers(0, c.cardinality, 500) for c in cr.columns], axis=1).astype(np.uint8)
    cdf = decode(EncodedTable(schema=cr, codes=ccodes), rng)
    write_csv(cdf, cr, tmp_path / "c-new.csv")
    _reference_csv(cdf, cr, tmp_path / "c-old.csv")
    assert (tmp_path / "c-new.csv").read_bytes() == (tmp_path / "c-old.csv").read_bytes()


def test_methods_say_which_hold_the_whole_table(capsys):
    from dpsynth.cli import main

    assert main(["methods", "--verbose"]) == 0
    blocks = {b.split(":", 1)[0]: b for b in capsys.readouterr().out.split("\n\n")}
    for name in ("pgm", "marginals"):
        assert "synthesize streams the synthetic table block by block" in blocks[name]
    assert "synthesize draws the synthetic table in chunks of whole blocks, one held at a time" in blocks["sds"]
    assert "the release repeats records" in blocks["sds"]  # the expanded pool above the switch
    assert "synthesize holds the whole synthetic table" in blocks["private-sampling"]
    assert "measure holds the whole input table" in blocks["private-sampling"]


def test_a_method_states_its_own_footprint_per_cell(monkeypatch, demo_paths):
    """sds holds several int64 copies of its table (5.9 GB at 1M x 20): 320 bytes per cell."""
    from dpsynth.methods import METHODS

    monkeypatch.delenv("DPSYNTH_MAX_TABLE_BYTES", raising=False)  # the default, 4 GiB
    schema = load_schema(demo_paths[1])  # 10 columns
    per_cell = METHODS["sds"].synthesis_bytes_per_cell
    assert per_cell == 320
    check_rows(None, schema, input_rows=1_500_000)  # 1.9 GB at the generic 128 bytes per cell
    with pytest.raises(PrecheckError, match="~320 bytes per cell"):
        check_rows(None, schema, input_rows=1_500_000, bytes_per_cell=per_cell)  # 4.8 GB
