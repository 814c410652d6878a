"""The Python API: dpsynth.release / load_release over the library pipeline."""

from __future__ import annotations

import dataclasses
import re
import shutil

import pandas as pd
import pytest

import dpsynth
from dpsynth.methods import ParamError
from dpsynth.methods.sds import SdsMethod
from dpsynth.schema import SchemaError, load_schema
from tests.conftest import ROOT


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## From Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_runs_as_written(tmp_path, monkeypatch):
    code = _readme_example()
    assert len(code.strip().splitlines()) == 5
    (tmp_path / "data").mkdir()
    (tmp_path / "schemas").mkdir()
    shutil.copy(ROOT / "data" / "demo.csv", tmp_path / "data")
    shutil.copy(ROOT / "schemas" / "demo.yaml", tmp_path / "schemas")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DPSYNTH_WORKSPACE", str(tmp_path / "ws"))
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    rel, again = scope["rel"], scope["again"]
    assert rel.path == tmp_path / "releases" / "demo-api" and rel.report_path.is_file()
    assert rel.synthetic.shape[1] == 10 and len(rel.synthetic) == rel.manifest["rows"] > 4000
    assert again.manifest == rel.manifest
    assert rel.manifest["method_requested"] == "auto" and rel.manifest["method"] == "pgm"
    assert rel.epsilon_spent <= 1.0 + 1e-9


def test_dataframe_round_trip(tmp_path, demo_paths):
    data, schema_path = demo_paths
    df = pd.read_csv(data)
    schema = load_schema(schema_path)
    rel = dpsynth.release(df, schema, method="marginals", epsilon=0.5, delta=1e-7, rows=321,
                          seed=b"0123456789abcdef-api-test", out=tmp_path / "out", workspace=tmp_path / "ws",
                          name="api")
    syn = rel.synthetic
    assert list(syn.columns) == schema.names and len(syn) == 321
    for col in schema.columns:
        if col.type == "categorical":
            assert pd.api.types.is_string_dtype(syn[col.name]), col.name
        elif col.integer:
            assert str(syn[col.name].dtype) == "Int64", col.name
    assert set(syn["region"].dropna()) <= set(schema.column("region").values)
    privacy = rel.manifest["privacy"]
    assert (privacy["epsilon"], privacy["delta"]) == (0.5, 1e-7) and privacy["epsilon_spent"] <= 0.5 + 1e-9
    assert rel.ledger.rho_spent == pytest.approx(privacy["rho_spent"])
    assert len(rel.ledger.spent) == len(schema.columns) and rel.ledger.budget.epsilon == 0.5
    assert rel.manifest["rows"] == 321 and rel.name == "api"
    # the frame went to the private workspace only, never to the release
    published = {p.name for p in rel.path.rglob("*")}
    assert not any(n.endswith(".parquet") and n not in ("synthetic.parquet", "measurement.parquet") for n in published)
    assert len(list((tmp_path / "ws" / "inputs").glob("*.parquet"))) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        rel.path = tmp_path  # type: ignore[misc]
    loaded = dpsynth.load_release(rel.path)
    assert loaded.manifest == rel.manifest
    pd.testing.assert_frame_equal(loaded.synthetic, syn)


def test_load_release_refuses_a_tampered_release(tmp_path, demo_paths):
    data, schema_path = demo_paths
    rel = dpsynth.release(data, schema_path, method="marginals", epsilon=1.0, rows=200,
                          out=tmp_path / "out", workspace=tmp_path / "ws")
    assert dpsynth.load_release(rel.path).synthetic.shape == (200, 10)
    csv = rel.path / "synthetic.csv"
    raw = bytearray(csv.read_bytes())
    raw[-2] = ord("x") if raw[-2] != ord("x") else ord("y")  # one byte of the last row
    csv.write_bytes(bytes(raw))
    with pytest.raises(dpsynth.ReleaseVerificationError, match="synthetic.csv: sha256 differs"):
        dpsynth.load_release(rel.path)


@pytest.mark.parametrize(
    "kw, error, words",
    [
        (dict(method="sds", params={"reporting_length": 0}), ParamError, "reporting_length"),
        (dict(method="sds", params={"no_such_knob": 1}), ParamError, "no_such_knob"),
        (dict(method="nope"), ParamError, "unknown method 'nope'"),
        (dict(method="sds", epsilon=-1.0), ValueError, "epsilon"),
        (dict(method="sds", delta=2.0), ValueError, "delta must lie in (0, 0.001)"),
        (dict(method="sds", rows=0), ValueError, "rows"),
        (dict(method="sds", seed=b"short"), ValueError, "seed"),
    ],
)
def test_bad_request_raises_before_any_budget_is_spent(tmp_path, demo_paths, monkeypatch, kw, error, words):
    measured = []
    monkeypatch.setattr(SdsMethod, "measure", lambda *a, **k: measured.append(1))
    args = dict(epsilon=1.0, out=tmp_path / "out", workspace=tmp_path / "ws")
    args.update(kw)
    with pytest.raises(error, match=re.escape(words)):
        dpsynth.release(pd.read_csv(demo_paths[0]), demo_paths[1], **args)
    assert not measured
    assert not (tmp_path / "out").exists() and not (tmp_path / "ws" / "releases").exists()


