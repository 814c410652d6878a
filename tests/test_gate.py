"""Tests of dpsynth.gate: the GE release gate and its Data Docs.

An honest baseline release of the demo table must pass; broken synthesizers (columns
swapped, codes relabelled, rows permuted against a 2-way marginal, out-of-domain
values, wrong row count, wrong columns or types, a decoder that shifts labels) must
fail, naming the failed expectations; no summary and no Data Docs page may show a
value of the table. GE's import is slow (5-9 s), so the release is built once per
module; the formula tests need no GE.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpsynth.rows.encoding import EncodedTable, decode, encode, read_table
from dpsynth.gate import (
    GateError,
    dp_row_estimate,
    predicted_tvd,
    predicted_tvd_sd,
    run_gate,
    write_data_docs,
)
from dpsynth.methods.base import Measurement, NoisyCount, NoisyMarginal
from dpsynth.methods.marginals import MarginalsMethod, estimate_rows
from dpsynth.privacy.budget import Budget, Ledger
from dpsynth.privacy.noise import discrete_gaussian
from dpsynth.schema import load_schema

ROOT = Path(__file__).resolve().parents[1]
CANARY = "CANARY-7f3a"


@dataclasses.dataclass
class Release:
    schema: object
    measurement: Measurement
    codes: EncodedTable
    table: pd.DataFrame


@pytest.fixture(scope="module")
def release() -> Release:
    schema = load_schema(ROOT / "schemas" / "demo.yaml")
    raw = encode(read_table(ROOT / "data" / "demo.csv", schema), schema)
    method = MarginalsMethod()
    budget = Budget(epsilon=1.0, delta=1e-6)
    rng = np.random.default_rng(20240601)
    m = method.measure(raw, Ledger(budget, method.plan(schema, budget)), rng)
    codes = method.synthesize(m, schema, None, rng)
    return Release(schema, m, codes, decode(codes, rng))


@pytest.fixture(scope="module")
def honest(release) -> dict:
    return run_gate(release.table, release.codes, release.measurement, None)


def _broken(release: Release, codes: np.ndarray, seed: int = 0) -> tuple[pd.DataFrame, EncodedTable]:
    enc = EncodedTable(release.schema, codes)
    return decode(enc, np.random.default_rng(seed)), enc


def _failed(summary: dict) -> set[str]:
    return set(summary["failed"])


# --- the honest release ------------------------------------------------------------


def test_honest_release_passes(release, honest):
    assert honest["success"] is True, honest["failed"]
    assert honest["failed"] == []
    json.dumps(honest, allow_nan=False)  # JSON-serialisable, no NaN
    stats = honest["statistics"]
    assert stats["failed"] == 0 and stats["evaluated"] == len(honest["expectations"])
    assert stats["rows"] == release.codes.n == estimate_rows(release.measurement)
    assert stats["noise_scale_source"] == "measurement"
    labels = {(e["name"], e.get("column")) for e in honest["expectations"]}
    for name in ("columns_match_schema", "row_count", "codes_match_table", "max_tvd_k1", "mean_tvd_k1"):
        assert (name, None) in labels
    for col in release.schema.columns:
        for name in ("exists", "type", "in_domain"):
            assert (name, col.name) in labels
        assert (("not_null", col.name) in labels) == (not col.nullable)
    errors = honest["marginal_errors"]
    assert [e["marginal"] for e in errors] == release.schema.names
    assert all(e["k"] == 1 and 0 <= e["tvd"] <= e["threshold"] for e in errors)
    for key in ("max_tvd_k1", "mean_tvd_k1", "row_count_tolerance", "sd_factor", "min_factor"):
        assert key in honest["thresholds"]


def test_summary_observed_holds_numbers_only(honest):
    for e in honest["expectations"]:
        for v in e["observed"].values():
            assert isinstance(v, (int, float, bool)) or v is None, e


def test_honest_release_with_requested_rows_passes(release):
    rng = np.random.default_rng(7)
    codes = MarginalsMethod().synthesize(release.measurement, release.schema, 1234, rng)
    summary = run_gate(decode(codes, rng), codes, release.measurement, 1234)
    assert summary["success"], summary["failed"]
    row = next(e for e in summary["expectations"] if e["name"] == "row_count")
    assert row["observed"] == {"rows": 1234, "min": 1234, "max": 1234}


def test_gate_reads_the_stated_noise_scale(release):
    """The thresholds follow each marginal's stated stddev: a larger stated noise, a looser threshold."""
    m = release.measurement
    wider = dataclasses.replace(m, measured=tuple(dataclasses.replace(nm, stddev=nm.stddev * 10) for nm in m.measured))
    base = run_gate(release.table, release.codes, m, None)
    loose = run_gate(release.table, release.codes, wider, None)
    assert base["statistics"]["noise_scale_source"] == "measurement"
    for a, b in zip(base["marginal_errors"], loose["marginal_errors"]):
        assert b["threshold"] > a["threshold"]


