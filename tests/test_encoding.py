from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsynth.rows.encoding import DataError, EncodedTable, decode, encode, onehot, read_table, write_csv
from dpsynth.schema import schema_from_dict

SCHEMA = schema_from_dict(
    {
        "name": "t",
        "columns": [
            {"name": "colour", "type": "categorical", "values": ["red", "blue"], "other": True, "missing": ["?"]},
            {"name": "size", "type": "categorical", "values": ["s", "m", "l"]},
            {"name": "shape", "type": "categorical", "values": ["round", "square"], "missing": ["NA"]},
            {"name": "age", "type": "numeric", "bounds": [0, 100], "bins": 4, "integer": True},
            {"name": "income", "type": "numeric", "edges": [0, 10, 100, 1000], "missing": ["N"]},
        ],
    }
)


def _csv(tmp_path, text: str):
    p = tmp_path / "in.csv"
    p.write_text(text)
    return p


def test_regular_values_and_row_oddities(tmp_path):
    p = _csv(
        tmp_path,
        "colour,size,shape,age,income\n"
        "red,s,round,0,5\n"          # plain
        "blue,l,square,100,1000\n"   # upper bounds go to the last bin
        "green,xl,oval,-5,5000\n"    # unseen categories; out-of-range numbers are clamped
        "?,,NA,abc,N\n"              # missing tokens, empty cell, unparseable number
        " blue ,m, round ,50.5,\n",  # stray spaces; empty numeric cell
    )
    enc = encode(read_table(p, SCHEMA), SCHEMA)
    assert enc.codes.tolist() == [
        [0, 0, 0, 0, 0],
        [1, 2, 1, 3, 2],
        [2, 0, 2, 0, 2],  # colour -> other; size (no other, not nullable) -> fill (first); shape -> missing
        [3, 0, 2, 0, 3],  # '?' -> missing; empty size -> fill; NA -> missing; 'abc' -> fill (lower bound); N -> missing
        [1, 1, 0, 2, 3],
    ]


def test_fill_can_be_declared():
    s = schema_from_dict({"name": "t", "columns": [
        {"name": "c", "type": "categorical", "values": ["a", "b"], "fill": "b"},
        {"name": "x", "type": "numeric", "bounds": [0, 10], "bins": 2, "fill": 7},
    ]})
    enc = encode(pa.table({"c": ["zz", None], "x": [None, 3.0]}), s)
    assert enc.codes.tolist() == [[1, 1], [1, 0]]


def test_parquet_typed_columns(tmp_path):
    s = schema_from_dict({"name": "t", "columns": [
        {"name": "k", "type": "categorical", "values": [1, 2, 3]},
        {"name": "f", "type": "categorical", "values": [1, 2.5]},
        {"name": "b", "type": "categorical", "values": [True, False]},
        {"name": "x", "type": "numeric", "bounds": [0, 10], "bins": 10, "missing": ["N"]},
    ]})
    p = tmp_path / "in.parquet"
    pq.write_table(pa.table({"k": [3, 1, None], "f": [1.0, 2.5, 2.5], "b": [False, True, True], "x": [9.99, None, 10.0]}), p)
    enc = encode(read_table(p, s), s)
    assert enc.codes.tolist() == [[2, 0, 1, 9], [0, 1, 0, 10], [0, 1, 0, 9]]


@pytest.mark.parametrize(
    "text, words",
    [
        ("colour,size,shape,age\nred,s,round,1\n", ["income", "missing"]),
        ("colour,size,shape,age,income,zip\nred,s,round,1,1,02139\n", ["zip", "not in schema"]),
        ("colour,size,shape,age,income\n", ["no rows"]),
        ("colour,colour,size,shape,age,income\nred,red,s,round,1,1\n", ["colour", "more than once"]),
    ],
)
def test_public_problems_raise_naming_the_column(tmp_path, text, words):
    with pytest.raises(DataError) as err:
        read_table(_csv(tmp_path, text), SCHEMA)
    for w in words:
        assert w in str(err.value)


