"""benchmarks/compress_rules.py's paired table (one rule against another, seed by seed) and its generated wide tables."""

import math

import numpy as np
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


def test_the_wide_tables_hold_wide_columns_of_small_shares_beside_small_ones() -> None:
    from benchmarks.compress_rules import WIDE, load_any, wide_table

    names, codes, sizes = load_any("wide-a")
    assert codes.shape == (WIDE["wide-a"][0], len(sizes)) and names == [f"w{j}" for j in range(len(sizes))]
    assert np.array_equal(codes, wide_table(*WIDE["wide-a"])[0])  # the same seed: the same table
    assert np.all(codes >= 0) and np.all(codes < np.array(sizes))
    wide = [j for j, s in enumerate(sizes) if s >= 40]
    assert len(wide) == 4 and sum(s < 10 for s in sizes) == 4
    for j in wide:  # most of a wide column's values hold 0.3-3% of the rows each (adult's ages)
        share = np.bincount(codes[:, j], minlength=sizes[j]) / len(codes)
        assert np.mean((share >= 0.003) & (share <= 0.03)) > 0.55


def test_the_held_out_tables_hold_the_shapes_they_are_named_for() -> None:
    from benchmarks.compress_rules import HELD, held_table, load_any

    shares = {}
    for name, (rows, _, _) in HELD.items():
        names, codes, sizes = load_any(name)
        assert codes.shape == (rows, len(sizes)) and np.all(codes < np.array(sizes))
        assert np.array_equal(codes, held_table(*HELD[name])[0])  # the same seed: the same table
        shares[name] = [np.bincount(codes[:, j], minlength=s) / rows for j, s in enumerate(sizes)]
    assert 10_000 <= min(r for r, _, _ in HELD.values()) and max(r for r, _, _ in HELD.values()) <= 100_000
    # ho-empty: truly empty bins, and no real value under 0.3% of the rows
    empty = shares["ho-empty"]
    assert sum(np.sum(p == 0) for p in empty) >= 40 and all(np.all((p == 0) | (p >= 0.003)) for p in empty)
    # ho-mix: a column with both truly empty bins and real values under 0.3% of the rows
    assert any(np.sum(p == 0) >= 8 and np.sum((p > 0) & (p < 0.003)) >= 10 for p in shares["ho-mix"])
    # ho-tail: ordinal columns of many real small values, none empty
    tail = [p for p in shares["ho-tail"] if p.size >= 50]
    assert len(tail) >= 5 and all(np.all(p > 0) and np.sum(p < 0.01) >= 15 for p in tail)


def test_the_session_37_held_out_tables_hold_their_shapes_and_declare_their_ordered_columns() -> None:
    from benchmarks.compress_rules import HELD2, HELD2_SHAPES, held2_table, load_any, ordered_of

    for name, (rows, _, shape) in HELD2.items():
        names, codes, sizes = load_any(name)
        assert codes.shape == (rows, len(sizes)) and np.array_equal(codes, held2_table(*HELD2[name])[0])
        share = {j: np.bincount(codes[:, j], minlength=s) / rows for j, s in enumerate(sizes)}
        kinds = [spec[0] for spec in HELD2_SHAPES[shape]]
        # ordered: exactly the bells and the decays, each with all its codes
        assert ordered_of(name) == {f"w{j}": sizes[j] for j, k in enumerate(kinds) if k in ("b", "g")}
        for j, k in enumerate(kinds):
            nz = np.flatnonzero(share[j])
            if k == "b":  # a bell cut at 2.5 sds: its edges truly empty
                assert nz.min() > 0 and nz.max() < sizes[j] - 1 and np.sum(share[j] == 0) >= 10
            if k == "mx":  # truly empty bins and real small values at random codes
                assert np.sum(share[j] == 0) == HELD2_SHAPES[shape][j][2] and np.sum((share[j] > 0) & (share[j] < 0.003)) >= 5
            if k == "zr":  # no value empty; the order of the decay is not the codes' order
                assert nz.size == sizes[j] and not np.all(np.diff(share[j]) <= 0)
    assert len(load_any("hn-wide")[2]) >= 20
    assert ordered_of("rare-b") == {} and ordered_of("wide-a") == {"w1": 85, "w3": 60, "w5": 99, "w7": 42}
    # the wide tables' "z" is a decay from code 0 (ordered); the session-36 tables' "z" is a Zipf
    # decay at random codes (not ordered): ho-zipf has no ordered column, wide-c's w3 is one
    assert ordered_of("ho-zipf") == {} and ordered_of("wide-c")["w3"] == 100
    assert ordered_of("ho-tail") == {f"w{j}": s for j, s in ((0, 90), (2, 60), (4, 100), (5, 40), (7, 75), (9, 50))}
