"""The datetime column type: schema, encoding, decoding, the gate's checks, a release."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import yaml

import dpsynth
from dpsynth.rows.encoding import DataError, EncodedTable, decode, encode
from dpsynth.schema.draft import draft_from_dataframe
from dpsynth.measurement import Measurement
from dpsynth.schema import SchemaError, schema_from_dict
from dpsynth.gate.validation import record_checks
from tests.conftest import ROOT

VISIT = {"name": "visit", "type": "datetime", "bounds": ["2020-01-01", "2021-01-01"], "bins": "month",
         "unit": "day", "missing": [""]}


def _schema(*extra):
    return schema_from_dict({"name": "visits", "columns": [VISIT, *extra]})


def test_schema_bins_in_time_units_and_round_trip():
    col = _schema().column("visit")
    assert col.n_regular == 12 and col.cardinality == 13
    assert col.labels()[:2] == ["[2020-01-01, 2020-02-01)", "[2020-02-01, 2020-03-01)"]
    assert col.labels()[11] == "[2020-12-01, 2021-01-01]"
    hours = schema_from_dict({"name": "t", "columns": [
        {"name": "t", "type": "datetime", "bounds": ["2020-01-01T00:00:00Z", dt.date(2020, 1, 2)], "bins": 4}]})
    assert hours.column("t").labels()[1] == "[2020-01-01T06:00:00, 2020-01-01T12:00:00)"
    assert hours.column("t").unit == "second"
    for s in (_schema(), hours):
        again = schema_from_dict(yaml.safe_load(s.to_yaml()))
        assert again == s and again.fingerprint() == s.fingerprint()
    import jsonschema

    spec = json.loads((ROOT / "schemas" / "dataset-schema.json").read_text())
    jsonschema.validate({"name": "visits", "columns": [VISIT]}, spec)
    jsonschema.validate(yaml.safe_load(_schema().to_yaml()), spec)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"unit": "fortnight"}, "unit must be one of"),
        ({"bins": "decade"}, "bins must be a whole number"),
        ({"bounds": ["2020-01-01", "not a date"]}, "bounds: 'not a date' is not a date"),
        ({"bounds": ["2021-01-01", "2020-01-01"]}, "low < high"),
        ({"integer": True}, "'integer' is not for datetime columns"),
        ({"bounds": [1, 2]}, "expected a date or time"),
    ],
)
def test_bad_datetime_columns_name_the_column_and_the_fix(change, words):
    with pytest.raises(SchemaError, match="column 'visit'") as info:
        schema_from_dict({"name": "t", "columns": [{**VISIT, **change}]})
    assert words in str(info.value)
    with pytest.raises(SchemaError, match="'unit' is for datetime columns"):
        schema_from_dict({"name": "t", "columns": [{"name": "x", "type": "numeric", "bounds": [0, 1], "bins": 2,
                                                     "unit": "day"}]})


def test_encoding_maps_every_form_and_never_raises():
    s = _schema()
    cells = ["2020-01-05", "2020-03-31T23:00:00", "", "garbage", "2019-05-01", "2020-12-31", None, "9999-99-99",
             "2020-03-31T23:30:00+02:00"]
    codes = encode(pa.table({"visit": pa.array(cells, pa.string())}), s).codes[:, 0]
    # in range -> month; empty / unparseable -> missing (12); before / after -> clamped to the ends
    assert codes.tolist() == [0, 2, 12, 12, 0, 11, 12, 12, 2]
    typed = pd.to_datetime(pd.Series(["2020-01-05", None, "2020-06-30 23:59"]), format="ISO8601")
    assert encode(pa.table({"visit": pa.array(typed)}), s).codes[:, 0].tolist() == [0, 12, 5]
    aware = typed.dt.tz_localize("Europe/Paris")  # 2020-06-30 23:59 +02:00 is June 30 21:59 UTC
    assert encode(pa.table({"visit": pa.array(aware)}), s).codes[:, 0].tolist() == [0, 12, 5]
    dates = pa.array([dt.date(2020, 2, 3), dt.date(2020, 11, 30)])
    assert encode(pa.table({"visit": dates}), s).codes[:, 0].tolist() == [1, 10]
    with pytest.raises(DataError, match="column 'visit'.*timestamps, dates or ISO 8601 text"):
        encode(pa.table({"visit": pa.array([1.5, 2.5])}), s)  # a public problem: the stored type


def test_decoding_gives_timestamps_inside_their_bin_at_the_unit():
    s = _schema()
    codes = np.repeat(np.arange(13), 50).astype(np.uint8)[:, None]
    out = decode(EncodedTable(schema=s, codes=codes), np.random.default_rng(3))["visit"]
    assert str(out.dtype) == "datetime64[s]" and out.isna().sum() == 50
    edges = pd.to_datetime(list(s.column("visit").to_dict()["edges"]))
    values = out.to_numpy()
    for k in range(12):
        got = pd.DatetimeIndex(values[codes[:, 0] == k])
        assert (got >= edges[k]).all() and (got < edges[k + 1]).all() and (got == got.normalize()).all()
    again = encode(pa.table({"visit": pa.array(out)}), s).codes[:, 0]
    assert (again == codes[:, 0]).all()


def _visits(n: int = 3000, missing: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    days = rng.integers(0, 366, n)
    df = pd.DataFrame({"visit": pd.Timestamp("2020-01-01") + pd.to_timedelta(days, unit="D"),
                       "ward": np.where(days < 182, "a", "b"), "age": rng.integers(0, 100, n)})
    if missing:
        df.loc[::50, "visit"] = pd.NaT
    return df


def test_a_datetime_column_survives_a_release(tmp_path):
    # sds on nullable columns can fail its own gate (issue 9): the nullable case runs with marginals below
    visit = {k: v for k, v in VISIT.items() if k != "missing"}
    schema = {"name": "visits", "columns": [
        visit, {"name": "ward", "type": "categorical", "values": ["a", "b"]},
        {"name": "age", "type": "numeric", "bounds": [0, 100], "bins": 10, "integer": True}]}
    rel = dpsynth.release(_visits(missing=False), schema, method="sds", epsilon=4.0, rows=1500, seed=b"datetime-test-seed-0001",
                          out=tmp_path / "out", workspace=tmp_path / "ws")
    syn = rel.synthetic
    assert str(syn["visit"].dtype).startswith("datetime64") and len(syn) == 1500
    visits = syn["visit"].dropna()
    assert visits.min() >= pd.Timestamp("2020-01-01") and visits.max() <= pd.Timestamp("2021-01-01")
    assert (visits == visits.dt.normalize()).all()  # unit: day
    # the month-ward dependence of the input (ward a: first half of the year) is kept
    first_half = syn.loc[syn["visit"].dt.month <= 6, "ward"]
    assert (first_half == "a").mean() > 0.8
    assert rel.manifest["validation"]["success"]
    assert dpsynth.load_release(rel.path).synthetic.shape == syn.shape  # verify re-checks the bounds
    csv = pd.read_csv(rel.path / "synthetic.csv", dtype=str, keep_default_na=False)
    assert csv["visit"].str.fullmatch(r"\d{4}-\d{2}-\d{2}").all()
    published = schema_from_dict(yaml.safe_load((rel.path / "schema.yaml").read_text()))
    assert published.column("visit") == schema_from_dict(schema).column("visit")


def test_checks_reject_a_wrong_type_or_an_out_of_bounds_time(tmp_path):
    from dpsynth.gate import run_gate

    schema = {"name": "visits", "columns": [VISIT, {"name": "ward", "type": "categorical", "values": ["a", "b"]}]}
    rel = dpsynth.release(_visits().drop(columns="age"), schema, method="marginals", epsilon=4.0, rows=400,
                          seed=b"datetime-test-seed-0002", out=tmp_path / "out", workspace=tmp_path / "ws")
    s = schema_from_dict(schema)
    work = next((tmp_path / "ws" / "releases").iterdir())
    codes = EncodedTable.from_parquet(next(work.glob("synthetic*")) / "synthetic-codes.parquet", s)
    m = Measurement.load(work / "measurement")
    table = rel.synthetic.copy()
    assert table["visit"].isna().any() and rel.manifest["validation"]["success"]
    csv = pd.read_csv(rel.path / "synthetic.csv", dtype=str, keep_default_na=False)
    assert csv["visit"].str.fullmatch(r"\d{4}-\d{2}-\d{2}|").all() and (csv["visit"] == "").any()
    assert run_gate(table, codes, m, 400)["success"]
    as_text = table.assign(visit=table["visit"].dt.strftime("%Y-%m-%d"))
    assert "visit: type" in run_gate(as_text, codes, m, 400)["failed"]
    late = table.assign(visit=table["visit"].fillna(pd.Timestamp("2020-06-01")) + pd.Timedelta(days=400))
    assert "visit: in_domain" in run_gate(late, codes, m, 400)["failed"]
    assert not next(c for c in record_checks(late, s, 400) if c["name"].startswith("visit: values"))["success"]


def test_drafting_recognises_dates_and_rounds_to_the_calendar():
    draft = draft_from_dataframe(_visits(), "visits").schema
    visit = next(c for c in draft["columns"] if c["name"] == "visit")
    assert {k: v for k, v in visit.items() if k != "missing"} == {
        "name": "visit", "type": "datetime", "bounds": ["2020-01-01", "2021-01-01"], "bins": "month",
        "unit": "day", "drafted_from_data": ["bounds"]}
    text = pd.DataFrame({"t": ["2021-05-01T10:00:00", "2021-05-03T11:30:00"] * 20})
    t = draft_from_dataframe(text, "x").schema["columns"][0]
    assert (t["type"], t["bounds"], t["bins"], t["unit"]) == ("datetime", ["2021-05-01", "2021-05-04"], "day", "second")
    assert draft_from_dataframe(pd.DataFrame({"y": [2019, 2020] * 20}), "x").schema["columns"][0]["type"] == "numeric"