# --- broken synthesizers -----------------------------------------------------------


def test_swapped_columns_fail(release):
    c = release.codes.codes.copy()
    i, j = release.schema.index("region"), release.schema.index("health")
    assert release.schema.columns[i].cardinality == release.schema.columns[j].cardinality
    c[:, [i, j]] = c[:, [j, i]]
    summary = run_gate(*_broken(release, c), release.measurement, None)
    assert not summary["success"]
    assert "max_tvd_k1" in _failed(summary)
    bad = {e["marginal"] for e in summary["marginal_errors"] if e["tvd"] > e["threshold"]}
    assert bad == {"region", "health"}
    # record validity still holds: the values are in domain, only misplaced
    assert not any(": in_domain" in f for f in summary["failed"])


def test_relabelled_codes_fail(release):
    c = release.codes.codes.copy()
    j = release.schema.index("age")
    c[:, j] = (c[:, j] + 1) % release.schema.columns[j].cardinality
    summary = run_gate(*_broken(release, c), release.measurement, None)
    assert "max_tvd_k1" in _failed(summary)
    assert [e["marginal"] for e in summary["marginal_errors"] if e["tvd"] > e["threshold"]] == ["age"]


def test_uniform_synthesizer_fails_mean_and_max(release):
    rng = np.random.default_rng(3)
    c = np.column_stack([rng.integers(0, col.cardinality, release.codes.n) for col in release.schema.columns])
    summary = run_gate(*_broken(release, c.astype(np.uint8)), release.measurement, None)
    assert {"max_tvd_k1", "mean_tvd_k1"} <= _failed(summary)


def _two_way_release(release: Release, rng: np.random.Generator) -> tuple[Measurement, EncodedTable]:
    """A measurement with a noisy 2-way marginal and an honest sample from it."""
    schema = release.schema
    raw = encode(read_table(ROOT / "data" / "demo.csv", schema), schema)
    a, b = schema.index("employment"), schema.index("hours_per_week")
    ca, cb = schema.columns[a].cardinality, schema.columns[b].cardinality
    joint = np.bincount(raw.codes[:, a].astype(np.int64) * cb + raw.codes[:, b], minlength=ca * cb)
    sigma = 8.0
    noisy = (joint + discrete_gaussian(sigma, joint.size, rng)).astype(np.float64).reshape(ca, cb)
    pair_m = NoisyMarginal(attrs=("employment", "hours_per_week"), counts=noisy, stddev=sigma)
    m = dataclasses.replace(release.measurement, method="custom", measured=release.measurement.measured + (pair_m,))
    codes = release.codes.codes.copy()
    p = np.clip(noisy.ravel(), 0, None)
    pair = rng.choice(p.size, size=codes.shape[0], p=p / p.sum())
    codes[:, a], codes[:, b] = pair // cb, pair % cb
    return m, EncodedTable(schema, codes)


def test_two_way_marginal_honest_passes_and_permuted_rows_fail(release):
    rng = np.random.default_rng(11)
    m, enc = _two_way_release(release, rng)
    table = decode(enc, rng)
    ok = run_gate(table, enc, m, None)
    assert ok["success"], ok["failed"]
    assert {e["k"] for e in ok["marginal_errors"]} == {1, 2}
    # Permuting one column's values across rows keeps every 1-way marginal and breaks the 2-way one.
    c = enc.codes.copy()
    j = release.schema.index("hours_per_week")
    c[:, j] = rng.permutation(c[:, j])
    summary = run_gate(*_broken(release, c), m, None)
    assert not summary["success"]
    assert "max_tvd_k2" in _failed(summary)
    assert not any(f.endswith("_k1") for f in summary["failed"])


