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
