"""The report as a data owner reads it (issue 15): each test reads the HTML.

Unit tests use hand-made measurements (fast, exact numbers); the slow ones publish real
releases on the demo table (pgm: 2-way marginals; sds: its aggregate tuples, and every
marginal size it measures) and read ``report.html``.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dpsynth.rows.encoding import EncodedTable
from dpsynth.measurement import Measurement, NoisyMarginal, PrivacyStatement
from dpsynth.privacy.budget import Charge
from dpsynth.report import build_report, utility
from dpsynth.schema import format_edges, schema_from_dict

ROOT = Path(__file__).resolve().parents[1]


def _text(page: str) -> str:
    """The page's visible text, tags removed, whitespace collapsed."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


def _pair_schema(numeric: bool = False):
    cols = [{"name": "a", "type": "categorical", "values": ["x", "y"]},
            {"name": "b", "type": "categorical", "values": ["u", "v"]}]
    if numeric:
        cols.append({"name": "n", "type": "numeric", "bounds": [0, 99], "bins": 10})
    return schema_from_dict({"name": "pairs", "columns": cols})


def _diagonal(schema, rows: int = 200) -> EncodedTable:
    """a == b on every row, half x/u, half y/v (other columns code 0)."""
    half = np.arange(rows) % 2
    cols = [half, half] + [np.zeros(rows, dtype=np.int64)] * (len(schema.columns) - 2)
    return EncodedTable(schema, np.column_stack(cols).astype(np.uint8))


def _diag_measurement(statement: PrivacyStatement | None = None, **kw) -> Measurement:
    one = np.array([100.0, 100.0])
    measured = (NoisyMarginal(attrs=("a",), counts=one, stddev=1.0), NoisyMarginal(attrs=("b",), counts=one, stddev=1.0),
                NoisyMarginal(attrs=("a", "b"), counts=np.array([[100.0, 0.0], [0.0, 100.0]]), stddev=1.0))
    extra = {} if statement is None else {"statement": statement}
    return Measurement(method="marginals", params={}, charges=(Charge(stage="measure", rho=0.5),),
                       measured=measured, **extra, **kw)


def _manifest(dp: bool = True, dataset: dict | None = None) -> dict:
    privacy = {"epsilon": 1.0, "delta": 1e-6, "rho": 0.0244, "rho_spent": 0.0244, "epsilon_spent": 1.0,
               "differentially_private": dp, "guarantee": "dp" if dp else "anonymous"}
    if dp:
        privacy["neighbours"] = "add or remove one record"
    else:
        privacy["statement"] = "20-anonymous microaggregation"
    if dataset is not None:
        privacy["dataset"] = dataset
    return {"name": "r", "method": "marginals", "privacy": privacy}


def test_privacy_sentence_states_guarantee_and_lifetime_spend():
    schema = _pair_schema()
    ds = {"name": "demo", "cap_epsilon": 10.0, "cap_delta": 1e-5, "spent_epsilon_including_this": 3.5,
          "spent_delta": 1e-5, "remaining_epsilon": 6.5, "releases_including_this": 4}
    page = build_report(_manifest(dataset=ds), schema, _diagonal(schema), _diag_measurement(), {})
    box = _text(page[page.index('<section class="privacy"'):page.index("</section>")])
    assert "This release is differentially private" in box
    assert "add or remove one record" in box
    assert "at most 2.72 times more likely" in box  # e^1 in words
    assert "about 1 in 1,000,000" in box  # delta in words
    assert "What an attacker cannot learn" in box and "What an attacker can learn" in box
    assert "one of 4 release(s) of dataset demo" in box
    assert "ε = 3.5" in box and "cap is ε = 10" in box and "ε = 6.5 remains" in box
    assert "NOT differentially private" not in page


