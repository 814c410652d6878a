"""benchmarks/auto_choice.py's seed matching: how many seeds a re-run takes, and the gap's standard error."""

import math

import pytest

from benchmarks.auto_choice import cell_seeds, seed_gap, seed_scores


def test_the_gap_is_the_difference_of_means_with_the_independent_standard_error() -> None:
    best, auto = [10.0, 12.0, 14.0], [9.0, 11.0]
    gap, se = seed_gap(best, auto)
    assert gap == pytest.approx(12.0 - 10.0)
    # sample variances 4 and 2: sqrt(4/3 + 2/2)
    assert se == pytest.approx(math.sqrt(4.0 / 3.0 + 2.0 / 2.0))
    assert seed_gap(auto, best)[0] == pytest.approx(-gap) and seed_gap(auto, best)[1] == pytest.approx(se)


def test_one_seed_on_either_side_has_no_standard_error() -> None:
    assert seed_gap([800.0], [790.0, 796.0]) == (pytest.approx(7.0), None)
    assert seed_gap([800.0, 804.0], [790.0]) == (pytest.approx(12.0), None)
    with pytest.raises(ValueError):
        seed_gap([], [1.0])


def test_old_one_seed_entries_read_as_one_score() -> None:
    assert seed_scores({"score": 900.5, "seconds": 3.0, "status": "ok"}) == [900.5]
    assert seed_scores({"score": 2.0, "scores": [1.0, 3.0], "seeds": 2}) == [1.0, 3.0]
    assert seed_scores({"score": None, "status": "timeout 300 s"}) == []
    assert seed_scores(None) == []


def test_auto_runs_as_many_seeds_as_the_cells_most_seeded_configuration() -> None:
    cell = {"configs": {"pgm-mst": {"score": 1.0, "scores": [1.0] * 5, "seeds": 5},
                        "pgm-aim2": {"score": 1.0, "scores": [1.0] * 10, "seeds": 10},
                        "auto": {"score": 1.0}}}
    assert cell_seeds(cell, "auto") == 10  # not its own one seed: as many as AIM's mean
    assert cell_seeds(cell, "pgm-mst") == 5  # a re-run keeps its own count
    assert cell_seeds(cell, "sds") == 10  # new to the cell: as the most-seeded
    assert cell_seeds({"configs": {"pgm-mst": {"score": 1.0}}}, "auto") == 1
    assert cell_seeds({"configs": {}}, "auto") == 1


def test_many_auto_runs_are_kept_as_counts_and_a_tally_of_choices() -> None:
    from benchmarks.auto_choice import FULL_AUTO_RUNS, auto_runs_entry

    def run(count: float, method: str) -> dict:
        params = {"select": "aim", "degree": "2"} if method == "pgm" else {}
        return {"record_count": count, "choice": {"method": method, "params": params, "reason": "r"}}

    few = [run(10.0, "marginals"), run(12.0, "pgm")]
    assert auto_runs_entry(few) == {"auto_runs": few}
    assert auto_runs_entry(few[:1]) == {}
    many = [run(float(i), "marginals" if i % 3 else "pgm") for i in range(FULL_AUTO_RUNS + 1)]
    entry = auto_runs_entry(many)
    assert entry["auto_record_counts"] == [float(i) for i in range(FULL_AUTO_RUNS + 1)]
    assert entry["auto_choices"] == {"marginals": 14, "pgm degree=2 select=aim": 7}
    assert "auto_runs" not in entry


def test_the_report_reads_an_old_one_seed_file_and_a_seeded_cell(tmp_path, monkeypatch, capsys) -> None:
    import json

    import benchmarks._common as common
    import benchmarks.auto_choice as bench

    monkeypatch.setattr(common, "RESULTS", tmp_path)
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    one = {"score": 900.0, "seconds": 1.0, "status": "ok"}  # the old format: no seeds, no scores, no load
    old = {"half": "tuning", "table": "gen:1000,5,6,0,0", "rows": 1000, "columns": 5, "cardinalities": [6] * 5,
           "epsilon": 1.0, "delta": 1e-6, "triples": 10,
           "configs": {"pgm-mst": dict(one, score=880.0), "pgm-aim2": one, "sds": dict(one, score=890.0),
                       "marginals": dict(one, score=700.0)}}
    auto = {"record_count": 1000.0, "choice": {"method": "pgm", "params": {"select": "aim", "degree": "2"},
                                                "reason": "r"}}
    seeded = dict(old, epsilon=0.1, configs={
        "pgm-aim2": {"score": 11.0, "scores": [10.0, 12.0, 11.0], "seeds": 3, "seconds": 1.0, "status": "ok"},
        "marginals": {"score": 5.0, "scores": [5.0, 5.0, 5.0], "seeds": 3, "seconds": 1.0, "status": "ok"},
        "auto": {"score": 10.0, "scores": [9.0, 11.0], "seeds": 2, "seconds": 1.0, "status": "ok", "auto": auto}})
    (tmp_path / "auto_choice.json").write_text(json.dumps({"raw": {"tuning": {"cells": [old, seeded]}}}))
    bench.report(("tuning", "held-out"))
    cells = json.loads((tmp_path / "auto_choice.json").read_text())["cells"]
    assert [c["epsilon"] for c in cells] == [1.0, 0.1]
    first, second = cells
    assert first["auto_run"] is False and first["auto_seeds"] == 1 and first["gap_se"] is None
    assert first["best"] == "pgm-aim2" and first["best_score"] == 900.0
    assert second["auto_run"] is True and second["auto_scores"] == [9.0, 11.0] and second["best_seeds"] == 3
    assert second["gap_to_best"] == 1.0 and second["gap_se"] == round(math.sqrt(1.0 / 3 + 2.0 / 2), 1)
    assert "gap +1.0 ± 1.2" in capsys.readouterr().out