def test_out_of_domain_values_fail_without_showing_them(release):
    df = release.table.copy()
    df.loc[[3, 10], "region"] = CANARY
    df.loc[5, "age"] = 200
    df.loc[6, "sex"] = pd.NA
    summary = run_gate(df, release.codes, release.measurement, None)
    assert not summary["success"]
    assert {"region: in_domain", "age: in_domain", "sex: not_null"} <= _failed(summary)
    text = json.dumps(summary)
    assert CANARY not in text and "partial_unexpected" not in text and "unexpected_list" not in text
    region = next(e for e in summary["expectations"] if e.get("column") == "region" and e["name"] == "in_domain")
    assert region["observed"]["unexpected_count"] == 2


def test_wrong_row_count_fails(release):
    n = release.codes.n
    assert "row_count" in _failed(run_gate(release.table, release.codes, release.measurement, n + 1))
    half = n // 2
    summary = run_gate(
        release.table.iloc[:half].reset_index(drop=True),
        EncodedTable(release.schema, release.codes.codes[:half]),
        release.measurement,
        None,
    )
    assert _failed(summary) == {"row_count"}


def test_wrong_columns_and_types_fail(release):
    df = release.table
    assert "columns_match_schema" in _failed(run_gate(df[df.columns[::-1]], release.codes, release.measurement, None))
    dropped = run_gate(df.drop(columns=["age"]).assign(extra=1), release.codes, release.measurement, None)
    assert {"columns_match_schema", "age: exists"} <= _failed(dropped)
    floats = df.assign(age=df["age"].astype("float64") + 0.25)
    assert "age: type" in _failed(run_gate(floats, release.codes, release.measurement, None))


def test_decoder_that_shifts_labels_fails(release):
    """Honest codes, but a table whose region labels are rotated: marginals of the codes
    look fine, the published table is wrong."""
    col = release.schema.column("region")
    rotate = dict(zip(col.values, col.values[1:] + col.values[:1]))
    df = release.table.assign(region=release.table["region"].map(rotate).astype("string"))
    summary = run_gate(df, release.codes, release.measurement, None)
    assert "codes_match_table" in _failed(summary)


# --- thresholds ----------------------------------------------------------------------


def test_threshold_overrides(release, honest):
    tight = run_gate(release.table, release.codes, release.measurement, None, {"max_tvd_k1": 1e-6})
    assert _failed(tight) == {"max_tvd_k1"}
    assert tight["thresholds"]["max_tvd_k1"] == 1e-6 and tight["thresholds"]["overridden"] == ["max_tvd_k1"]
    assert all(e["threshold"] == 1e-6 for e in tight["marginal_errors"])
    mean = run_gate(release.table, release.codes, release.measurement, None, {"mean_tvd_k1": 1e-6})
    assert _failed(mean) == {"mean_tvd_k1"}
    rows = run_gate(
        release.table.iloc[:4000], EncodedTable(release.schema, release.codes.codes[:4000]),
        release.measurement, None, {"row_count_tolerance": 0.5},
    )
    assert "row_count" not in _failed(rows)
    for bad in ({"max_tvd_k0": 0.1}, {"tvd": 0.1}, {"max_tvd_k1": -1}, {"sd_factor": float("nan")}):
        with pytest.raises(GateError):
            run_gate(release.table, release.codes, release.measurement, None, bad)


def test_default_thresholds_follow_the_formula(release, honest):
    m = release.measurement
    n_hat = float(estimate_rows(m))
    args = {}
    for e in honest["marginal_errors"]:
        key = tuple(e["marginal"].split("|"))
        args[key] = (m.marginals[key], release.codes.n, n_hat, m.stddev(key))
        pred, sd = predicted_tvd(*args[key]), predicted_tvd_sd(*args[key])
        assert math.isclose(e["predicted"], pred) and math.isclose(e["predicted_sd"], sd)
        assert math.isclose(e["threshold"], max(2 * pred, pred + 6 * sd))
    preds = [predicted_tvd(*a) for a in args.values()]
    sds = [predicted_tvd_sd(*a) for a in args.values()]
    mean = np.mean(preds)
    expected = max(2 * mean, mean + 6 * math.sqrt(sum(s * s for s in sds)) / len(sds))
    assert math.isclose(honest["thresholds"]["mean_tvd_k1"], expected)


# --- the formula, without GE ---------------------------------------------------------