def test_no_cap_is_said_with_the_command_to_set_one():
    schema = _pair_schema()
    ds = {"name": "demo", "cap_epsilon": None, "spent_epsilon_including_this": 1.45, "spent_delta": 1e-6,
          "releases_including_this": 2}
    page = _text(build_report(_manifest(dataset=ds), schema, _diagonal(schema), _diag_measurement(), {}))
    assert "No lifetime cap is declared" in page and "dpsynth budget set demo --epsilon E --delta D" in page


def test_not_dp_release_says_so_first_and_in_red():
    schema = _pair_schema()
    m = _diag_measurement(PrivacyStatement(kind="anonymous", detail="20-anonymous microaggregation"))
    page = build_report(_manifest(dp=False), schema, _diagonal(schema), m, {})
    box_at = page.index('<section class="privacy notdp"')
    assert box_at < page.index('id="utility"') < page.index('id="release"')  # before everything else
    box = _text(page[box_at:page.index("</section>", box_at)])
    assert box.startswith(" NOT differentially private This release is NOT differentially private.")
    assert "20-anonymous microaggregation" in box and "No ε bound applies" in box
    assert "cannot learn" not in box  # no DP promise in a non-DP box
    assert "Privacy budget not applicable" in _text(page)
    assert "DP measurement" not in page[:page.index('id="plots"')]  # never called DP


def test_utility_score_and_baseline_by_hand():
    """Diagonal 2x2: the product of the 1-ways (0.25 each cell) is at TVD 0.5 from the
    measured 2-way; a synthetic table on the diagonal is at 0; one off it at 1."""
    schema = _pair_schema()
    m = _diag_measurement()
    u = utility(_diagonal(schema), m, {})
    assert u.by_k == {2: (1, 0.0, 0.5)} and u.score == 1.0 and u.baseline_score == 0.5
    flipped = _diagonal(schema).codes.copy()
    flipped[:, 1] = 1 - flipped[:, 1]
    assert utility(EncodedTable(schema, flipped), m, {}).score == 0.0
    page = _text(build_report(_manifest(), schema, _diagonal(schema), m, {}))
    assert "1 utility score vs 0.5 for the independent-columns baseline: better than independent columns" in page
    assert "Utility score = 1 − the mean total variation distance" in page
    assert "never from the raw data" in page


def test_utility_reads_gate_tvds_and_skips_marginals_without_1way():
    schema = _pair_schema()
    m = Measurement(method="x", params={}, charges=(), measured=(
        NoisyMarginal(attrs=("a",), counts=np.array([100.0, 100.0]), stddev=1.0),
        NoisyMarginal(attrs=("a", "b"), counts=np.array([[100.0, 0.0], [0.0, 100.0]]), stddev=1.0)))
    assert utility(_diagonal(schema), m, {}).score is None  # b has no 1-way: no baseline
    page = _text(build_report(_manifest(), schema, _diagonal(schema), m, {}))
    assert "Overall utility Not available" in page


def _k_way_measurement(schema, codes: EncodedTable, ks=(1, 2, 3)) -> Measurement:
    from itertools import combinations

    from dpsynth.rows.counting import iter_marginals

    cards = codes.cardinalities
    subsets = [s for k in ks for s in combinations(range(len(cards)), k)]
    measured = []
    for s, counts in iter_marginals(codes.codes, cards, subsets):
        measured.append(NoisyMarginal(attrs=tuple(schema.names[j] for j in s), counts=counts + 0.5, stddev=1.0))
    return Measurement(method="marginals", params={}, charges=(Charge(stage="m", rho=0.1),), measured=measured)


