"""benchmarks/prefect_overhead.py's choice of cells and wall over the local engine, and
benchmarks/prefect_phases.py's phases read from stamped output lines."""

import pytest

from benchmarks.prefect_overhead import _chosen, _over_local
from benchmarks.prefect_phases import _phases


def test_a_prefect_cell_brings_the_local_reference_and_a_second_release_its_first() -> None:
    assert _chosen("running") == {"running", "local"}
    assert _chosen("second") == {"second", "first", "local"}
    assert _chosen("errors") == {"errors"}
    with pytest.raises(SystemExit):
        _chosen("running,sideways")


def test_the_wall_over_the_local_engine_is_against_the_mean_of_its_releases() -> None:
    cells = {"local #1": {"wall_s": 3.0, "exit": 0}, "local #2": {"wall_s": 4.0, "exit": 0},
             "local #3": {"wall_s": 99.0, "exit": 1},  # a failed run is no reference
             "prefect running server #1": {"wall_s": 4.25, "exit": 0},
             "prefect second #1": {"wall_s": 9.0, "exit": 1},
             "unknown method, prefect": {"wall_s": 0.7, "exit": 2}}
    _over_local(cells)
    assert cells["prefect running server #1"]["over_local_wall_s"] == pytest.approx(0.75)
    assert "over_local_wall_s" not in cells["prefect second #1"]
    assert "over_local_wall_s" not in cells["unknown method, prefect"]


def test_phases_are_the_differences_between_the_marking_lines() -> None:
    lines = [(0.2, 0.1, "loading the pipeline and Prefect..."),
             (1.0, 0.8, "using the Prefect server running at http://127.0.0.1:4200/api (...)"),
             (2.0, 1.8, "dpsynth: method auto: draws a DP record count"),
             (2.3, 1.95, "prepare: started"), (2.35, 1.97, "prepare: done in 0.05 s"),
             (2.4, 2.0, "encode: started"), (2.5, 2.1, "encode: 5,000 rows"), (2.6, 2.2, "encode: done in 0.2 s"),
             (2.7, 2.25, "measure: started"), (3.7, 3.0, "measure: done in 1.0 s"),
             (4.0, 3.1, "published /tmp/x"), (4.01, 3.1, "privacy: Differentially private")]
    got = _phases(lines, exited_wall=4.2)
    assert got["start-up"] == [0.2, 0.1]
    assert got["pipeline, checks"] == [pytest.approx(0.8), pytest.approx(0.7)]
    assert got["Prefect import"] == [pytest.approx(1.0), pytest.approx(1.0)]
    assert got["flow start"] == [pytest.approx(0.3), pytest.approx(0.15)]
    assert got["before encode"] == [pytest.approx(0.05), pytest.approx(0.03)]
    assert got["encode"] == [pytest.approx(0.2), pytest.approx(0.2)]  # from its start, the rows line in between
    assert got["measure"] == [pytest.approx(1.0), pytest.approx(0.75)]
    assert got["flow end"] == [pytest.approx(0.3), pytest.approx(0.1)]
    assert got["exit"] == [pytest.approx(0.19), None]