def test_bad_inputs_name_the_argument(tmp_path, demo_paths):
    with pytest.raises(TypeError, match="data must be a pandas DataFrame"):
        dpsynth.release([1, 2], demo_paths[1], method="marginals", epsilon=1.0, workspace=tmp_path)
    with pytest.raises(TypeError, match="schema must be"):
        dpsynth.release(demo_paths[0], 3, method="marginals", epsilon=1.0, workspace=tmp_path)
    with pytest.raises(SchemaError, match="column 'age'"):
        dpsynth.release(demo_paths[0], {"name": "t", "columns": [{"name": "age", "type": "numeric"}]},
                        method="marginals", epsilon=1.0, workspace=tmp_path)
    twice = pd.DataFrame([[1, 2]], columns=["a", "a"])
    with pytest.raises(Exception, match=r"columns \['a'\] appear more than once"):
        dpsynth.release(twice, {"name": "t", "columns": [{"name": "a", "type": "categorical", "values": ["x"]}]},
                        method="marginals", epsilon=1.0, workspace=tmp_path)
    mixed = pd.DataFrame({"a": ["x", 1, 2.5] * 10})
    with pytest.raises(Exception, match="column 'a' mixes value types") as info:
        dpsynth.release(mixed, {"name": "t", "columns": [{"name": "a", "type": "categorical", "values": ["x"]}]},
                        method="marginals", epsilon=1.0, workspace=tmp_path)
    assert "2.5" not in str(info.value)  # never a cell


def test_from_dataframe_is_a_draft_the_api_refuses(tmp_path, demo_paths):
    df = pd.read_csv(demo_paths[0])
    draft = dpsynth.Schema.from_dataframe(df, "demo")
    assert draft.draft and all(c.drafted_from_data for c in draft.columns)
    with pytest.raises(SchemaError, match="unreviewed draft.*delete the line 'draft: true'"):
        dpsynth.release(df, draft, method="marginals", epsilon=1.0, out=tmp_path / "out", workspace=tmp_path / "ws")
    assert not (tmp_path / "ws").exists()  # refused before the frame was written anywhere
    reviewed = dataclasses.replace(draft, draft=False)  # draft: true gone, the markers still there
    with pytest.raises(SchemaError, match="columns derived from the rows: region \\(values\\); age \\(bounds\\)"):
        dpsynth.release(df, reviewed, method="marginals", epsilon=1.0, out=tmp_path / "out", workspace=tmp_path / "ws")
    assert not (tmp_path / "ws").exists()
    rel = dpsynth.release(df, reviewed, method="marginals", epsilon=1.0, rows=100, out=tmp_path / "out",
                          workspace=tmp_path / "ws", accept_data_derived_schema=True)
    assert load_schema(rel.path / "schema.yaml").column("age").drafted_from_data == ("bounds",)
    privacy = rel.manifest["privacy"]
    assert privacy["differentially_private"] is False and privacy["schema"]["source"] == "data_derived"
    assert "NOT differentially private" in privacy["headline"]


def test_release_talks_like_the_cli_and_warns(tmp_path, demo_paths, capsys):
    """Defects: the API printed nothing, did not warn about a dataset without a lifetime
    cap (the CLI did), and its repr was 11,777 characters with an unrounded epsilon."""
    data, schema_path = demo_paths
    with pytest.warns(dpsynth.ReleaseWarning, match="no lifetime privacy cap"):
        rel = dpsynth.release(data, schema_path, method="marginals", epsilon=1.0, rows=100,
                              out=tmp_path / "out", workspace=tmp_path / "ws", name="talks")
    err = capsys.readouterr().err
    assert "encode: started" in err and "validate: done in" in err and "encode: 5,000 rows" in err
    text = repr(rel)
    assert "\n" not in text and len(text) < 200, text
    assert text.startswith("Release('talks', method='marginals', rows=100, epsilon_spent=")
    assert "epsilon_spent=1 of 1," in text  # 0.99999999999998 shown rounded; the manifest keeps it exact
    assert str(rel) == text


def test_quiet_release_prints_nothing_but_still_warns(tmp_path, demo_paths, capsys):
    data, schema_path = demo_paths
    with pytest.warns(dpsynth.ReleaseWarning, match="no lifetime privacy cap"):
        dpsynth.release(data, schema_path, method="marginals", epsilon=1.0, rows=100, out=tmp_path / "out",
                        workspace=tmp_path / "ws", name="quiet", quiet=True)
    assert capsys.readouterr().err == ""


def test_release_with_a_capped_dataset_does_not_warn(tmp_path, demo_paths):
    import warnings

    from dpsynth.privacy import registry

    registry.set_cap(tmp_path / "ws", "demo", registry.Cap(epsilon=5.0, delta=1e-5))
    data, schema_path = demo_paths
    with warnings.catch_warnings():
        warnings.simplefilter("error", dpsynth.ReleaseWarning)
        dpsynth.release(data, schema_path, method="marginals", epsilon=1.0, rows=100, out=tmp_path / "out",
                        workspace=tmp_path / "ws", name="capped", quiet=True)