def test_accuracy_for_every_measured_marginal_size():
    from dpsynth.rows.encoding import decode
    from dpsynth.gate import run_gate

    schema = schema_from_dict({"name": "k3", "columns": [
        {"name": c, "type": "categorical", "values": ["p", "q", "r"]} for c in "abcd"]})
    rng = np.random.default_rng(5)
    base = rng.integers(0, 3, 400)
    codes = EncodedTable(schema, np.column_stack([base, base, (base + rng.integers(0, 2, 400)) % 3,
                                                  rng.integers(0, 3, 400)]).astype(np.uint8))
    m = _k_way_measurement(schema, codes)
    gate = run_gate(decode(codes, rng), codes, m, None)
    page = build_report(_manifest(), schema, codes, m, gate)
    acc = page[page.index('id="accuracy"'):page.index('id="release"')]
    by_k = gate["statistics"]["marginal_tvd_by_k"]
    assert set(by_k) == {"1", "2", "3"}
    for k, n in (("1", 4), ("2", 6), ("3", 4)):
        row = re.search(rf"<td>{k}-way</td>(.*?)</tr>", acc).group(1)
        cells = re.findall(r'<td class="num">(.*?)</td>', row)
        assert cells[0] == str(n)
        assert float(cells[1]) == pytest.approx(by_k[k]["mean_tvd"], rel=1e-3)
        assert float(cells[3]) == pytest.approx(by_k[k]["max_tvd"], rel=1e-3)
        assert float(cells[2]) == pytest.approx(by_k[k]["mean_threshold"], rel=1e-3)
    u = utility(codes, m, gate)
    assert set(u.by_k) == {2, 3} and u.marginals == 10
    assert u.score > u.baseline_score  # a and b are equal: columns are far from independent


def test_bin_labels_have_no_float_artefacts():
    schema = _pair_schema(numeric=True)
    labels = schema.column("n").labels()
    assert labels[:4] == ["[0, 9.9)", "[9.9, 19.8)", "[19.8, 29.7)", "[29.7, 39.6)"]
    assert labels[-1] == "[89.1, 99]"
    assert format_edges([0, 0.1, 0.15, 1]) == ["0", "0.1", "0.15", "1"]  # distinct: as many digits as needed
    assert format_edges([0, 100 / 3, 200 / 3, 100]) == ["0", "33.3", "66.7", "100"]  # within 1% of a bin
    page = build_report(_manifest(), schema, _diagonal(schema), _diag_measurement(), {})
    assert "29.70000" not in page


