"""Schema drafting (`dpsynth schema infer`, Schema.from_dataframe) and the unreviewed-draft refusal."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from dpsynth import pipeline
from dpsynth.cli import main
from dpsynth.rows.encoding import read_table
from dpsynth.schema.draft import PLACEHOLDER, draft_from_dataframe, draft_from_table, natural_key, nice_bounds
from dpsynth.schema import Schema, SchemaError, load_schema, schema_from_dict


@pytest.mark.parametrize(
    "lo, hi, bins, integer, expected",
    [
        (17, 90, 10, True, (10, 100, 9)),        # age: step 10, top strictly above the max
        (0, 99999, 10, True, (0, 100000, 10)),   # capital-gain
        (0.013, 0.87, 10, False, (0.0, 0.9, 9)),
        (-3.2, 41.0, 10, False, (-5.0, 45.0, 10)),
        (1234.5, 1234.5, 10, False, (1200.0, 1400.0, 1)),  # constant: one step around it
        (3, 3, 10, True, (3, 4, 1)),
    ],
)
def test_bounds_rounded_outward_to_round_steps(lo, hi, bins, integer, expected):
    low, high, n = nice_bounds(lo, hi, bins, integer)
    assert (low, high, n) == pytest.approx(expected)
    assert low <= lo and high >= hi and (high > hi if integer else True)
    step = (high - low) / n
    mantissa = step / 10 ** np.floor(np.log10(step))
    assert round(mantissa, 9) in (1.0, 2.0, 5.0)


def _frame(rng: np.random.Generator, n: int = 400) -> pd.DataFrame:
    return pd.DataFrame({
        "age": rng.integers(17, 91, n),                                   # wide integers
        "kids": rng.integers(0, 4, n),                                    # few integers (codes)
        "score": rng.uniform(0.013, 0.87, n),
        "city": ["a"] * (n - 60) + ["b"] * 57 + ["rare1", "rare2", "zz-unique"],
        "zip": ["01234"] * (n // 2) + ["02345"] * (n - n // 2),
    })


def test_draft_keeps_integers_numeric_and_rounds_bounds():
    df = _frame(np.random.default_rng(1))
    d = draft_from_dataframe(df, "t").schema
    cols = {c["name"]: c for c in d["columns"]}
    assert cols["age"]["type"] == "numeric" and cols["age"]["integer"] is True
    assert cols["age"]["bounds"] == [10, 100] and cols["age"]["bins"] == 9
    assert all(type(b) is int for b in cols["age"]["bounds"])
    assert cols["kids"] == {"name": "kids", "type": "numeric", "bounds": [0, 4], "bins": 4, "integer": True,
                            "drafted_from_data": ["bounds"]}
    lo, hi = cols["score"]["bounds"]
    assert lo < df["score"].min() and hi > df["score"].max() and [lo, hi] == [0, 0.9]
    assert cols["zip"]["type"] == "categorical"  # leading zeros: labels, not numbers
    assert d["draft"] is True
    # the YAML keeps numbers as numbers, and loads as a draft
    text = draft_from_dataframe(df, "t").to_yaml()
    age_line = next(line for line in text.splitlines() if "name: age" in line)
    assert "bounds: [10, 100]" in age_line and "'10'" not in text
    s = schema_from_dict(yaml.safe_load(text))
    assert s.draft and s.column("age").integer and s.column("age").edges[0] == 10.0


def test_infinite_values_take_no_part_in_the_bounds_nor_in_an_error():
    df = pd.DataFrame({"x": ["1.5", "inf", "2.5"] * 10})
    col = draft_from_dataframe(df, "t").schema["columns"][0]
    # numeric from the finite values (was: a list of categories, 'inf' folded into other)
    assert col["type"] == "numeric" and col["bounds"] == [1.5, 2.5]
    only_inf = draft_from_dataframe(pd.DataFrame({"x": ["inf", "-inf"] * 15}), "t").schema["columns"][0]
    assert only_inf["type"] == "categorical"  # no finite value: no bounds to take
    with pytest.raises(ValueError) as info:
        nice_bounds(-7.25, float("inf"), 10)
    assert "7.25" not in str(info.value)


def test_numbers_whose_range_overflows_a_float_are_left_out_saying_so_not_as_an_identifier():
    rng = np.random.default_rng(4)
    huge = [repr(float(v)) for v in rng.normal(0, 1, 200) * 10.0 ** rng.integers(-5, 300, 200)]
    huge[:3] = ["1e308", "-1.7976931348623157e308", "inf"]
    d = draft_from_dataframe(pd.DataFrame({"measure": huge, "k": ["a", "b"] * 100}), "t")
    assert [c["name"] for c in d.schema["columns"]] == ["k"]
    why = d.left_out["measure"]
    assert why.startswith("its values are numbers whose range overflows a float") and "identifier" not in why
    assert "near 1.8e308" in d.to_yaml() and "1.797" not in d.to_yaml()  # the note names the limit, no value
    # a wide range that fits is still drafted numeric
    fits = draft_from_dataframe(pd.DataFrame({"x": ["1e300", "-1e300", "5"] * 10}), "t").schema["columns"][0]
    assert fits["type"] == "numeric"


def test_rare_values_are_not_listed_but_fold_into_other():
    df = _frame(np.random.default_rng(2))
    d = draft_from_dataframe(df, "t", min_count=20)
    city = next(c for c in d.schema["columns"] if c["name"] == "city")
    assert city["values"] == ["a", "b"] and city["other"] is True
    assert city["drafted_from_data"] == ["values", "other"]
    text = d.to_yaml()
    for rare in ("rare1", "rare2", "zz-unique"):
        assert rare not in text
    assert "fewer than 20 rows" in text and "fall into 'other'" in text
    # a lower threshold lists b only when it clears it
    assert "b" not in next(c for c in draft_from_dataframe(df, "t", min_count=58).schema["columns"]
                           if c["name"] == "city")["values"]
    # every value rare: nothing listed, a placeholder that says what to do
    ids = draft_from_dataframe(pd.DataFrame({"id": [f"p{i // 2}" for i in range(50)]}), "t")
    assert ids.schema["columns"][0]["values"] == [PLACEHOLDER] and "write the public categories" in ids.to_yaml()


def test_every_drafted_column_is_flagged_and_schema_check_says_it_is_a_draft(tmp_path, demo_paths, capsys):
    out = tmp_path / "draft.yaml"
    assert main(["schema", "infer", str(demo_paths[0]), "--out", str(out), "--min-count", "30"]) == 0
    assert "remove the line 'draft: true'" in capsys.readouterr().err
    text = out.read_text()
    assert text.count("drafted_from_data") >= 10 and "draft: true  # remove this line after review" in text
    s = load_schema(out)
    assert s.draft and all(c.drafted_from_data for c in s.columns)
    assert s.column("age").integer and s.column("age").type == "numeric"
    assert main(["schema", "check", str(out)]) == 1
    captured = capsys.readouterr()
    assert "10 column(s) left to review" in captured.err and "  region: values derived from the rows" in captured.err
    summary = json.loads(captured.out)
    assert summary["source"] == "data_derived" and summary["to_review"]["age"] == ["bounds"]
    # the same file, every marker replaced by a reviewer: a clean check (exit 0)
    clean = tmp_path / "clean.yaml"
    clean.write_text(load_schema(out).to_yaml().replace("draft: true\n", ""))
    reviewed = schema_from_dict({**yaml.safe_load(clean.read_text()), "columns": [
        {k: v for k, v in c.items() if k != "drafted_from_data"} for c in yaml.safe_load(clean.read_text())["columns"]]})
    clean.write_text(reviewed.to_yaml())
    assert main(["schema", "check", str(clean)]) == 0 and json.loads(capsys.readouterr().out)["source"] == "public"


def test_unreviewed_draft_is_refused_before_anything_is_read(tmp_path, demo_paths, capsys):
    draft = tmp_path / "draft.yaml"
    draft.write_text(draft_from_table(read_table(demo_paths[0]), "demo").to_yaml())
    config = dict(schema=draft, method="marginals", epsilon=1.0, out=tmp_path / "out", workspace=tmp_path / "ws")
    # the data path does not even exist: the draft is refused first
    with pytest.raises(SchemaError, match="unreviewed draft.*delete the line 'draft: true'"):
        pipeline.prepare(pipeline.ReleaseConfig(data=tmp_path / "absent.csv", **config))
    assert not (tmp_path / "ws").exists()
    code = main(["release", "--data", str(demo_paths[0]), "--schema", str(draft), "--method", "marginals",
                 "--epsilon", "1", "--out", str(tmp_path / "out"), "--workspace", str(tmp_path / "ws"),
                 "--engine", "local"])
    assert code == 2 and "unreviewed draft" in capsys.readouterr().err
    # removing only the marker line is not enough (issue 23 section 4): the columns still say
    # they were read from the rows, and the refusal names each one before anything is charged
    draft.write_text("".join(line for line in draft.read_text().splitlines(keepends=True)
                             if not line.startswith("draft:")))
    with pytest.raises(SchemaError, match=r"columns derived from the rows: region \(values\); age \(bounds\)"):
        pipeline.prepare(pipeline.ReleaseConfig(data=demo_paths[0], **config))
    assert not (tmp_path / "ws" / "registry.sqlite").exists()  # no registry, no charge
    # the explicit opt-in passes the public checks (the release is then labelled NOT DP)
    plan = pipeline.prepare(pipeline.ReleaseConfig(data=demo_paths[0], accept_data_derived_schema=True, **config))
    assert not plan.schema.draft and plan.schema.column("age").drafted_from_data == ("bounds",)


def test_draft_marker_must_be_boolean_and_flags_known():
    base = {"name": "t", "columns": [{"name": "a", "type": "categorical", "values": ["x"]}]}
    with pytest.raises(SchemaError, match="draft must be true or false"):
        schema_from_dict({**base, "draft": "yes"})
    with pytest.raises(SchemaError, match="drafted_from_data may list only"):
        schema_from_dict({"name": "t", "columns": [{"name": "a", "type": "categorical", "values": ["x"],
                                                    "drafted_from_data": ["rows"]}]})
    plain = schema_from_dict(base)
    assert not plain.draft and "draft" not in plain.to_dict()
    assert Schema.from_dataframe(pd.DataFrame({"a": ["x"] * 30}), "t").draft


def test_identifier_columns_are_left_out_with_a_comment():
    n = 200
    df = pd.DataFrame({"rownames": range(1, n + 1), "uid": [f"u{i:05d}" for i in range(n)],
                       "score": np.linspace(0.1, 0.9, n),  # real-valued, all distinct: a measurement, kept
                       "group": ["a", "b"] * (n // 2)})
    d = draft_from_dataframe(df, "t")
    names = [c["name"] for c in d.schema["columns"]]
    assert names == ["score", "group"]
    text = d.to_yaml()
    assert "# column rownames: nearly every row holds a different value (an identifier or a row number?)" in text
    assert "# column uid: nearly every row" in text and "u00001" not in text
    with pytest.raises(ValueError, match="every column looks like an identifier"):
        draft_from_dataframe(df[["rownames"]], "t")


def test_categories_in_natural_order_not_by_frequency():
    values = ["10-20"] * 90 + ["<1"] * 20 + ["1-5"] * 60 + ["5-10"] * 30 + ["65+"] * 25 + ["1"] * 40 + ["b"] * 21
    col = draft_from_dataframe(pd.DataFrame({"band": values}), "t").schema["columns"][0]
    assert col["values"] == ["<1", "1", "1-5", "5-10", "10-20", "65+", "b"]
    codes = ["s10"] * 30 + ["s2"] * 20 + ["s1"] * 25
    assert draft_from_dataframe(pd.DataFrame({"c": codes}), "t").schema["columns"][0]["values"] == ["s1", "s2", "s10"]
    assert natural_key("<1") < natural_key("1") < natural_key("1-5") < natural_key(">1") < natural_key("2")


def test_max_categories_names_every_value_it_folds():
    states = [f"state{i:02d}" for i in range(51)]
    df = pd.DataFrame({"state": [s for i, s in enumerate(states) for _ in range(100 - i)]})  # state50 rarest
    d = draft_from_dataframe(df, "t", max_categories=50)
    col = d.schema["columns"][0]
    assert len(col["values"]) == 50 and "state50" not in col["values"] and col["other"] is True
    assert "--max-categories 50 folded these 1 values into 'other': 'state50'" in d.to_yaml()
    assert col["drafted_from_data"] == ["values", "other"]


def test_draft_file_ends_with_exactly_one_newline(tmp_path, demo_paths):
    out = tmp_path / "d.yaml"
    assert main(["schema", "infer", str(demo_paths[0]), "--out", str(out)]) == 0
    text = out.read_text()
    assert text.endswith("\n") and not text.endswith("\n\n")
    df = pd.DataFrame({"rownames": range(100), "g": ["a", "b"] * 50})  # ends with a left-out comment
    text = draft_from_dataframe(df, "t").to_yaml()
    assert text.endswith("\n") and not text.endswith("\n\n") and text.rstrip().splitlines()[-1].startswith("  # column")


@pytest.mark.parametrize("as_text", [True, False])
def test_a_timestamp_column_distinct_per_row_is_drafted_as_datetime_not_left_out(as_text):
    """Default sweep: times to the second differ on nearly every row, and the draft took such a
    column (text in a CSV, a timestamp in Parquet) for an identifier and left it out, so the
    release then refused the file. A column every value of which is a time is a datetime."""
    n = 500
    times = pd.Timestamp("2019-01-01") + pd.to_timedelta(np.arange(n) * 7919 + 13, unit="s")
    df = pd.DataFrame({"last_seen": times.astype(str) if as_text else times, "g": ["a", "b"] * (n // 2)})
    d = draft_from_dataframe(df, "t")
    cols = {c["name"]: c for c in d.schema["columns"]}
    assert "last_seen" not in d.left_out
    assert cols["last_seen"]["type"] == "datetime" and cols["last_seen"]["unit"] == "second"
    ids = draft_from_dataframe(pd.DataFrame({"uid": [f"u{i:05d}" for i in range(n)], "g": df.g}), "t")
    assert "uid" in ids.left_out  # text identifiers are still left out


def test_blank_cells_are_missing_in_the_draft_as_in_the_encoder():
    """Default sweep: cells of spaces only ('  ', as spreadsheets export empty cells) were taken
    for values, so a numeric column became a list of categories, a date column two categories
    of spaces, and a real-valued one an 'identifier' left out. The encoder reads them as
    missing (it strips cells); the draft must read them the same way."""
    rng = np.random.default_rng(5)
    n = 400
    blank = rng.random(n) < 0.1
    df = pd.DataFrame({
        "age": np.where(blank, "   ", rng.integers(16, 95, n).astype(str)),
        "income": np.where(blank, " ", np.round(rng.lognormal(10, 1, n), 2).astype(str)),
        "day": np.where(blank, "  ", (np.datetime64("2020-01-01") + rng.integers(0, 900, n)).astype(str)),
        "city": np.where(blank, " ", rng.choice([" Lyon", "Paris "], n)),
    })
    d = draft_from_dataframe(df, "t")
    cols = {c["name"]: c for c in d.schema["columns"]}
    assert not d.left_out
    assert cols["age"]["type"] == "numeric" and cols["age"].get("integer")
    assert cols["income"]["type"] == "numeric"
    assert cols["day"]["type"] == "datetime"
    assert cols["city"]["values"] == ["Lyon", "Paris"]
    for c in cols.values():
        assert c["missing"] == [""]
    schema = schema_from_dict({k: v for k, v in d.schema.items() if k != "draft"})
    import pyarrow as pa
    from dpsynth.rows.encoding import encode
    codes = encode(pa.Table.from_pandas(df, preserve_index=False), schema).codes
    for j, col in enumerate(schema.columns):  # the blanks encode to the missing code, nothing else does
        assert np.array_equal(codes[:, j] == col.missing_code, blank)


def test_numbers_written_for_people_are_named_as_such_and_infinities_keep_a_column_numeric():
    """Default sweep: '1,234', '$12.50' and '12%' columns were left out as 'an identifier or a
    row number?', and a real-valued column holding a few 'inf' was left out the same way (its
    distinct values read as text). The first now says what to change; the second is drafted
    numeric from its finite values (a release clamps an infinity to the bounds)."""
    rng = np.random.default_rng(3)
    n = 300
    amounts = rng.integers(1000, 5_000_000, n)
    x = rng.normal(0, 1, n).round(6).astype(str)
    x[:4] = ["inf", "-inf", "inf", "inf"]
    df = pd.DataFrame({"amount": [f"{v:,}" for v in amounts], "price": [f"${v / 100:,.2f}" for v in amounts],
                       "rate": [f"{v:.3f}%" for v in rng.uniform(0, 100, n)], "x": x,
                       "row": np.arange(n), "g": ["a", "b"] * (n // 2)})
    d = draft_from_dataframe(df, "t")
    for name in ("amount", "price", "rate"):
        assert "thousands separator" in d.left_out[name]
    assert "thousands separator" not in d.left_out["row"] and "identifier" in d.left_out["row"]
    col = {c["name"]: c for c in d.schema["columns"]}["x"]
    assert col["type"] == "numeric" and all(np.isfinite(col["bounds"]))
    text = d.to_yaml()
    assert "clamps them" in text and f"{amounts[0]:,}" not in text


def test_dates_written_day_month_year_are_named_as_such():
    """Default sweep: dates written 03/04/2021 (not ISO 8601) were drafted as a list of
    categories (none frequent enough: the placeholder), and the release then refused the
    placeholder without saying the column held dates. The draft now says what to change."""
    rng = np.random.default_rng(6)
    days = pd.to_datetime(np.datetime64("2018-01-01") + rng.integers(0, 1500, 600).astype("timedelta64[D]"))
    d = draft_from_dataframe(pd.DataFrame({"visit": days.strftime("%d/%m/%Y"), "g": ["a", "b"] * 300}), "t")
    assert "ISO 8601" in d.left_out["visit"]
    assert days.strftime("%d/%m/%Y")[0] not in d.to_yaml()


def test_numbers_with_a_few_word_codes_are_drafted_numeric_reading_the_words_as_missing():
    """Default sweep (probe): an age column holding 'unknown' and 'refused' in 8% of its cells
    was drafted as 50 listed ages (the most frequent, the rest 'other'), and an income column
    holding '-' was left out as an identifier. The encoder reads any non-number of a numeric
    column as missing, so the draft makes both numeric with a missing code, naming no word."""
    rng = np.random.default_rng(8)
    n = 2000
    age = rng.integers(18, 90, n).astype(str).astype(object)
    age[rng.random(n) < 0.05] = "unknown"
    age[rng.random(n) < 0.03] = "refused"
    inc = np.round(rng.lognormal(10, 1, n), 2).astype(str).astype(object)
    inc[rng.random(n) < 0.05] = "-"
    kids = rng.choice(["0", "1", "2", "3+"], n, p=[0.4, 0.3, 0.2, 0.1])  # a label with a digit: categories
    d = draft_from_dataframe(pd.DataFrame({"age": age, "income": inc, "kids": kids}), "t")
    cols = {c["name"]: c for c in d.schema["columns"]}
    assert cols["age"]["type"] == "numeric" and cols["age"]["integer"] and cols["age"]["missing"] == [""]
    assert cols["income"]["type"] == "numeric" and "income" not in d.left_out
    assert cols["kids"]["type"] == "categorical" and cols["kids"]["values"] == ["0", "1", "2", "3+"]
    assert "unknown" not in d.to_yaml() and "refused" not in d.to_yaml()
    schema = schema_from_dict({k: v for k, v in d.schema.items() if k != "draft"})
    import pyarrow as pa
    from dpsynth.rows.encoding import encode
    codes = encode(pa.Table.from_pandas(pd.DataFrame({"age": age, "income": inc, "kids": kids})), schema).codes
    assert np.array_equal(codes[:, 0] == schema.columns[0].missing_code, np.isin(age, ["unknown", "refused"]))


def test_the_letter_n_is_a_value_of_a_text_column_and_missing_in_a_numeric_one():
    """Default sweep: 'N' (No, North) was a missing token in every column, so a Y/N flag was
    drafted as values [Y] with missing ['', 'N'], and its N and its blank cells became one
    code: the release could not tell them apart. As in the DP draft, 'N' alone is missing
    only in a numeric or date column (as in the NIST files)."""
    rng = np.random.default_rng(9)
    n = 400
    flag = rng.choice(["Y", "N", ""], n, p=[0.5, 0.4, 0.1])
    num = np.where(rng.random(n) < 0.1, "N", rng.integers(0, 50, n).astype(str))
    d = draft_from_dataframe(pd.DataFrame({"flag": flag, "num": num}), "t")
    cols = {c["name"]: c for c in d.schema["columns"]}
    assert cols["flag"]["values"] == ["N", "Y"] and cols["flag"]["missing"] == [""]
    assert cols["num"]["type"] == "numeric" and cols["num"]["missing"] == ["N"]
