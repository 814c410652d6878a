"""The scores of benchmarks/aim_head_to_head.py (AIM's workload error, TVD by k) on a hand-computed example."""

import numpy as np
import pytest

from benchmarks.aim_head_to_head import default_workload, tvd_by_k, workload_error

# 3 binary columns; the real table has 4 rows, the synthetic one 2 (the scores normalise each).
REAL = np.array([[0, 0, 0], [0, 1, 1], [1, 1, 0], [1, 1, 1]])
SYNTH = np.array([[0, 0, 1], [1, 1, 1]])
SIZES = [2, 2, 2]


def test_tvd_by_k_matches_the_hand_computed_values() -> None:
    # 1-way: column 0 agrees (0), column 1 (1/4, 3/4) vs (1/2, 1/2) -> 0.25, column 2 (1/2, 1/2) vs (0, 1) -> 0.5.
    # 2-way: pair (0,1) -> 0.25, pairs (0,2) and (1,2) -> 0.5. 3-way: mass 1/4 on 000, 011, 110, 111
    # against 1/2 on 001 and 111 -> L1 1.5, TVD 0.75.
    tv = tvd_by_k(REAL, SYNTH, SIZES)
    assert tv[1] == pytest.approx(0.75 / 3)
    assert tv[2] == pytest.approx(1.25 / 3)
    assert tv[3] == pytest.approx(0.75)


def test_workload_error_is_the_weighted_mean_l1_of_normalised_marginals() -> None:
    # L1 on pair (0,1) is 0.5 and on pair (1,2) is 1.0: with weights 1 and 2 the mean is (0.5 + 2.0) / 2.
    assert workload_error(REAL, SYNTH, SIZES, [((0, 1), 1.0), ((1, 2), 2.0)]) == pytest.approx(1.25)
    # Every pair at weight 1: twice the mean 2-way TVD (the reference script prints the half).
    assert workload_error(REAL, SYNTH, SIZES, default_workload(SIZES)) == pytest.approx(2 * 1.25 / 3)
    assert workload_error(REAL, REAL[[0, 0, 1, 1, 2, 2, 3, 3]], SIZES, default_workload(SIZES)) == 0.0


def test_default_workload_is_every_pair_of_at_most_10000_cells() -> None:
    assert [cl for cl, _ in default_workload(SIZES)] == [(0, 1), (0, 2), (1, 2)]
    assert default_workload([200, 100, 2]) == [((0, 2), 1.0), ((1, 2), 1.0)]  # 200 x 100 = 20,000 cells: out


def test_auto_means_take_the_cell_a_same_as_run_points_to() -> None:
    from benchmarks.aim_head_to_head import _mean_werr

    chose = {"method": "pgm", "params": {"select": "aim", "degree": "2"}, "reason": ""}
    runs = {"car|0.1|0|pgm-aim2": {"table": "car", "epsilon": 0.1, "seed": 0, "method": "pgm-aim2", "status": "ok",
                                   "werr": 0.4},
            "car|0.1|0|auto": {"table": "car", "epsilon": 0.1, "seed": 0, "method": "auto",
                               "status": "same as pgm-aim2", "auto_chose": chose},
            "car|0.1|1|auto": {"table": "car", "epsilon": 0.1, "seed": 1, "method": "auto", "status": "ok",
                               "werr": 0.2, "auto_chose": {"method": "marginals", "params": {}, "reason": ""}}}
    assert _mean_werr(runs, "car", 0.1, "auto") == "0.3000 (2) marginals, pgm select=aim degree=2"
    assert _mean_werr(runs, "car", 1.0, "auto") == "-"


def _run(table: str, eps: float, seed: int, method: str, werr: float | None, status: str = "ok") -> dict:
    r = {"table": table, "epsilon": eps, "seed": seed, "method": method, "status": status}
    return r | ({"werr": werr} if werr is not None else {})