def test_predicted_tvd_matches_sampling_simulation():
    rng = np.random.default_rng(5)
    q = np.array([0.5, 0.2, 0.15, 0.1, 0.05])
    n = 2000
    sims = [0.5 * np.abs(rng.multinomial(n, q) / n - q).sum() for _ in range(4000)]
    pred = predicted_tvd(q * 1000, n, 1000, 0.0)
    assert abs(np.mean(sims) / pred - 1) < 0.1
    # the noise term: larger sigma, larger prediction; negative counts are clipped
    assert predicted_tvd(q * 1000, n, 1000, 30.0) > pred
    assert predicted_tvd(np.array([-5.0, 10.0, 10.0]), 100, 20, 1.0) > 0
    # the spread: two cells are one half-normal |X|, sd sqrt(1 - 2/pi) s
    two = np.array([0.3, 0.7])
    sims2 = [0.5 * np.abs(rng.multinomial(n, two) / n - two).sum() for _ in range(4000)]
    assert abs(np.std(sims2) / predicted_tvd_sd(two, n, 1, 0.0) - 1) < 0.25
    assert abs(np.std(sims) / predicted_tvd_sd(q, n, 1, 0.0) - 1) < 0.5


def test_row_estimate(release):
    m = release.measurement
    est = dp_row_estimate(m)
    assert est.value == estimate_rows(m)
    counted = dataclasses.replace(m, records=NoisyCount(value=4321.0, stddev=2.0))
    assert dp_row_estimate(counted).value == 4321
    assert dp_row_estimate(dataclasses.replace(m, measured=())) is None


# --- Data Docs -----------------------------------------------------------------------


_REMOTE = re.compile(
    r"""(?:<script\b[^>]*\bsrc|<img\b[^>]*\bsrc|<link\b[^>]*\bhref)\s*=\s*['"]?(?:https?:)?//|url\(\s*['"]?(?:https?:)?//""",
    re.I,
)


def test_data_docs_offline_and_without_values(release, tmp_path):
    df = release.table.copy()
    df.loc[[1, 2, 3], "region"] = CANARY
    df.loc[4, "education"] = CANARY + "-edu"
    df["age"] = df["age"].astype(object)
    df.loc[5, "age"] = CANARY + "-age"  # GE's range check raises on text: its message is withheld
    df[CANARY + "-column"] = 1
    summary = run_gate(df, release.codes, release.measurement, None)
    assert {"region: in_domain", "education: in_domain", "age: in_domain", "columns_match_schema"} <= _failed(summary)
    assert CANARY not in json.dumps(summary)
    index = write_data_docs(df, release.codes, release.measurement, None, None, tmp_path / "docs")
    assert index == tmp_path / "docs" / "index.html" and index.is_file()
    pages = list((tmp_path / "docs").rglob("*.html"))
    assert len(list((tmp_path / "docs" / "validations").rglob("*.html"))) == 2
    assert len(pages) >= 5
    for path in (tmp_path / "docs").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert CANARY.encode() not in data, path
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert not _REMOTE.search(text), page
    records = next((tmp_path / "docs" / "validations").rglob("*synthetic_records*.html")).read_text()
    assert "unexpected" in records  # counts are shown, values are not
    assert "synthetic_records" in index.read_text()
    with pytest.raises(GateError):
        write_data_docs(df, release.codes, release.measurement, None, None, tmp_path / "docs")


def test_data_docs_show_the_exact_counts_of_every_row(release, tmp_path):
    """Defect: GE evaluates the record checks on a few witness rows, and the Data Docs said
    "1 unexpected values found, 16.67% of 6 total rows" for 3 bad values in 4,987 rows. Now
    they show the exact whole-table counts and say what GE evaluated."""
    df = release.table.copy()
    df.loc[[1, 2, 3], "region"] = "not-a-region"
    index = write_data_docs(df, release.codes, release.measurement, None, None, tmp_path / "docs")
    n = len(df)
    page = next((tmp_path / "docs" / "validations").rglob("*synthetic_records*.html")).read_text()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))
    assert f"3 unexpected values found. ≈{100 * 3 / n:.4g}% of {n} total rows" in text
    assert re.search(r"of [0-9] total rows", text) is None  # never the witness rows' count
    for path in (index, *(tmp_path / "docs" / "validations").rglob("*.html")):
        note = re.sub(r"\s+", " ", path.read_text())
        assert f"all {n:,} rows of the synthetic table" in note and "witness table of" in note, path


