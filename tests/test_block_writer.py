"""The synthetic blocks' Arrow path (session 42): a block decoded to Arrow columns
(``decode_columns``) and its CSV lines joined from them (``csv_block``) write the bytes that
the pandas frame of ``decode`` wrote, on every kind of column, in every file."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pyarrow as pa
import pytest

from dpsynth.pipeline import synthetic
from dpsynth.pipeline.synthetic import TableSampler, values_schema, write_synthetic
from dpsynth.rows import csv_out
from dpsynth.rows.encoding import EncodedTable, decode, decode_columns, write_csv
from dpsynth.schema import schema_from_dict

FILES = ("synthetic-codes.parquet", "synthetic.parquet", "synthetic.csv")

#: Labels with commas, quotes, line breaks and formula starts; floats of every magnitude (both
#: of the float formatter's paths); integers with and without missing codes; an ``other``
#: bucket; datetimes by day and by second, with missing codes.
RICH = {"name": "rich", "columns": [
    {"name": "a,b", "type": "categorical", "values": ["x", 'say "hi"', "one, two", "line\nbreak", " pad ",
                                                     "=SUM(A1)", "-3", "@x"], "missing": ["NA"]},
    {"name": "o", "type": "categorical", "values": ["p", "q"], "other": True},
    {"name": "f", "type": "numeric", "bounds": [1e-7, 1e18], "bins": 40, "missing": [""]},
    {"name": "g", "type": "numeric", "bounds": [-5, 5000], "bins": 9},
    {"name": "i", "type": "numeric", "bounds": [-50, 50], "bins": 7, "integer": True, "missing": ["?"]},
    {"name": "j", "type": "numeric", "bounds": [0, 30], "bins": 4, "integer": True},
    {"name": "day", "type": "datetime", "bounds": ["2020-01-01", "2021-01-01"], "bins": "month", "missing": [""]},
    {"name": "sec", "type": "datetime", "bounds": ["2020-01-01T00:00:00Z", "2020-01-02T00:00:00Z"], "bins": 4},
]}


def _codes(schema, rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, c.cardinality, rows) for c in schema.columns], axis=1).astype(np.uint8)


def test_decoded_columns_hold_the_frames_values_and_lines():
    schema = schema_from_dict(RICH)
    enc = EncodedTable(schema=schema, codes=_codes(schema, 3000, 1))
    frame = decode(enc, np.random.default_rng(5))
    cols = decode_columns(enc, np.random.default_rng(5))
    want = values_schema(schema)
    old = pa.Table.from_pandas(frame, preserve_index=False)
    assert old.schema.equals(want, check_metadata=True)  # the writer's schema, pandas metadata included
    new = pa.Table.from_arrays([c.values for c in cols], names=list(schema.names)).cast(want)
    assert new.equals(old.cast(want))
    assert all(old.column(k).null_count > 0 for k in ("a,b", "f", "i", "day"))
    text = io.StringIO()
    write_csv(frame, schema, text, header=False, codes=enc.codes)
    assert csv_out.csv_block(schema, cols, enc.codes).to_pybytes() == text.getvalue().encode("utf-8")


def test_a_schema_the_arrow_lines_cannot_write_keeps_the_frame():
    """One column, or a label with a carriage return (every cell quoted): no Arrow lines."""
    one = schema_from_dict({"name": "one", "columns": [{"name": "f", "type": "numeric", "bounds": [0, 1], "bins": 3}]})
    cr = schema_from_dict({"name": "cr", "columns": [
        {"name": "a", "type": "categorical", "values": ["x\ry", "z"], "missing": ["+NA"]},
        {"name": "f", "type": "numeric", "bounds": [0, 10], "bins": 3, "missing": [""]}]})
    for schema in (one, cr):
        enc = EncodedTable(schema=schema, codes=_codes(schema, 50, 2))
        assert not csv_out.csv_block_writes(schema)
        assert csv_out.csv_block(schema, decode_columns(enc, np.random.default_rng(1)), enc.codes) is None
        assert hasattr(synthetic._decoded(enc, np.random.default_rng(1)), "columns")  # a DataFrame


def _published(folder, schema, codes, header_blocks: int) -> dict[str, str]:
    folder.mkdir()
    write_synthetic(folder, schema, TableSampler(EncodedTable(schema=schema, codes=codes)), np.random.default_rng(3),
                    np.random.default_rng(4), chunk_rows=header_blocks * 700, block_rows=700)
    return {f: hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in FILES}


@pytest.mark.parametrize("spec", [RICH, {"name": "cr", "columns": [
    {"name": "a", "type": "categorical", "values": ["x\ry", "z"], "missing": ["+NA"]},
    {"name": "f", "type": "numeric", "bounds": [0, 10], "bins": 3, "missing": [""]}]}])
def test_the_published_files_are_those_of_the_frame_writer(tmp_path, monkeypatch, spec):
    """Blocks written through Arrow columns and lines, and the same blocks through
    ``decode``'s frame (the writer before session 42): the same bytes in the three files."""
    schema = schema_from_dict(spec)
    codes = _codes(schema, 2500, 6)
    fast = _published(tmp_path / "fast", schema, codes, 2)
    monkeypatch.setattr(synthetic, "csv_block_writes", lambda s: False)
    slow = _published(tmp_path / "slow", schema, codes, 1)
    assert fast == slow
