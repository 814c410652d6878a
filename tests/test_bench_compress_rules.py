"""benchmarks/compress_rules.py's paired table: one rule against another, seed by seed."""

import math

import pytest

from benchmarks.compress_rules import paired_rows


def _run(table: str, eps: float, seed: int, kind: str, werr: float, cpu: float = 1.0, load: str = "2.0") -> dict:
    return {"table": table, "eps": eps, "seed": seed, "kind": kind, "werr": werr, "cpu": cpu, "merged": {}, "load1": load}


def test_the_difference_is_taken_seed_by_seed_on_the_seeds_both_rules_ran() -> None:
    runs = [_run("t", 1.0, s, "a", w) for s, w in enumerate([0.10, 0.12, 0.14])]
    runs += [_run("t", 1.0, s, "b", w, cpu=3.0, load="5.5") for s, w in enumerate([0.09, 0.10, 0.13, 0.50])]
    (row,) = paired_rows(runs, "a", "b")
    assert row[:3] == ["t", "1", "0,1,2"]  # seed 3 of b has no pair: left out
    d = [0.01, 0.02, 0.01]
    se = math.sqrt(sum((x - sum(d) / 3) ** 2 for x in d) / 2 / 3)
    assert row[5] == f"{sum(d) / 3:+.4f} +- {se:.4f}"
    assert row[4].startswith(f"{(0.09 + 0.10 + 0.13) / 3:.4f}")  # b's mean over the paired seeds only
    assert row[6] == "worse **"  # +0.0133 against an SE of 0.0033: beyond two SEs
    assert row[7] == "1.0 / 3.0" and row[8] == "2.0-5.5"


@pytest.mark.parametrize(("b", "verdict"), [
    ([0.10, 0.12, 0.14], "same releases"),
    ([0.11, 0.11, 0.14], "level"),  # differences -0.01, +0.01, 0: mean 0 within its SE
    ([0.12, 0.13, 0.15], "better **"),
])
def test_the_verdict_reads_the_difference_against_its_standard_error(b: list, verdict: str) -> None:
    runs = [_run("t", 0.1, s, "a", w) for s, w in enumerate([0.10, 0.12, 0.14])]
    runs += [_run("t", 0.1, s, "b", w) for s, w in enumerate(b)]
    assert paired_rows(runs, "a", "b")[0][6] == verdict


def test_a_cell_missing_either_rule_has_no_row() -> None:
    assert paired_rows([_run("t", 1.0, 0, "a", 0.1), _run("u", 1.0, 0, "b", 0.1)], "a", "b") == []