def test_merge_runs_relabels_only_the_named_method_and_keeps_the_rest() -> None:
    from benchmarks.aim_head_to_head import merge_runs

    mine = {"car|1.0|0|pgm-aim2": _run("car", 1.0, 0, "pgm-aim2", 0.08)}
    other = {"car|1.0|0|pgm-aim2": _run("car", 1.0, 0, "pgm-aim2", 0.09),
             "car|1.0|0|auto": _run("car", 1.0, 0, "auto", 0.07)}
    merged = merge_runs(mine, other, "pgm-aim2", "pgm-aim2-midrule")
    assert merged["car|1.0|0|pgm-aim2"]["werr"] == 0.08  # the default's own cell is untouched
    assert merged["car|1.0|0|pgm-aim2-midrule"] == _run("car", 1.0, 0, "pgm-aim2-midrule", 0.09)
    assert "car|1.0|0|auto" not in merged and mine == {"car|1.0|0|pgm-aim2": _run("car", 1.0, 0, "pgm-aim2", 0.08)}
    # Without a relabel every run is added, and a cell in both takes the other file's run.
    assert merge_runs(mine, other) == other


def test_paired_difference_uses_only_common_seeds_and_the_standard_error_of_the_differences() -> None:
    from benchmarks.aim_head_to_head import paired

    a = [0.10, 0.12, 0.11, 0.50]  # seed 3 has no partner: left out
    b = [0.11, 0.14, 0.11]
    runs = {f"car|1.0|{s}|x": _run("car", 1.0, s, "x", w) for s, w in enumerate(a)}
    runs |= {f"car|1.0|{s}|y": _run("car", 1.0, s, "y", w) for s, w in enumerate(b)}
    runs["car|1.0|4|y"] = _run("car", 1.0, 4, "y", None, "failed")
    # y: sd 0.0173, se 0.0100; differences -0.01, -0.02, 0.00: mean -0.01, sd 0.01, se 0.01 / sqrt(3) = 0.0058
    assert paired(runs, "x", "y") == [["car", "1", "0-2", "0.1100 ± 0.0058", "0.1200 ± 0.0100",
                                       "-0.0100 ± 0.0058", "-1.7"]]
    assert paired(runs, "x", "z") == []


def test_verdicts_pair_seeds_and_bound_the_ratios_of_a_peer_that_timed_out() -> None:
    from benchmarks.aim_head_to_head import verdicts

    def run(eps: float, seed: int, method: str, werr: float | None, cpu: float, mb: float, status: str = "ok") -> dict:
        return _run("car", eps, seed, method, werr, status) | {"cpu_s": cpu, "peak_mb": mb}

    runs = {f"{e}|{s}|{m}": run(e, s, m, w, c, mb, st) for e, s, m, w, c, mb, st in [
        (1.0, 0, "pgm-aim2", 0.10, 1.0, 150.0, "ok"), (1.0, 1, "pgm-aim2", 0.12, 2.0, 150.0, "ok"),
        (1.0, 2, "pgm-aim2", 0.50, 1.0, 150.0, "ok"),  # no finished peer seed 2: left out of the pairs
        (1.0, 0, "mbi-aim", 0.11, 30.0, 3000.0, "ok"), (1.0, 1, "mbi-aim", 0.14, 30.0, 3300.0, "ok"),
        (1.0, 2, "mbi-aim", None, 900.0, 4000.0, "timeout after 1800 s"),
        (10.0, 0, "pgm-aim2", 0.02, 10.0, 200.0, "ok"),
        (10.0, 0, "mbi-aim", None, 150.0, 5000.0, "timeout after 1800 s"),
        (0.1, 0, "pgm-aim2", 0.3, 1.0, 150.0, "ok")]}  # the peer never ran at 0.1: no row
    # eps 1, seeds 0-1: means 0.11 against 0.125; differences -0.01, -0.02: -0.015 ± 0.005.
    # CPU 30/1 and 30/2: per-seed 30x and 15x, mean 30/1.5 = 20x, met on the mean only; RSS 20x and 22x: met.
    assert verdicts(runs) == [
        ["car", "1", "0,1", "0.1100", "0.1250", "-0.0150 ± 0.0050", "yes", "20.0x (15.0-30.0x)", "met on the mean",
         "21.0x (20.0-22.0x)", "met", "seed 2 timeout after 1800 s"],
        # only a timeout: lower bounds from what the killed run had used; 15x is not enough to say
        ["car", "10", "none (peer: 0)", "0.0200 (0.0200-0.0200, 1)", "-", "-", "peer did not finish",
         ">= 15.0x", "unknown", ">= 25.0x", "met", "seed 0 timeout after 1800 s"]]
    runs["1.0|1|pgm-aim2"]["werr"] = 0.20  # ours now behind on the mean: differences -0.01, +0.06
    assert verdicts(runs)[0][5:7] == ["+0.0250 ± 0.0350", "no"]


