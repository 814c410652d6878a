"""The private-sampling method in the release pipeline, and the bounds CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dpsynth import pipeline
from dpsynth.cli import main
from dpsynth.methods import ParamError
from dpsynth.methods.private_sampling import bits_to_codes
from dpsynth.schema import schema_from_dict

SCHEMA_YAML = """name: tiny
columns:
  - {name: a, type: categorical, values: ["0", "1"]}
  - {name: b, type: categorical, values: ["0", "1"]}
  - {name: c, type: categorical, values: ["x", "y", "z"]}
"""


@pytest.fixture
def tiny(tmp_path):
    rng = np.random.default_rng(3)
    n = 3000
    a = rng.integers(0, 2, n)
    b = np.where(rng.random(n) < 0.8, a, 1 - a)
    c = np.array(["x", "y", "z"])[np.where(a == 1, rng.integers(0, 2, n), 2)]
    data = tmp_path / "tiny.csv"
    pd.DataFrame({"a": a, "b": b, "c": c}).to_csv(data, index=False)
    schema = tmp_path / "tiny.yaml"
    schema.write_text(SCHEMA_YAML)
    return data, schema


def _config(tmp_path, tiny, **kw):
    data, schema = tiny
    base = dict(data=data, schema=schema, method="private-sampling", epsilon=1.0, out=tmp_path / "out",
                workspace=tmp_path / "ws", rows=2000, params={"m": "256", "Delta": "4", "public_n": "3000"})
    base.update(kw)
    return pipeline.ReleaseConfig(**base)


def test_uncovered_release_is_refused_before_anything_runs(tmp_path, tiny):
    with pytest.raises(ValueError, match=r"Theorem 12.2 allows at most\s+k = 0 .* for n = 3000"):
        pipeline.prepare(_config(tmp_path, tiny))
    with pytest.raises(ValueError, match=r"Theorem 12.2 allows at most\s+k = 0"):
        pipeline.run_release(_config(tmp_path, tiny))
    assert not list((tmp_path / "ws").glob("releases/*/measurement"))


def test_parameters_are_checked_before_anything_runs(tmp_path, tiny):
    with pytest.raises(ParamError, match="Delta"):
        pipeline.run_release(_config(tmp_path, tiny, params={"m": "256", "public_n": "3000"}))
    with pytest.raises(ParamError, match="public_n"):
        pipeline.run_release(_config(tmp_path, tiny, params={"m": "256", "Delta": "4"}))
    with pytest.raises(ParamError, match="'m'"):
        pipeline.run_release(_config(tmp_path, tiny, params={"m": "10", "Delta": "4", "public_n": "3000"}))
    with pytest.raises(ParamError, match="rows"):
        pipeline.run_release(_config(tmp_path, tiny, rows=None))


def test_heuristic_release_says_it_is_not_private(tmp_path, tiny, seed_file):
    folder = pipeline.run_release(_config(tmp_path, tiny, seed_file=seed_file,
                                          params={"m": "256", "Delta": "4", "heuristic": "true", "compact": "true"}))
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["privacy"]["differentially_private"] is False
    assert "NOT differentially private" in manifest["privacy"]["statement"]
    df = pd.read_csv(folder / "synthetic.csv", dtype=str)
    assert len(df) == 2000 and set(df["c"]) <= {"x", "y", "z"}
    # the correlation a -> b (80% agreement in the data, 50% if independent) survives
    assert (df["a"] == df["b"]).mean() > 0.6
    assert "sample" in json.loads((folder / "measurement.json").read_text())["tables"]


def test_bits_to_codes_repairs_invalid_one_hot_rows():
    s = schema_from_dict({"name": "t", "columns": [{"name": "c", "type": "categorical", "values": ["x", "y", "z"]}]})
    bits = np.array([[0, 1, 0], [1, 1, 0], [0, 0, 0], [0, 0, 1]], dtype=np.uint8)
    codes = bits_to_codes(bits, s, np.random.default_rng(0)).codes[:, 0]
    assert codes[0] == 1 and codes[3] == 2 and codes[1] in (0, 1) and codes[2] in (1, 2)


def test_bounds_cli(capsys):
    assert main(["bounds", "--n", "20000", "--p", "8", "--d", "2", "--m", "1000", "--delta", "0.25",
                 "--Delta", "5.9", "--gamma", "0.125", "--epsilon", "1", "--k", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"max_k", "m_min", "m_max", "n_min", "k_min", "holds"} <= set(out)
    assert out["max_k"] == 0 and out["holds"] is False
    from dpsynth.methods.private_sampling import privacy_k_bound

    assert out["privacy"]["k_bound"] == pytest.approx(privacy_k_bound(20000, 8, 2, 1000, 0.25, 5.9, 1.0))


def test_compact_view_uses_one_bit_for_two_value_columns():
    from dpsynth.rows.encoding import EncodedTable, onehot

    s = schema_from_dict({"name": "t", "columns": [
        {"name": "a", "type": "categorical", "values": ["0", "1"]},
        {"name": "c", "type": "categorical", "values": ["x", "y", "z"]}]})
    enc = EncodedTable(schema=s, codes=np.array([[1, 2], [0, 0]], dtype=np.uint8))
    bits, feats = onehot(enc, binary_as_bit=True)
    assert bits.tolist() == [[1, 0, 0, 1], [0, 1, 0, 0]] and feats[0] == ("a", 1)
    back = bits_to_codes(bits, s, np.random.default_rng(0), compact=True)
    assert back.codes.tolist() == enc.codes.tolist()