def test_gate_with_docs_runs_once_and_renders_only_a_pass(release, honest, tmp_path):
    with_docs = run_gate(release.table, release.codes, release.measurement, None, docs=tmp_path / "ok")
    assert with_docs == honest  # same verdict and numbers as the ephemeral run
    assert (tmp_path / "ok" / "index.html").exists()
    c = release.codes.codes.copy()
    i, j = release.schema.index("region"), release.schema.index("health")
    c[:, [i, j]] = c[:, [j, i]]
    failed = run_gate(*_broken(release, c), release.measurement, None, docs=tmp_path / "bad")
    assert not failed["success"]
    assert not (tmp_path / "bad").exists()  # a failed gate renders no docs


# --- every measured marginal of every size, against its own stated noise -------------


def _with_three_way(release: Release, sd3: float, seed: int = 11) -> Measurement:
    """The release's 1-way marginals plus a noisy 3-way marginal of the raw table."""
    raw = encode(read_table(ROOT / "data" / "demo.csv", release.schema), release.schema)
    cols = ("region", "employment", "hours_per_week")
    idx = [release.schema.index(c) for c in cols]
    cards = [release.schema.cardinalities[j] for j in idx]
    flat = np.ravel_multi_index(tuple(raw.codes[:, j].astype(np.int64) for j in idx), cards)
    exact = np.bincount(flat, minlength=int(np.prod(cards))).reshape(cards)
    noisy = exact + discrete_gaussian(sd3, exact.shape, np.random.default_rng(seed))
    three = NoisyMarginal(attrs=cols, counts=noisy, stddev=sd3)
    return dataclasses.replace(release.measurement, measured=(*release.measurement.measured, three)), raw


def test_gate_checks_a_three_way_marginal_against_its_stated_noise(release):
    m, raw = _with_three_way(release, sd3=3.0)
    rng = np.random.default_rng(5)
    honest_codes = EncodedTable(release.schema, raw.codes[rng.integers(0, raw.n, raw.n)])
    ok = run_gate(decode(honest_codes, rng), honest_codes, m, None)
    assert ok["success"], ok["failed"]
    k3 = [e for e in ok["marginal_errors"] if e["k"] == 3]
    assert [e["marginal"] for e in k3] == ["region|employment|hours_per_week"]
    assert {"max_tvd_k3", "mean_tvd_k3"} <= {e["name"] for e in ok["expectations"]}
    # the 1-way marginals hold, the 3-way association is destroyed: only k = 3 fails
    broken = honest_codes.codes.copy()
    j = release.schema.index("employment")
    broken[:, j] = rng.permutation(broken[:, j])
    bad = run_gate(*_broken(release, broken), m, None)
    assert "max_tvd_k3" in _failed(bad) and not any(f.endswith("k1") for f in _failed(bad))
    # a larger stated noise scale widens the 3-way threshold, and only that one
    loose, _ = _with_three_way(release, sd3=300.0)
    wide = run_gate(decode(honest_codes, rng), honest_codes, loose, None)
    t = {e["marginal"]: e["threshold"] for e in wide["marginal_errors"]}
    t0 = {e["marginal"]: e["threshold"] for e in ok["marginal_errors"]}
    assert t["region|employment|hours_per_week"] > 2 * t0["region|employment|hours_per_week"]
    assert t["region"] == pytest.approx(t0["region"])


def test_predicted_tvds_of_many_tables_equal_each_tables_own():
    """The gate computes every marginal's predicted TVD and its spread in one pass; each must
    equal the one-table formula, including tables that are negative, NaN or empty after clipping."""
    from dpsynth.gate.thresholds import predicted_tvds

    rng = np.random.default_rng(3)
    tables = [rng.normal(50, 30, size=shape) for shape in [(3,), (4, 5), (2, 3, 2), (7,)]]
    tables += [np.array([-3.0, -1.0]), np.array([np.nan, 4.0, np.inf]), np.array([0.0])]
    sigmas = rng.uniform(0.5, 9.0, size=len(tables))
    pred, sd = predicted_tvds(tables, 400, 410.0, sigmas)
    for t, s, p, q in zip(tables, sigmas, pred, sd):
        assert math.isclose(p, predicted_tvd(t, 400, 410.0, s), rel_tol=1e-12)
        assert math.isclose(q, predicted_tvd_sd(t, 400, 410.0, s), rel_tol=1e-12)
    with pytest.raises(ValueError, match="at least one cell"):
        predicted_tvds([np.zeros(0)], 10, 10.0, [1.0])