def test_every_parameter_shows_its_effective_value():
    schema = _pair_schema()
    m = Measurement(method="sds", params={"epsilon": None, "delta": None, "reporting_length": 2,
                                         "accuracy_mode": "prioritize_short"},
                    charges=(), meta={"epsilon": 1.0, "effective_params": {"delta": 2.5e-5}})
    manifest = {**_manifest(), "method": "sds", "parameters": dict(m.params)}
    page = build_report(manifest, schema, _diagonal(schema), m, {})
    params = page[page.index('id="parameters"'):page.index('id="files"')]
    row = {re.sub(r"<[^>]+>", "", r[0]): (re.sub(r"<[^>]+>", "", r[1]), r[2])
           for r in re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td></tr>", params)}
    assert row["epsilon"] == ("automatic: 1", "default")
    assert row["delta"] == ("automatic: 2.5e-5", "default")
    assert row["reporting_length"] == ("2", "set (default 3)")
    assert row["accuracy_mode"] == ("prioritize_short", "default")
    assert all(v.strip() for v, _ in row.values())  # nothing blank


def test_published_files_with_what_they_hold_and_sizes():
    schema = _pair_schema()
    agg = pd.DataFrame({"length": [1, 1, 2, 3, 3, 3], "count": [5, 6, 7, 8, 9, 10]})
    m = _diag_measurement(tables={"aggregates": agg})
    files = {"synthetic.csv": 250_435, "synthetic.parquet": 39_707, "measurement-aggregates.parquet": 26_004,
             "schema.yaml": 900, "data-docs": 4_200_000}
    page = build_report(_manifest(), schema, _diagonal(schema), m, {}, files=files)
    section = _text(page[page.index('id="files"'):page.index("Privacy ledger")])
    for name, shown in (("synthetic.csv", "250.4 KB"), ("synthetic.parquet", "39.7 KB"), ("schema.yaml", "900 bytes"),
                        ("data-docs/", "4.2 MB")):
        assert re.search(rf"{re.escape(name)} .*? {re.escape(shown)}", section), name
    assert "6 rows, each an aggregate count of one combination of values: 2 of 1 column, 1 of 2 columns, " \
           "3 of 3 columns" in section
    assert "manifest.json" in section and "this page" in section
    assert "measurement-aggregates.parquet" in _text(page[:page.index('id="release"')])  # named beside accuracy


# --- real releases (slow) ------------------------------------------------------------


def _release(tmp_path, method: str, params: dict | None = None):
    from dpsynth.api import release

    return release(ROOT / "data" / "demo.csv", ROOT / "schemas" / "demo.yaml", method=method, epsilon=1.0,
                   params=params, seed=b"report-owner-test-seed", out=tmp_path / "out",
                   workspace=tmp_path / "ws")


def _accuracy_rows(page: str) -> dict[int, list[str]]:
    acc = page[page.index('id="accuracy"'):page.index('id="release"')]
    return {int(k): re.findall(r'<td class="num">(.*?)</td>', row)
            for k, row in re.findall(r"<td>(\d+)-way</td>(.*?)</tr>", acc)}


@pytest.mark.slow
def test_pgm_release_report_shows_2way_accuracy_and_utility(tmp_path):
    r = _release(tmp_path, "pgm")
    page = r.report_path.read_text()
    m = Measurement.load(r.path)
    sizes = sorted({len(nm.attrs) for nm in m.measured})
    assert 2 in sizes
    rows = _accuracy_rows(page)
    assert sorted(rows) == sizes
    assert rows[2][0] == str(sum(len(nm.attrs) == 2 for nm in m.measured))
    text = _text(page)
    assert re.search(r"[01]\.\d+ utility score vs [01]\.\d+ for the independent-columns baseline", text)
    assert "This release is differentially private" in text and "dataset demo" in text
    for name in r.manifest["files"]:
        if name not in ("report.html",) and not name.startswith("data-docs/"):
            assert f"<code>{name}</code>" in page, name
    assert not re.search(r"\d\.\d{9,}", _text(page))  # no float artefacts anywhere in the text


@pytest.mark.slow
def test_sds_release_report_shows_every_measured_size_and_its_tuples(tmp_path):
    """Every marginal size sds measured has its accuracy row (2- and 3-way once sds
    states its tuples in ``measured``), and the aggregate tuples are counted."""
    r = _release(tmp_path, "sds")
    page = r.report_path.read_text()
    m = Measurement.load(r.path)
    assert sorted(_accuracy_rows(page)) == sorted({len(nm.attrs) for nm in m.measured}) == [1, 2, 3]
    n_tuples = len(m.tables["aggregates"])
    assert f"{n_tuples:,} rows, each an aggregate count of one combination of values" in _text(page)
    params = page[page.index('id="parameters"'):page.index('id="files"')]
    assert re.search(r"<code>epsilon</code></td><td>automatic: <code>1</code>", params)
    assert "<code>epsilon=</code>" not in page and "<code>delta=</code>" not in page


def _pgm_measurement(select: str, selected: list[list[str]]) -> Measurement:
    one = np.array([100.0, 100.0])
    measured = (NoisyMarginal(attrs=("a",), counts=one, stddev=1.0), NoisyMarginal(attrs=("b",), counts=one, stddev=1.0),
                NoisyMarginal(attrs=("a", "b"), counts=np.array([[100.0, 0.0], [0.0, 100.0]]), stddev=1.0))
    params = {"select": select, "degree": 3, "units": None, "max_model_cells": 1_000_000,
              "max_clique_cells": 1_000_000, "iters": 1000, "refit_iters": 30, "noise_tol": 0.03,
              "precision": "single"}
    return Measurement(method="pgm", params=params, charges=(Charge(stage="measure", rho=0.5),),
                       measured=measured, meta={"selected": selected})


def _param_rows(page: str) -> dict[str, str]:
    params = page[page.index('id="parameters"'):page.index('id="files"')]
    return {re.sub(r"<[^>]+>", "", r[0]): re.sub(r"<[^>]+>", "", r[1])
            for r in re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td></tr>", params)}


def test_mst_release_lists_only_the_parameters_mst_uses():
    """Defect: an MST release's report listed AIM's degree, units, refit_iters, max_model_cells."""
    schema = _pair_schema()
    aim_only = {"degree", "units", "refit_iters", "max_model_cells"}
    for select, shown in (("mst", set()), ("aim", aim_only)):
        m = _pgm_measurement(select, [["a", "b"]])
        page = build_report({**_manifest(), "method": "pgm", "parameters": dict(m.params)}, schema,
                            _diagonal(schema), m, {})
        rows = set(_param_rows(page))
        assert {"select", "iters", "max_clique_cells", "noise_tol", "precision"} <= rows
        assert rows & aim_only == shown, (select, rows)
        if select == "mst":
            section = _text(page[page.index('id="parameters"'):page.index('id="files"')])
            assert "Not used by this variant of the method, so not listed: degree , units , max_model_cells , refit_iters" in section


def test_unused_params_follow_the_declared_variant():
    from dpsynth.methods.base import unused_params
    from dpsynth.methods.pgm import PgmParams
    from dpsynth.methods.sds import SdsMethod

    assert set(unused_params(PgmParams, {"select": "mst"})) == {"degree", "units", "refit_iters", "max_model_cells"}
    assert set(unused_params(PgmParams, {})) == {"degree", "units", "refit_iters", "max_model_cells"}  # default mst
    assert unused_params(PgmParams, {"select": "aim"}) == []
    assert unused_params(SdsMethod.params_type, {}) == []  # a method that declares no variant shows everything


def test_report_lists_the_measured_marginals_and_what_the_score_is_against():
    """Defect: the pairs MST chose were only in measurement.json, and nothing said the utility
    score compares with the DP measurement rather than the real table."""
    schema = _pair_schema()
    m = _pgm_measurement("mst", [["a", "b"]])
    page = build_report({**_manifest(), "method": "pgm", "parameters": dict(m.params)}, schema,
                        _diagonal(schema), m, {})
    section = _text(page[page.index('id="measured"'):page.index('id="release"')])
    assert "holds 2 marginals of one column and 1 of two or more columns" in section
    assert "chosen by MST" in section and "1 a × b 2" in section
    text = _text(page)
    assert "The score is measured against the DP measurement of the marginals listed under Measured marginals , " \
           "not against the real table" in text
    assert "--internal-report" in text


def test_report_says_when_no_relationship_was_measured():
    schema = _pair_schema()
    one = np.array([100.0, 100.0])
    m = Measurement(method="marginals", params={}, charges=(Charge(stage="measure", rho=0.5),),
                    measured=(NoisyMarginal(attrs=("a",), counts=one, stddev=1.0),
                              NoisyMarginal(attrs=("b",), counts=one, stddev=1.0)))
    page = build_report(_manifest(), schema, _diagonal(schema), m, {})
    section = _text(page[page.index('id="measured"'):page.index('id="release"')])
    assert "2 marginals of one column and 0 of two or more" in section
    assert "No relationship between columns was measured" in section


def test_aim_release_records_its_units_for_the_report():
    """Defect: an AIM release's parameter table said units was 'the method's own choice, not
    recorded'; pgm records the budget units it used (16 x columns by default)."""
    from dpsynth.methods import get_method
    from dpsynth.privacy.budget import Budget, Ledger

    schema = _pair_schema()
    method = get_method("pgm", {"select": "aim", "degree": "2"})
    budget = Budget(epsilon=1.0, delta=1e-6)
    m = method.measure(_diagonal(schema), Ledger(budget, method.plan(schema, budget)), np.random.default_rng(0))
    assert m.meta["units"] == 16 * 2
    page = build_report({**_manifest(), "method": "pgm", "parameters": dict(m.params)}, schema,
                        _diagonal(schema), m, {})
    assert _param_rows(page)["units"] == "automatic: 32"
