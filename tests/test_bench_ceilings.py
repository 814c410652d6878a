"""The benchmarks' shared non-private ceilings (benchmarks/_common.ceilings) on the demo table."""

from pathlib import Path

import numpy as np

from benchmarks._common import ceilings, code_score
from dpsynth.rows.encoding import encode, read_table
from dpsynth.schema import load_schema

ROOT = Path(__file__).resolve().parents[1]


def _demo() -> tuple[np.ndarray, list[int]]:
    schema = load_schema(ROOT / "schemas" / "demo.yaml")
    codes = encode(read_table(ROOT / "data" / "demo.csv", schema), schema).codes
    return np.asarray(codes, dtype=np.int64), list(schema.cardinalities)


def test_binned_is_perfect_on_codes_and_resample_pays_sampling_noise() -> None:
    codes, cards = _demo()
    c = ceilings(codes, code_score(cards), seed=0)
    assert c["binned"] == 1000.0
    assert 900.0 < c["resample"] < 1000.0
    assert c["rows"] == codes.shape[0] and c["resample_seed"] == 0
    assert ceilings(codes, code_score(cards), seed=0) == c  # fixed seed, same draw
    assert ceilings(codes, code_score(cards), seed=1)["resample"] != c["resample"]


def test_a_wrong_table_scores_below_the_resample_floor() -> None:
    codes, cards = _demo()
    shuffled = np.column_stack([np.random.default_rng(j).permutation(codes[:, j]) for j in range(codes.shape[1])])
    c = ceilings(codes, code_score(cards), seed=0)
    assert code_score(cards)(codes, shuffled) < c["resample"]


def test_add_ceilings_keeps_the_results_file_as_it_was(tmp_path, monkeypatch) -> None:
    import json

    import benchmarks._common as common

    monkeypatch.setattr(common, "RESULTS", tmp_path)
    before = {"machine": {"python": "x", "cpus": 1}, "runs": {"a|1": {"score": 900.0}}, "ceilings": {"old": 1}}
    (tmp_path / "bench.json").write_text(json.dumps(before))
    common.add_ceilings("bench", {"t": {"binned": 1000.0, "resample": 950.0}})
    after = json.loads((tmp_path / "bench.json").read_text())
    assert after["machine"] == before["machine"] and after["runs"] == before["runs"]
    assert after["ceilings"] == {"old": 1, "t": {"binned": 1000.0, "resample": 950.0}}
    assert list(after) == ["machine", "runs", "ceilings"]
