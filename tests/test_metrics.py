"""Tests of dpsynth.evaluation.metrics: counting engine, TVD, baseline, coverage, NIST k-marginal."""

from __future__ import annotations

import math
import os
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpsynth.evaluation import metrics as M
from dpsynth.rows.encoding import EncodedTable
from dpsynth.schema import schema_from_dict


def random_codes(rng: np.random.Generator, n: int, cards) -> np.ndarray:
    return np.column_stack([rng.integers(0, c, size=n) for c in cards]).astype(np.uint8)


def naive_counts(codes: np.ndarray, cards, subset) -> np.ndarray:
    """Reference written independently of the engine: one loop over rows."""
    table = np.zeros(tuple(cards[j] for j in subset), dtype=np.int64)
    for row in codes:
        table[tuple(int(row[j]) for j in subset)] += 1
    return table


# --- counting engine -----------------------------------------------------------


def test_k_subsets_counts_and_order():
    assert M.k_subsets(4, 2) == list(combinations(range(4), 2))
    assert len(M.k_subsets(20, (1, 2, 3))) == 20 + 190 + 1140
    assert M.k_subsets(2, 3) == []
    with pytest.raises(ValueError):
        M.k_subsets(3, 0)


def test_marginal_counts_matches_row_loop():
    rng = np.random.default_rng(0)
    cards = [3, 2, 4]
    codes = random_codes(rng, 200, cards)
    for s in [(0,), (2, 0), (0, 1, 2), (1, 2)]:
        assert np.array_equal(M.marginal_counts(codes, cards, s), naive_counts(codes, cards, s))


@pytest.mark.parametrize("max_cells", [8, 64, 1 << 16])
def test_engine_equals_naive_bincount(max_cells):
    rng = np.random.default_rng(1)
    cards = [2, 5, 3, 7, 1, 4, 12, 2]
    codes = random_codes(rng, 3000, cards)
    subsets = M.k_subsets(len(cards), (1, 2, 3))
    got = dict(M.iter_marginals(codes, cards, subsets, max_cells=max_cells))
    assert set(got) == set(subsets)  # every subset exactly once (dict would hide repeats)
    assert len(list(M.iter_marginals(codes, cards, subsets, max_cells=max_cells))) == len(subsets)
    for s in subsets:
        ref = M.marginal_counts(codes, cards, s)
        assert got[s].shape == ref.shape
        assert np.array_equal(got[s], ref), s
        assert got[s].sum() == codes.shape[0]


def test_engine_row_chunks_and_wide_codes():
    rng = np.random.default_rng(2)
    cards = [300, 5, 9]  # codes beyond uint8; flat index beyond uint16
    codes = random_codes(rng, 5000, [5, 5, 9]).astype(np.int64)
    codes[:, 0] = rng.integers(0, 300, size=5000)
    got = dict(M.iter_marginals(codes, cards, [(0, 1, 2), (0, 2)], chunk_rows=777))
    assert np.array_equal(got[(0, 1, 2)], naive_counts(codes, cards, (0, 1, 2)))
    assert np.array_equal(got[(0, 2)], naive_counts(codes, cards, (0, 2)))


def test_engine_accepts_encoded_table_and_empty_rows():
    schema = schema_from_dict(
        {"name": "t", "columns": [
            {"name": "a", "type": "categorical", "values": ["x", "y"], "missing": ["N"]},
            {"name": "b", "type": "numeric", "bounds": [0, 10], "bins": 3},
        ]}
    )
    enc = EncodedTable(schema=schema, codes=np.array([[0, 1], [2, 2], [0, 1]], dtype=np.uint8))
    got = dict(M.iter_marginals(enc, schema.cardinalities, [(0, 1)]))
    assert got[(0, 1)].tolist() == [[0, 2, 0], [0, 0, 0], [0, 0, 1]]
    empty = dict(M.iter_marginals(np.zeros((0, 2), np.uint8), [3, 3], [(0, 1)]))
    assert empty[(0, 1)].shape == (3, 3) and empty[(0, 1)].sum() == 0


def test_engine_rejects_codes_outside_domain():
    codes = np.array([[0, 3]], dtype=np.uint8)
    with pytest.raises(ValueError, match=r"column\(s\) \[1\]"):
        list(M.iter_marginals(codes, [2, 3], [(0, 1)]))
    with pytest.raises(ValueError, match="repeats"):
        list(M.iter_marginals(np.zeros((1, 2), np.uint8), [2, 3], [(1, 1)]))