def test_unreadable_inputs(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_table(tmp_path / "absent.csv", SCHEMA)
    odd = tmp_path / "in.xlsx"
    odd.write_bytes(b"PK\x03\x04")
    with pytest.raises(DataError, match="unsupported"):
        read_table(odd, SCHEMA)
    bad = tmp_path / "in.parquet"
    bad.write_bytes(b"not parquet at all, secret-value-123")
    with pytest.raises(DataError) as err:
        read_table(bad, SCHEMA)
    assert "secret-value-123" not in str(err.value)
    ragged = _csv(tmp_path, "colour,size,shape,age,income\nred,s,round,1,1,secret-cell\n")
    with pytest.raises(DataError) as err:
        read_table(ragged, SCHEMA)
    assert "secret-cell" not in str(err.value)


def test_decode_stays_in_bins_and_bounds():
    rng = np.random.default_rng(0)
    n = 20_000
    codes = np.column_stack([
        rng.integers(0, 4, n), rng.integers(0, 3, n), rng.integers(0, 3, n),
        rng.integers(0, 4, n), rng.integers(0, 4, n),
    ])
    enc = EncodedTable(schema=SCHEMA, codes=codes.astype(np.uint8))
    df = decode(enc, rng)
    assert df["colour"][codes[:, 0] == 2].eq("other").all()
    assert df["colour"][codes[:, 0] == 3].isna().all()
    assert df["shape"][codes[:, 2] == 2].isna().all()
    age = df["age"].to_numpy(dtype=float)
    assert np.all(age == np.floor(age)) and age.min() >= 0 and age.max() <= 100
    assert age.max() == 100  # the last bin includes its upper edge
    inc = df["income"].to_numpy(dtype=float)
    present = codes[:, 4] < 3
    assert np.isnan(inc[~present]).all()
    assert inc[present].min() >= 0 and inc[present].max() <= 1000
    # decoding then encoding gives the same codes: every value lands in its own bin
    again = encode(pa.Table.from_pandas(df.astype(object).where(df.notna(), None)), SCHEMA)
    np.testing.assert_array_equal(again.codes, enc.codes)


def test_integer_bin_without_integers_is_refused_by_the_schema():
    # Issue 8: such a bin used to be decoded to a whole number outside it, after measuring.
    import pytest

    from dpsynth.schema import SchemaError

    with pytest.raises(SchemaError, match=r"column 'x'.*\[0.2, 0.4\) holds no whole number"):
        schema_from_dict({"name": "t", "columns": [
            {"name": "x", "type": "numeric", "edges": [0, 0.2, 0.4, 3], "integer": True}]})


def test_onehot():
    enc = EncodedTable(schema=SCHEMA, codes=np.array([[0, 2, 1, 3, 0], [3, 0, 2, 1, 3]], dtype=np.uint8))
    x, feats = onehot(enc)
    assert x.shape == (2, sum(SCHEMA.cardinalities))
    assert x.sum(axis=1).tolist() == [5, 5]
    assert feats[0] == ("colour", 0) and feats[x[1].nonzero()[0][0]] == ("colour", 3)


def test_csv_writes_missing_tokens(tmp_path):
    enc = EncodedTable(schema=SCHEMA, codes=np.array([[3, 0, 2, 1, 3]], dtype=np.uint8))
    write_csv(decode(enc, np.random.default_rng(0)), SCHEMA, tmp_path / "o.csv")
    row = (tmp_path / "o.csv").read_text().splitlines()[1].split(",")
    assert row[0] == "?" and row[2] == "NA" and row[4] == "N"
    assert pd.read_csv(tmp_path / "o.csv", dtype=str, keep_default_na=False).shape == (1, 5)


def test_encoded_parquet_roundtrip(tmp_path):
    enc = EncodedTable(schema=SCHEMA, codes=np.array([[3, 0, 2, 1, 3], [0, 1, 0, 0, 0]], dtype=np.uint8))
    enc.to_parquet(tmp_path / "c.parquet")
    back = EncodedTable.from_parquet(tmp_path / "c.parquet", SCHEMA)
    np.testing.assert_array_equal(back.codes, enc.codes)
