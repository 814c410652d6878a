"""The DP microaggregation method: ledger, noise scales, an empirical privacy audit of
the noisy block means, and releases through the whole pipeline (slow)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpsynth import pipeline
from dpsynth.rows.encoding import EncodedTable, encode, read_table
from dpsynth.methods import get_method
from dpsynth.methods.microaggregation_common import BLOCKS
from dpsynth.microaggregation import Embedding, damped_means, mean_sensitivity_l1, noisy_means
from dpsynth.privacy.budget import Budget, Ledger
from dpsynth.schema import load_schema, schema_from_dict

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo():
    schema = load_schema(ROOT / "schemas" / "demo.yaml")
    return encode(read_table(ROOT / "data" / "demo.csv", schema), schema)


def _run(demo, epsilon=1.0, **params):
    method = get_method("microaggregation-dp", params)
    budget = Budget(epsilon=epsilon, delta=1e-6)
    ledger = Ledger(budget, method.plan(demo.schema, budget))
    m = method.measure(demo, ledger, np.random.default_rng(3))
    return method, ledger, m


def test_dp_method_spends_exactly_its_pure_epsilon_plan(demo):
    _, ledger, m = _run(demo, epsilon=2.0, split="1,1,2")
    eps = [c.epsilon for c in m.charges]
    assert math.isclose(sum(eps), 2.0) and all(c.rho == 0 for c in m.charges)
    assert math.isclose(eps[0], 0.04) and math.isclose(eps[3], 2 * eps[1])
    assert {c.stage for c in ledger.spent} == {c.stage for c in ledger.planned}
    assert m.statement.differentially_private


def test_dp_method_publishes_every_cell_with_its_noise_scale(demo):
    _, _, m = _run(demo, t=2, alpha=0.5, b=100.0)
    table = m.tables[BLOCKS]
    assert len(table) == m.meta["cells"] == 13  # every net cell, occupied or not
    C = len(demo.schema.columns)
    eps_y = m.charges[3].epsilon
    # Laplace scale of a published share: 2 sqrt(C) / b in the sqrt(C)-scaled space (plus the grid)
    assert m.meta["means_scale"] == pytest.approx(2 * C / (100.0 * eps_y), rel=1e-2)
    assert m.meta["weights_scale"] == pytest.approx(1 / m.charges[2].epsilon)
    assert np.all(table["weight"] == np.round(table["weight"]))  # counts carry integer noise
    assert all(nm.stddev > 0 and nm.mechanism == "laplace" for nm in m.measured)
    assert m.records is not None and abs(m.records.value - demo.n) < 50 * m.records.stddev


def test_dp_synthesis_is_post_processing_of_the_table(demo):
    method, _, m = _run(demo)
    a = method.synthesize(m, demo.schema, 3000, np.random.default_rng(9))
    b = method.synthesize(m, demo.schema, 3000, np.random.default_rng(9))
    assert np.array_equal(a.codes, b.codes) and a.n == 3000
    assert np.all(a.codes < np.asarray(demo.schema.cardinalities))


# --- empirical privacy audit of the noisy block means -------------------------


def _audit_epsilon(scale_factor: float, trials: int = 200_000, b: float = 20.0, epsilon: float = 1.0) -> float:
    """Lower confidence bound (alpha 1e-6) on the epsilon of the noisy damped means.

    Worst-case neighbours for one binary column: a cell of b records at one vertex, and
    the same cell with one record at the other vertex added (|I| = b + 1): the l1 change
    is 2 / (b + 1), close to the bound 2 R / b. Test: the Laplace likelihood-ratio
    statistic at its maximum, an event whose probability ratio is exp(change / scale).
    """
    schema = schema_from_dict({"name": "audit", "columns": [{"name": "x", "type": "categorical",
                                                            "values": ["a", "b"]}]})
    emb = Embedding(schema=schema)
    d0 = EncodedTable(schema=schema, codes=np.zeros((int(b), 1), dtype=np.uint8))
    d1 = EncodedTable(schema=schema, codes=np.r_[np.zeros(int(b)), [1]].astype(np.uint8)[:, None])
    zeros = [np.zeros(d.n, dtype=np.int64) for d in (d0, d1)]
    means = [damped_means(emb.group_sums(d, z, 1), z, b)[1][0] for d, z in zip((d0, d1), zeros)]
    sens = mean_sensitivity_l1(emb.l1_radius, b) * scale_factor  # < 1: an under-noised variant
    rng = np.random.default_rng(2024)
    outs = [noisy_means(np.repeat(mu[None, :], trials, axis=0), sens, epsilon, rng) for mu in means]
    a0, a1 = (np.round(mu / outs[0].granularity) * outs[0].granularity for mu in means)
    lmax = np.abs(a0 - a1).sum()

    def hits(y):
        llr = (np.abs(y - a0) - np.abs(y - a1)).sum(axis=1)
        return int(np.count_nonzero(llr >= lmax * (1 - 1e-9)))

    k1, k0 = hits(outs[1].values), hits(outs[0].values)
    lo1 = stats.beta.ppf(1e-6 / 2, k1, trials - k1 + 1)
    hi0 = stats.beta.ppf(1 - 1e-6 / 2, k0 + 1, trials - k0)
    return math.log(lo1 / hi0)


@pytest.mark.slow
def test_audit_lower_bound_stays_below_the_claimed_epsilon():
    eps_lb = _audit_epsilon(1.0)
    assert eps_lb <= 1.0
    assert eps_lb > 0.6  # the audit is sharp enough to see most of the budget


@pytest.mark.slow
@pytest.mark.parametrize("factor", [0.5, 0.7])
def test_audit_catches_an_under_noised_variant(factor):
    assert _audit_epsilon(factor) > 1.0


# --- whole releases -----------------------------------------------------------


def _release(tmp_path, data, schema, method, params, name):
    cfg = pipeline.ReleaseConfig(data=data, schema=schema, method=method, epsilon=1.0, delta=1e-6, rows=None,
                                 params=params, seed_file=None, out=tmp_path / "out", name=name,
                                 workspace=tmp_path / "ws", internal_report=False, gate={})
    return pipeline.run_release(cfg)


def _check_labels(folder: Path, dp: bool):
    from dpsynth.cli import main

    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["privacy"]["differentially_private"] is dp
    report = (folder / "report.html").read_text()
    measurement = json.loads((folder / "measurement.json").read_text())
    assert measurement["statement"]["differentially_private"] is dp
    if not dp:
        assert "NOT differentially private" in manifest["privacy"]["headline"]
        assert "NOT differentially private" in report.split("</header>")[0]
    assert main(["verify", str(folder)]) == 0


RELEASES = [("microaggregation", {"anonymous_only": "true"}, False), ("microaggregation-dp", {}, True)]


@pytest.mark.slow
@pytest.mark.parametrize("method, params, dp", RELEASES)
def test_demo_release_passes_the_gate_and_states_its_guarantee(tmp_path, demo_paths, capsys, method, params, dp):
    from dpsynth.cli import main

    data, schema = demo_paths
    extra = [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
    assert main(["release", "--data", str(data), "--schema", str(schema), "--method", method, "--epsilon", "1",
                 "--out", str(tmp_path / "out"), "--workspace", str(tmp_path / "ws"), "--engine", "local",
                 "--name", "r", *extra]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("privacy:") and ("NOT differentially private" in last) is (not dp)
    _check_labels(tmp_path / "out" / "r", dp)
    assert ("NOT differentially private" in capsys.readouterr().out) is (not dp)  # verify's line


@pytest.mark.slow
@pytest.mark.parametrize("method, params, dp", RELEASES)
def test_national2019_release_passes_the_gate(tmp_path, shared_data_dir, method, params, dp):
    data = shared_data_dir / "nist" / "national2019.csv"
    if not data.exists():
        pytest.skip("national2019 is absent")
    folder = _release(tmp_path, data, ROOT / "schemas" / "nist.yaml", method, params, f"nist-{method}")
    _check_labels(Path(folder), dp)