#: What the process of ours (the one whose peak RSS is compared with mbi AIM's) must not hold:
#: pandas and pyarrow (about 75 MB: the harness reads tables in its parent only, dpsynth's row
#: modules import them where rows are read or written), scipy (about 40 MB; the budget's
#: conversion is plain Python), yaml (0.8 MB: a schema from a mapping needs no parser), logging
#: (0.4 MB; pgm's debug records go to logging only when the caller has imported it), and the
#: harness's own imports (argparse, tempfile and its shutil/bz2/lzma: 2.6 MB, and ~1.5 MB for
#: compiling the harness as __main__, when the child was ``aim_head_to_head.py --child``); nor
#: (session 39) the row readers and writers, the Parquet footer reader and the NIST score, which
#: work on codes never calls (``rows.table`` holds what it needs of ``rows.encoding``) and whose
#: compiling and objects, with ``csv``, were 0.4 MB of the child on car at epsilon 1.
NOT_IN_OUR_CHILD = frozenset({"pandas", "pyarrow", "scipy", "yaml", "logging", "argparse", "tempfile", "csv",
                              "dpsynth.rows.encoding", "dpsynth.rows.csv_out", "dpsynth.rows.footer",
                              "dpsynth.evaluation.nist_score"})


def test_our_child_process_runs_the_cell_without_the_heavy_modules(tmp_path) -> None:
    """The command ``run_cell`` runs for ours (:func:`child_command`) runs the cell from the codes
    alone and never imports :data:`NOT_IN_OUR_CHILD` (each cost is docs/pgm.md's "Where our peak
    memory goes"); the synthetic codes it writes score as the harness reads them."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from benchmarks import aim_head_to_head as h2h

    rng = np.random.default_rng(3)
    codes = rng.integers(0, 3, size=(1500, 3))
    src, dst = tmp_path / "cell.npz", tmp_path / "cell.npy"
    h2h.write_cell_input(src, (["a", "b", "c"], codes, [3, 3, 3]), 1.0, 0)
    cmd = h2h.child_command(h2h.OURS["pgm-aim2"], src, dst)
    assert cmd[1].endswith("aim_child.py")
    probe = ("import runpy, sys; sys.argv = sys.argv[1:]\n"
             "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
             f"finally:\n    print(sorted({{k.split('.')[0] for k in sys.modules}} & {set(NOT_IN_OUR_CHILD)!r}\n"
             f"                 | set(sys.modules) & {set(NOT_IN_OUR_CHILD)!r}))\n")
    root = Path(h2h.__file__).resolve().parents[1]
    out = subprocess.run([cmd[0], "-c", probe, *cmd[1:]], capture_output=True, text=True, check=True, cwd=root)
    lines = out.stdout.strip().splitlines()
    assert json.loads(lines[-2])["rows"] == np.load(dst).shape[0] > 0
    assert lines[-1] == "[]", out.stdout