def test_plan_covers_each_subset_once_within_cell_budget():
    cards = [2, 3, 12, 12, 12, 5, 2, 7, 9, 4]
    subsets = M.k_subsets(len(cards), (1, 2, 3))
    plan = M.plan_blocks(subsets, cards, max_cells=4096)
    assigned = [s for b in plan for s in b.subsets]
    assert sorted(assigned) == sorted(subsets)
    for b in plan:
        assert all(set(s) <= set(b.columns) for s in b.subsets)
        assert math.prod(cards[j] for j in b.columns) <= 4096
    assert len(plan) < len(M.k_subsets(len(cards), 3)) / 2  # blocks really share passes


def test_plan_oversized_subset_is_its_own_block():
    plan = M.plan_blocks([(0, 1)], [300, 300], max_cells=1000)
    assert plan == (M.Block(columns=(0, 1), subsets=((0, 1),)),)


# --- TVD ----------------------------------------------------------------------


def test_tvd_basic_values():
    assert M.tvd([1, 2, 3], [2, 4, 6]) == 0.0  # same distribution, other scale
    assert M.tvd([5, 0, 0], [0, 1, 1]) == 1.0  # disjoint supports
    # hand computed: p = (.5, .5, 0), q = (.25, .25, .5): 0.5 * (.25 + .25 + .5) = 0.5
    assert M.tvd([1, 1, 0], [1, 1, 2]) == pytest.approx(0.5)
    # p = (.1, .2, .7), q = (.3, .3, .4): 0.5 * (.2 + .1 + .3) = 0.3
    assert M.tvd(np.array([[1, 2], [7, 0]]), np.array([[3, 3], [4, 0]])) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        M.tvd([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        M.tvd([0, 0], [1, 1])
    with pytest.raises(ValueError):
        M.tvd([-1, 2], [1, 1])


def test_tvd_by_k_identical_and_disjoint_tables():
    rng = np.random.default_rng(3)
    cards = [3, 4, 2, 5]
    real = random_codes(rng, 500, cards)
    same = M.tvd_by_k(real, real[::-1].copy(), cards)
    assert set(same) == {1, 2, 3}
    for k, count in ((1, 4), (2, 6), (3, 4)):
        assert same[k]["count"] == count
        assert same[k]["mean"] == 0.0 and same[k]["max"] == 0.0
    a = np.zeros((10, 2), np.uint8)
    b = np.ones((7, 2), np.uint8)
    apart = M.tvd_by_k(a, b, [2, 2], ks=(1, 2))
    assert apart[1] == {"mean": 1.0, "max": 1.0, "count": 2}
    assert apart[2] == {"mean": 1.0, "max": 1.0, "count": 1}


def test_tvd_by_k_hand_example_and_missing_is_a_code():
    # column 1 has a missing code 2; real never uses it, synthetic does once.
    real = np.array([[0, 0], [0, 1], [1, 1], [1, 1]], np.uint8)
    synth = np.array([[0, 0], [0, 2], [1, 1], [1, 1]], np.uint8)
    got = M.tvd_by_k(real, synth, [2, 3], ks=(1, 2, 3))
    # 1-way: column 0 equal (0); column 1 real (1/4, 3/4, 0) vs (1/4, 2/4, 1/4): 0.25
    assert got[1]["mean"] == pytest.approx(0.125) and got[1]["max"] == pytest.approx(0.25)
    # 2-way: cells (0,1) 1/4 vs 0 and (0,2) 0 vs 1/4: 0.25
    assert got[2] == {"mean": pytest.approx(0.25), "max": pytest.approx(0.25), "count": 1}
    assert got[3]["count"] == 0 and math.isnan(got[3]["mean"])


def test_tvd_vs_marginals_by_index_and_name_with_clipping():
    schema = schema_from_dict(
        {"name": "t", "columns": [
            {"name": "a", "type": "categorical", "values": ["x", "y"]},
            {"name": "b", "type": "categorical", "values": ["u", "v", "w"]},
        ]}
    )
    synth = EncodedTable(schema=schema, codes=np.array([[0, 0], [0, 1], [1, 2], [1, 2]], np.uint8))
    exact_ab = np.array([[1, 1, 0], [0, 0, 2]])
    noisy_b = np.array([1.0, -3.0, 1.0])  # clipped to (1, 0, 1): (.5, 0, .5) vs (.25, .25, .5)
    got = M.tvd_vs_marginals(
        synth,
        {
            ("a", "b"): exact_ab,
            ("b", "a"): exact_ab.T,  # key order gives the axis order
            (1,): noisy_b,
            (0,): np.array([-2.0, -1.0]),  # all clipped away: read as uniform = exact here
        },
    )
    assert got[("a", "b")] == 0.0
    assert got[("b", "a")] == 0.0
    assert got[(1,)] == pytest.approx(0.25)
    assert got[(0,)] == 0.0
    summary = M.summarize_by_k(got)
    assert summary[1]["count"] == 2 and summary[1]["max"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="cells"):
        M.tvd_vs_marginals(synth, {("a",): np.ones(3)})
    with pytest.raises(ValueError, match="unknown column"):
        M.tvd_vs_marginals(synth, {("zz",): np.ones(3)})
    # arrays with explicit cardinalities and indices
    got2 = M.tvd_vs_marginals(synth.codes, {(1, 0): exact_ab.T}, [2, 3])
    assert got2[(1, 0)] == 0.0
    flat = M.tvd_vs_marginals(synth, {("b", "a"): exact_ab.T.ravel()})  # flat C order
    assert flat[("b", "a")] == 0.0
    swapped = M.tvd_vs_marginals(synth.codes, {(0, 1): exact_ab[::-1]}, [2, 3])
    assert swapped[(0, 1)] == 1.0  # rows of a swapped: disjoint supports


# --- baseline -------------------------------------------------------------------


def correlated_table(rng: np.random.Generator, n: int) -> tuple[np.ndarray, list[int]]:
    a = rng.integers(0, 4, size=n)
    b = (a + (rng.random(n) < 0.05)) % 4  # b copies a 95% of the time
    c = (a * 2 + rng.integers(0, 2, size=n)) % 6  # c determined by a up to one bit
    return np.column_stack([a, b, c]).astype(np.uint8), [4, 4, 6]


def test_independent_baseline_keeps_1way_and_breaks_correlation():
    rng = np.random.default_rng(4)
    real, cards = correlated_table(rng, 20_000)
    base = M.independent_baseline(real, cards, 20_000, np.random.default_rng(5))
    assert base.shape == (20_000, 3)
    got = M.tvd_by_k(real, base, cards)
    assert got[1]["max"] < 0.03  # 1-way marginals kept (sampling error only)
    assert got[2]["mean"] > 0.5  # strong 2-way structure destroyed
    assert got[3]["mean"] > 0.6
    for s, value in M.iter_tvds(real, base, cards, M.k_subsets(3, 2)):
        assert value > 0.4, s
        # and the baseline's own pair table is the product of its 1-way tables
        pair = M.marginal_counts(base, cards, s).astype(float)
        product = np.outer(pair.sum(axis=1), pair.sum(axis=0))
        assert M.tvd(pair, product) < 0.03, s
    # a resample of the real rows keeps the structure: the contrast is the point
    resample = real[np.random.default_rng(6).integers(0, 20_000, size=20_000)]
    assert M.tvd_by_k(real, resample, cards)[2]["max"] < 0.03


def test_independent_baseline_never_draws_absent_codes():
    real = np.array([[1, 0]] * 5 + [[3, 0]] * 5, np.uint8)
    base = M.independent_baseline(real, [5, 2], 2000, np.random.default_rng(0))
    assert set(np.unique(base[:, 0])) == {1, 3}
    assert set(np.unique(base[:, 1])) == {0}
    assert 0.4 < np.mean(base[:, 0] == 1) < 0.6


# --- coverage -------------------------------------------------------------------


def test_fabricated_suppressed_hand_example():
    # two columns, missing code 2 in column 1
    real = np.array([[0, 0], [0, 1], [1, 2]], np.uint8)
    synth = np.array([[0, 0], [1, 1], [1, 2], [1, 2]], np.uint8)
    one = M.fabricated_suppressed(real, synth, 1, [None, 2], cardinalities=[2, 3])
    # 1-way non-missing values: real {a0, a1, b0, b1}, synth {a0, a1, b0, b1}
    assert one == {"fabricated": 0, "suppressed": 0, "real": 4, "synthetic": 4}
    two = M.fabricated_suppressed(real, synth, 2, [None, 2])
    # pairs without missing: real {(0,0), (0,1)}, synth {(0,0), (1,1)}
    assert two == {"fabricated": 1, "suppressed": 1, "real": 2, "synthetic": 2}
    same = M.fabricated_suppressed(real, real, 3, [None, 2])
    assert same == {"fabricated": 0, "suppressed": 0, "real": 0, "synthetic": 0}


def test_fabricated_suppressed_three_way_random():
    rng = np.random.default_rng(7)
    cards = [3, 3, 4, 2]
    real, synth = random_codes(rng, 40, cards), random_codes(rng, 40, cards)
    miss = [2, None, 3, None]
    fab = sup = 0
    for s in combinations(range(4), 3):
        r = {tuple(row[list(s)]) for row in real}
        q = {tuple(row[list(s)]) for row in synth}
        ok = lambda t: all(miss[j] is None or v != miss[j] for j, v in zip(s, t))  # noqa: E731
        fab += len({t for t in q - r if ok(t)})
        sup += len({t for t in r - q if ok(t)})
    got = M.fabricated_suppressed(real, synth, 3, miss, cardinalities=cards)
    assert (got["fabricated"], got["suppressed"]) == (fab, sup)


def test_complete_share():
    codes = np.array([[0, 0], [1, 2], [0, 2], [1, 1]], np.uint8)
    assert M.complete_share(codes, [None, 2]) == 0.5
    assert M.complete_share(codes, [1, 2]) == 0.25
    assert M.complete_share(codes, [None, None]) == 1.0
    with pytest.raises(ValueError):
        M.complete_share(codes, [None])


# --- NIST k-marginal ------------------------------------------------------------


def test_nist_percentile_bins_and_synthetic_thresholds():
    target = pd.DataFrame({"AGEP": [str(v) for v in range(1, 21)]})
    synth = pd.DataFrame({"AGEP": ["0", "1.5", "18.9", "19", "20", "100", "N", "junk"]})
    t, s, cards, dropped = M.nist_encode(target, synth, ["AGEP"])
    # pct of value v is v/20: bin floor(20 * v/20) = v, except the top (pct 1) -> 19
    assert t[:, 0].tolist() == list(range(1, 20)) + [19]
    # synthetic: first bin whose largest target value is not exceeded (truncated first)
    assert s[:, 0].tolist() == [1, 1, 18, 19, 19, 19, 20, 20]
    assert cards == (21,) and dropped == (None,)


def test_nist_povpip_501_and_missing_have_own_bins():
    target = pd.DataFrame({"POVPIP": ["N", "501", "0", "100", "200", "300", "501"]})
    synth = pd.DataFrame({"POVPIP": ["501", "N", "250", "450"]})
    t, s, cards, _ = M.nist_encode(target, synth, ["POVPIP"])
    assert cards == (22,)
    assert t[:, 0].tolist() == [21, 20, 5, 10, 15, 19, 20]
    # 450 > largest regular target value (300): SDNist's last bin is the 501 bucket
    assert s[:, 0].tolist() == [20, 21, 19, 20]


def test_nist_density_log_bins_drop_zero():
    edges = M._density_edges(M.NIST_DENSITY_MAX)
    assert edges.size == 15 and edges[:2].tolist() == [0.0, 150.0]
    assert edges[-1] == pytest.approx(M.NIST_DENSITY_MAX + 500)
    assert np.all(np.diff(np.log(edges[1:])) > 0)
    # truncated to whole numbers first (150.7 -> 150); bins are right-closed
    target = pd.DataFrame({"DENSITY": ["100.5", "100", "150", "150.7", "151", "99999"]})
    synth = pd.DataFrame({"DENSITY": ["0", "-5", "100"]})
    t, s, cards, dropped = M.nist_encode(target, synth, ["DENSITY"])
    assert t[:, 0].tolist() == [0, 0, 0, 0, 1, 13] and cards == (15,) and dropped == (14,)
    assert s[:, 0].tolist() == [14, 14, 0]
    # target all in bin 0; synthetic: 1 of 3 rows in bin 0, the others dropped but
    # counted in the denominator: L1 = 1 - 1/3, score = 1000 * (1 - L1 / 2)
    score = M.nist_kmarginal_score(target.iloc[:2], synth, ["DENSITY"])
    assert score == pytest.approx(1000 * (1 - (2 / 3) / 2))


def test_nist_marginal_choice():
    cols = {f: ["1", "2"] for f in ["PUMA", "B", "A", "C"]}
    df = pd.DataFrame(cols)
    tvds = M.nist_marginal_tvds(df, df)
    assert [m for m, _ in tvds] == [("PUMA", "A", "B"), ("PUMA", "A", "C"), ("PUMA", "B", "C")]
    assert [m for m, _ in M.nist_marginal_tvds(df, df, ["A", "B", "C"])] == [("A", "B"), ("A", "C"), ("B", "C")]
    wide = pd.DataFrame({f"F{i:02d}": ["1", "2"] for i in range(31)})
    many = M.nist_marginal_tvds(wide, wide, seed=3)
    assert len(many) == 200 and all(len(set(m)) == 2 for m, _ in many)
    assert [m for m, _ in many] == [m for m, _ in M.nist_marginal_tvds(wide, wide, seed=3)]


def test_nist_score_hand_example_and_value_spelling():
    target = pd.DataFrame({"SEX": ["1", "1", "2", "2"], "EDU": ["N", "3", "3", "3"]})
    synth = pd.DataFrame({"SEX": ["1.0", "2", "2", "2"], "EDU": ["N", "3", "3", "3"]})
    # (SEX, EDU): target (1,N) (1,3) (2,3) (2,3); synth (1,N) (2,3) x3
    # densities: (1,N) .25/.25, (1,3) .25/0, (2,3) .5/.75 -> L1 .5, TVD .25
    assert M.nist_kmarginal_score(target, synth) == pytest.approx(750.0)
    assert M.nist_kmarginal_score(target, target) == 1000.0


def shared_data() -> Path | None:
    here = Path(__file__).resolve().parents[2] / "shared" / "data"
    if (here / "nist" / "national2019.csv").is_file():
        return here
    env = os.environ.get("DPSYNTH_SHARED_DATA")
    if env and (Path(env) / "nist" / "national2019.csv").is_file():
        return Path(env)
    return None


@pytest.fixture(scope="module")
def national2019() -> pd.DataFrame:
    root = shared_data()
    if root is None:
        pytest.skip("shared benchmark data (shared/data/nist) is not available")
    return pd.read_csv(root / "nist" / "national2019.csv", dtype=str, keep_default_na=False)


def groupby_reference_score(target: pd.DataFrame, synthetic: pd.DataFrame, features) -> float:
    """The k-marginal score written directly with pandas (rank + groupby), for AGEP only.

    Valid for a subsample of the target: its AGEP bins are the target's bins.
    """
    def binned(df: pd.DataFrame) -> pd.DataFrame:
        out = df[list(features)].copy()
        pct = target["AGEP"].astype(int).rank(pct=True)
        bins = np.where(pct < 1, np.floor(20 * pct), 19).astype(int)
        out["AGEP"] = pd.Series(bins, index=target.index).loc[df.index].to_numpy()
        return out

    t, s = binned(target), binned(synthetic)
    total = []
    for a, b in combinations(sorted(features), 2):
        dt = t.groupby([a, b]).size() / len(t)
        ds = s.groupby([a, b]).size() / len(s)
        total.append(dt.subtract(ds, fill_value=0).abs().sum())
    return 1000 * (1 - np.mean(total) / 2)


def test_nist_matches_direct_groupby_computation(national2019):
    sub = national2019.sample(frac=0.05, random_state=11)
    ours = M.nist_kmarginal_score(national2019, sub, M.NIST_DEMOGRAPHIC_FEATURES)
    ref = groupby_reference_score(national2019, sub, M.NIST_DEMOGRAPHIC_FEATURES)
    assert ours == pytest.approx(ref, abs=1e-9)
    assert M.nist_kmarginal_score(national2019, national2019, M.NIST_DEMOGRAPHIC_FEATURES) == 1000.0


# Published SDNist sample reports (national2019, demographic) list these scores for
# subsamples of the target data. The subsample is random, so the published numbers
# carry sampling noise: two published runs read 898 and 902 at 1%, 954 and 946 at 5%.
# Over 20 seeds we measured a single-run standard deviation of about 5.2, 3.0, 1.3 and
# 0.8 points at 1, 5, 10 and 40%. We average 5 fixed seeds (deterministic test) and
# allow about three times the combined deviation of that mean and of a single
# published run: 10, 8, 4 and 3 points. Wrong binning moves the scores more than that
# at some fraction: AGEP unbinned -39/-17/-13/-5, 10 bins +10/+4/+3/+1, 40 bins
# -15/-6/-5/-2.
NIST_REFERENCE = [(0.01, 898, 10.0), (0.05, 954, 8.0), (0.10, 969, 4.0), (0.40, 987, 3.0)]


@pytest.mark.parametrize("frac,published,tolerance", NIST_REFERENCE)
def test_nist_reference_subsample_scores(national2019, frac, published, tolerance):
    scores = [
        M.nist_kmarginal_score(
            national2019, national2019.sample(frac=frac, random_state=seed), M.NIST_DEMOGRAPHIC_FEATURES
        )
        for seed in range(5)
    ]
    assert abs(np.mean(scores) - published) <= tolerance, scores


@pytest.mark.slow
def test_engine_speed_one_million_rows():
    import time

    rng = np.random.default_rng(8)
    cards = rng.integers(2, 13, size=20)
    codes = random_codes(rng, 1_000_000, cards)
    start = time.perf_counter()
    n = sum(1 for _ in M.iter_marginals(codes, cards, M.k_subsets(20, 3)))
    elapsed = time.perf_counter() - start
    assert n == 1140
    assert elapsed < 7.0, elapsed  # half the 14 s target, with room for a busy machine
