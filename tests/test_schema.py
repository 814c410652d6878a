from __future__ import annotations

from pathlib import Path

import pytest

from dpsynth.schema import SchemaError, load_schema, schema_from_dict

ROOT = Path(__file__).resolve().parents[1]


def _one(col: dict) -> dict:
    return {"name": "t", "columns": [col]}


def test_shipped_schemas_load():
    demo = load_schema(ROOT / "schemas" / "demo.yaml")
    assert demo.names[:3] == ["region", "age", "sex"]
    age = demo.column("age")
    assert age.bounds == (18.0, 90.0) and age.n_regular == 12 and age.missing_code is None
    income = demo.column("income")
    assert income.nullable and income.missing_code == income.cardinality - 1
    edu = demo.column("education")
    assert edu.other_code == 5 and edu.cardinality == 6
    nist = load_schema(ROOT / "schemas" / "nist.yaml")
    assert len(nist.columns) == 24
    assert nist.column("MSP").missing == ("N",) and nist.column("MSP").values[0] == "1"
    assert nist.column("AGEP").bounds == (0.0, 99.0)


def test_codes_layout_and_labels():
    s = schema_from_dict(_one({"name": "c", "type": "categorical", "values": ["a", "b"], "other": True, "missing": ["?"]}))
    c = s.column("c")
    assert (c.other_code, c.missing_code, c.cardinality) == (2, 3, 4)
    assert c.labels() == ["a", "b", "other", "?"]
    n = schema_from_dict(_one({"name": "x", "type": "numeric", "bounds": [0, 10], "bins": 2}))
    assert n.column("x").edges == (0.0, 5.0, 10.0)
    assert n.column("x").labels() == ["[0, 5)", "[5, 10]"]


def test_yaml_numbers_become_labels():
    s = schema_from_dict(_one({"name": "c", "type": "categorical", "values": [1, 2, 3.5, True]}))
    assert s.column("c").values == ("1", "2", "3.5", "true")


def test_fingerprint_tracks_domain():
    a = schema_from_dict(_one({"name": "c", "type": "categorical", "values": ["a", "b"]}))
    b = schema_from_dict(_one({"name": "c", "type": "categorical", "values": ["a", "b"]}))
    c = schema_from_dict(_one({"name": "c", "type": "categorical", "values": ["a", "c"]}))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


@pytest.mark.parametrize(
    "col, words",
    [
        ({"name": "c", "type": "text"}, ["'c'", "type"]),
        ({"name": "c", "type": "categorical"}, ["'c'", "values"]),
        ({"name": "c", "type": "categorical", "values": []}, ["'c'", "empty"]),
        ({"name": "c", "type": "categorical", "values": ["a", "a"]}, ["'c'", "more than once"]),
        ({"name": "c", "type": "categorical", "values": ["a", "N"], "missing": ["N"]}, ["'c'", "missing token"]),
        ({"name": "c", "type": "categorical", "values": ["a"], "fill": "b"}, ["'c'", "fill"]),
        ({"name": "c", "type": "categorical", "values": ["a"], "bins": 3}, ["'c'", "numeric"]),
        ({"name": "c", "type": "categorical", "values": ["a"], "colour": 1}, ["'c'", "unknown keys"]),
        ({"name": "x", "type": "numeric", "bins": 3}, ["'x'", "bounds"]),
        ({"name": "x", "type": "numeric", "bounds": [5, 1], "bins": 3}, ["'x'", "low < high"]),
        ({"name": "x", "type": "numeric", "edges": [0, 2, 1]}, ["'x'", "increasing"]),
        ({"name": "x", "type": "numeric", "bounds": [0, 9], "edges": [0, 10]}, ["'x'", "bounds"]),
        ({"name": "x", "type": "numeric", "bounds": [0, "a"], "bins": 2}, ["'x'", "numbers"]),
        ({"name": "x", "type": "numeric", "bounds": [0, 1], "bins": 0}, ["'x'", "bins"]),
        ({"name": "x", "type": "numeric", "bounds": [0, 1]}, ["'x'", "bins"]),
        ({"name": "x", "type": "numeric", "bounds": [0, 1], "bins": 2, "fill": 5}, ["'x'", "fill"]),
        ({"name": "x", "type": "numeric", "bounds": [0, 1], "bins": 2, "other": True}, ["'x'", "categorical"]),
        ({"type": "numeric"}, ["column #1", "name"]),
    ],
)
def test_bad_columns_name_the_column(col, words):
    with pytest.raises(SchemaError) as err:
        schema_from_dict(_one(col))
    for w in words:
        assert w in str(err.value)


def test_bad_top_level():
    with pytest.raises(SchemaError, match="columns"):
        schema_from_dict({"name": "t", "columns": []})
    with pytest.raises(SchemaError, match="name"):
        schema_from_dict({"columns": [{"name": "a", "type": "categorical", "values": ["x"]}]})
    with pytest.raises(SchemaError, match=r"\['a'\].*more than once"):
        col = {"name": "a", "type": "categorical", "values": ["x"]}
        schema_from_dict({"name": "t", "columns": [col, col]})
    with pytest.raises(SchemaError, match="unknown top-level"):
        schema_from_dict({"name": "t", "columns": [{"name": "a", "type": "categorical", "values": ["x"]}], "extra": 1})


def test_bad_files(tmp_path):
    with pytest.raises(SchemaError, match="cannot be read"):
        load_schema(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\ncolumns: [\n")
    with pytest.raises(SchemaError, match="invalid YAML"):
        load_schema(bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- a\n- b\n")
    with pytest.raises(SchemaError, match="mapping"):
        load_schema(lst)


def test_shipped_schemas_match_the_json_schema():
    import json

    import jsonschema
    import yaml

    spec = json.loads((ROOT / "schemas" / "dataset-schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(spec)
    for name in ("demo.yaml", "nist.yaml", "nist-fine.yaml"):
        jsonschema.validate(yaml.safe_load((ROOT / "schemas" / name).read_text()), spec)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "t", "columns": [{"name": "x", "type": "numeric", "bins": 3}]}, spec)


@pytest.mark.parametrize("fine", [False, True])
def test_nist_schemas_are_what_the_generator_builds_from_the_public_dictionary(shared_data_dir, fine):
    """nist.yaml / nist-fine.yaml come from the public dictionary and metadata only, and the
    fine one keeps SDNist's decoded bins: 501 alone, single years, INDP as codes."""
    import json
    import sys

    import yaml

    folder = shared_data_dir / "nist"
    sys.path.insert(0, str(ROOT / "schemas"))
    try:
        import make_nist_schema as mk
    finally:
        sys.path.pop(0)
    built = mk.build(json.loads((folder / "data_dictionary.json").read_text()), fine=fine, folder=folder)
    shipped = yaml.safe_load((ROOT / "schemas" / ("nist-fine.yaml" if fine else "nist.yaml")).read_text())
    assert built == shipped
    if fine:
        s = schema_from_dict(shipped)
        assert s.column("AGEP").n_regular == 99 and s.column("INDP").type == "categorical"
        pov = s.column("POVPIP")
        assert pov.edges[-2:] == (500.5, 501.0)  # 501 ("above 5x poverty") is a code of its own
