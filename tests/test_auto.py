"""``--method auto`` (the default): chosen from public information and a DP record count it
charges, recorded in the measurement, the manifest and the report; delta 0 gets a
pure-epsilon method and a pure-epsilon count."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pandas as pd
import pytest
import yaml

import dpsynth
from dpsynth import pipeline
from dpsynth.privacy import registry
from dpsynth.cli import main
from dpsynth.methods import METHODS, ParamError
from dpsynth.methods.auto import (AUTO, COUNT_SHARE, MAX_AIM_COLUMNS, MAX_WIDE_AIM_COLUMNS, MIN_SIGNAL,
                                  WIDE_AIM, cell_signal, choose, choose_for)
from dpsynth.methods.auto_method import COUNT_STAGE, METHOD_STAGE, AutoMethod, inner_budget
from dpsynth.methods.marginals import MarginalsMethod
from dpsynth.methods.pgm import PgmMethod
from dpsynth.pipeline import config as config_module
from dpsynth.privacy import Budget, BudgetExceeded, Charge, Ledger, epsilon_from_rho
from dpsynth.privacy.noise import discrete_laplace_sd
from dpsynth.schema import load_schema
from tests.conftest import ROOT


def _config(tmp_path, data, schema, **kw) -> pipeline.ReleaseConfig:
    return pipeline.ReleaseConfig(data=data, schema=schema, epsilon=kw.pop("epsilon", 1.0), out=tmp_path / "out",
                                  workspace=tmp_path / "ws", **kw)


def test_choose_sees_only_the_schema_epsilon_delta_and_the_dp_count():
    assert list(inspect.signature(choose).parameters) == ["schema", "epsilon", "delta", "records"]


def test_same_schema_gives_the_same_choice_whatever_the_rows(tmp_path, demo_paths):
    data, schema = demo_paths
    df = pd.read_csv(data)
    other = tmp_path / "other.csv"
    df.sample(frac=0.1, random_state=3).iloc[::-1].to_csv(other, index=False)  # other rows, same schema
    plans = [pipeline.prepare(_config(tmp_path, d, schema)) for d in (data, other)]
    assert plans[0].data_sha256 != plans[1].data_sha256
    assert plans[0].choice == plans[1].choice
    assert (plans[0].method_name, plans[0].params) == (plans[1].method_name, plans[1].params) == ("auto", {})
    assert plans[0].charges == plans[1].charges  # the count's charge and the rest: public, row-free
    assert plans[0].choice.method == "pgm" and plans[0].choice.params == {"select": "aim", "degree": "2"}


def test_prepare_resolves_auto_before_opening_the_data(tmp_path, demo_paths, monkeypatch):
    order: list[str] = []
    real_choose, real_check, real_hash = config_module.choose, config_module.check_file, config_module.input_sha256

    def spy(name, fn):
        def wrapped(*a, **k):
            order.append(name)
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(config_module, "choose", spy("choose", real_choose))
    monkeypatch.setattr(config_module, "check_file", spy("open", real_check))
    monkeypatch.setattr(config_module, "input_sha256", spy("open", real_hash))
    plan = pipeline.prepare(_config(tmp_path, *demo_paths))
    assert order[0] == "choose" and "open" in order and order.count("choose") == 1
    assert plan.choice is not None and plan.config.method == AUTO


def test_default_release_records_the_choice_in_manifest_and_report(tmp_path, demo_paths):
    folder = pipeline.run_release(_config(tmp_path, *demo_paths, name="auto-run"))
    m = json.loads((folder / "manifest.json").read_text())
    assert m["method"] == "pgm" and m["method_requested"] == "auto"
    assert m["auto_params"] == {"select": "aim", "degree": "2"}
    assert m["parameters"]["select"] == "aim" and m["parameters"]["degree"] == 2
    assert "AIM" in m["auto_reason"]
    html = (folder / "report.html").read_text()
    assert "chosen by <code>--method auto</code>" in html and "select=aim degree=2" in html
    assert "AIM&#x27;s time bound" in html or "AIM's time bound" in html
    assert "a DP record count (" in html and COUNT_STAGE in html
    named = pipeline.run_release(_config(tmp_path, *demo_paths, name="named", method="marginals"))
    m2 = json.loads((named / "manifest.json").read_text())
    assert m2["method_requested"] == "marginals" and "auto_reason" not in m2 and "auto_record_count" not in m2


def test_the_record_count_is_charged_ledgered_and_in_the_registry(tmp_path, demo_paths):
    folder = pipeline.run_release(_config(tmp_path, *demo_paths, name="counted"))
    m = json.loads((folder / "manifest.json").read_text())
    budget = Budget(epsilon=1.0, delta=1e-6)
    ledger = m["privacy"]["ledger"]
    assert ledger[0]["stage"] == COUNT_STAGE and ledger[0]["spent"] and ledger[0]["mechanism"] == "gaussian"
    assert ledger[0]["rho"] == pytest.approx(COUNT_SHARE * budget.rho, rel=1e-6)
    assert m["privacy"]["rho_spent"] <= budget.rho * (1 + 1e-9)
    assert m["privacy"]["rho_spent"] == pytest.approx(budget.rho, rel=1e-6)  # the count is in it, not on top
    count = m["auto_record_count"]
    assert count["stage"] == COUNT_STAGE and count["mechanism"] == "gaussian"
    assert count["stddev"] >= 1.0 / np.sqrt(2 * ledger[0]["rho"])  # the sigma drawn (never below the stated one)
    assert abs(count["value"] - 5000) < 6 * count["stddev"]  # demo: 5,000 rows (a false alarm below 1e-8)
    meas = json.loads((folder / "measurement.json").read_text())
    assert meas["charges"][0]["stage"] == COUNT_STAGE and meas["meta"]["auto"]["record_count"] == count["value"]
    (draw,) = registry.state(tmp_path / "ws", "demo").releases
    assert draw.name == "counted" and draw.rho == pytest.approx(budget.rho, rel=1e-9)  # count + method, one draw
    assert main(["verify", str(folder)]) == 0


def test_the_count_is_drawn_only_after_the_registry_grant(tmp_path, demo_paths, monkeypatch):
    from dpsynth.methods import auto_method
    from dpsynth.privacy.registry import DrawRefused

    events: list[str] = []
    real_gauss, real_consume = auto_method.gaussian_counts, pipeline.stages.consume_draw
    monkeypatch.setattr(auto_method, "gaussian_counts", lambda *a, **k: events.append("count") or real_gauss(*a, **k))
    monkeypatch.setattr(pipeline.stages, "consume_draw", lambda *a, **k: events.append("grant") or real_consume(*a, **k))
    plan = pipeline.prepare(_config(tmp_path, *demo_paths, name="g"))
    codes = pipeline.encode_release(plan)
    with pytest.raises(DrawRefused):
        pipeline.measure_stage(plan, codes, None)  # no charge: no count drawn, nothing chosen
    assert "count" not in events
    folder = pipeline.run_release(plan.config)
    assert events[-2:] == ["grant", "count"] and folder.is_dir()


def test_the_choice_is_a_function_of_the_noisy_count(demo_paths):
    schema = load_schema(demo_paths[1])
    cards = schema.cardinalities
    per_sd = cell_signal(cards, 0.1, 1e-6, 1000.0) / 1000.0  # the signal is linear in the count
    at_min = MIN_SIGNAL / per_sd  # the count at the bound, epsilon 0.1
    for records in (at_min - 1, at_min + 1, 0.0, -30.0, 1e7):
        assert choose(schema, 0.1, 1e-6, records) == choose(schema, 0.1, 1e-6, records)  # deterministic
    below = choose(schema, 0.1, 1e-6, at_min - 1)
    assert below.method == "marginals" and "DP record count" in below.reason
    assert choose(schema, 0.1, 1e-6, -30.0).method == "marginals"  # a negative noisy count reads as 0
    above = choose(schema, 0.1, 1e-6, at_min + 1)
    assert above.params == {"select": "aim", "degree": "2"} == choose(schema, 0.1, 1e-6).params
    assert choose(schema, 1.0, 0.0, 1e7).method == "marginals"  # delta 0: pure methods only
    # the measure: a median column value's count (records / median codes) in sds of one column's noise
    rho = Budget(epsilon=0.1, delta=1e-6).rho
    want = 1000.0 / float(np.median(cards)) / np.sqrt(len(cards) / (2 * rho))
    assert cell_signal(cards, 0.1, 1e-6, 1000.0) == pytest.approx(want, rel=1e-12)


def test_low_signal_above_the_marginals_bound_takes_aim_not_mst(demo_paths):
    # With AIM's low-budget compression bound, AIM degree 2 beat MST at signals 17.6 and 19.7
    # on the tuning half (auto_choice.json), where MST had a band of its own up to 26.
    cards = load_schema(demo_paths[1]).cardinalities
    per_sd = cell_signal(cards, 0.1, 1e-6, 1000.0) / 1000.0
    for signal in (MIN_SIGNAL + 0.5, 17.6, 19.7, 25.0):
        c = choose_for(cards, 0.1, 1e-6, signal / per_sd)
        assert (c.method, c.params) == ("pgm", {"select": "aim", "degree": "2"}), signal
        assert "MST" not in c.reason


def test_a_small_table_at_small_epsilon_gets_independent_columns(tmp_path, demo_paths):
    data, schema = demo_paths
    small = tmp_path / "small.csv"
    pd.read_csv(data).head(1000).to_csv(small, index=False)  # 1,000 x 10 at 0.1: a cell is 1.8 noise sds
    folder = pipeline.run_release(_config(tmp_path, small, schema, epsilon=0.1, name="small"))
    m = json.loads((folder / "manifest.json").read_text())
    assert m["method"] == "marginals" and m["method_requested"] == "auto" and m["auto_params"] == {}
    assert "DP record count" in m["auto_reason"] and m["privacy"]["ledger"][0]["stage"] == COUNT_STAGE


def test_a_rerun_reuses_the_stored_count_and_choice_free(tmp_path, demo_paths):
    import shutil

    cfg = _config(tmp_path, *demo_paths, name="again")
    first = json.loads((pipeline.run_release(cfg) / "manifest.json").read_text())
    shutil.rmtree(tmp_path / "out" / "again")  # the published folder gone: the stored measurement is not
    second = json.loads((pipeline.run_release(cfg) / "manifest.json").read_text())
    assert second["auto_record_count"] == first["auto_record_count"] and second["method"] == first["method"]
    assert second["privacy"]["ledger"] == first["privacy"]["ledger"]
    assert len(registry.state(tmp_path / "ws", "demo").releases) == 1  # no second charge
    shutil.rmtree(tmp_path / "out" / "again")
    shutil.rmtree(pipeline.prepare(cfg).release_dir() / "measurement")  # measured again: charged again
    third = json.loads((pipeline.run_release(cfg) / "manifest.json").read_text())
    assert len(registry.state(tmp_path / "ws", "demo").releases) == 2 and third["method_requested"] == "auto"


def test_auto_plans_the_count_and_the_rest_within_budget(demo_paths):
    schema = load_schema(demo_paths[1])
    for eps in (0.1, 1.0, 10.0):
        for delta in (0.0, 1e-9, 1e-6):
            budget = Budget(epsilon=eps, delta=delta)
            plan = AutoMethod().plan(schema, budget)
            assert [c.stage for c in plan] == [COUNT_STAGE, METHOD_STAGE]
            Ledger(budget, plan)  # within budget; pure (Laplace count) when delta is 0
            rest = inner_budget(budget)
            if delta == 0:
                assert plan[0].mechanism == "laplace" and plan[0].rho == 0 and plan[1].epsilon == rest.epsilon
                assert sum(c.epsilon for c in plan) == pytest.approx(eps, rel=1e-12)
            else:
                assert plan[1].rho == rest.rho and sum(c.rho for c in plan) == pytest.approx(budget.rho, rel=1e-12)
                assert plan[0].rho == pytest.approx(COUNT_SHARE * budget.rho, rel=1e-6)


def test_rule_widens_to_mst_and_falls_back_for_huge_columns():
    assert choose_for([10] * MAX_AIM_COLUMNS, 1.0, 1e-6).params == {"select": "aim", "degree": "2"}
    wide = choose_for([10] * (MAX_AIM_COLUMNS + 1), 1.0, 1e-6)
    assert (wide.method, wide.params) == ("pgm", WIDE_AIM) and "200,000 cells" in wide.reason
    assert choose_for([10] * MAX_WIDE_AIM_COLUMNS, 1.0, 1e-6).params == WIDE_AIM
    wider = choose_for([10] * (MAX_WIDE_AIM_COLUMNS + 1), 1.0, 1e-6)
    assert (wider.method, wider.params) == ("pgm", {"select": "mst"}) and "MST" in wider.reason
    assert choose_for([30] * 40, 1.0, 1e-6).params == {"select": "mst"}  # 702,000 pair cells: MST
    built = dpsynth.methods.get_method("pgm", WIDE_AIM)
    assert (built.params.units, built.params.max_model_cells, built.params.degree) == (256, 200_000, 2)
    huge = choose_for([5, 2_000_000], 1.0, 1e-6)
    assert huge.method == "marginals" and "2,000,000" in huge.reason
    for bad in (dict(epsilon=0.0, delta=1e-6), dict(epsilon=1.0, delta=1.0), dict(epsilon=1.0, delta=-1e-9)):
        with pytest.raises(ValueError):
            choose_for([3, 4], **bad)


def test_every_choice_builds_and_plans(demo_paths):
    schema = load_schema(demo_paths[1])
    for eps in (0.1, 1.0, 10.0):
        for delta in (0.0, 1e-9, 1e-6):
            c = choose(schema, eps, delta)
            method = dpsynth.methods.get_method(c.method, dict(c.params))
            budget = Budget(epsilon=eps, delta=delta)
            Ledger(budget, method.plan(schema, budget))  # within budget, pure when delta is 0


def test_delta_zero_chooses_a_pure_epsilon_method_and_says_what_it_gives_up(tmp_path, demo_paths):
    c = choose(load_schema(demo_paths[1]), 1.0, 0.0)
    assert METHODS[c.method].pure_epsilon and "pure epsilon" in c.reason and "points" in c.reason
    folder = pipeline.run_release(_config(tmp_path, *demo_paths, delta=0.0, name="pure"))
    m = json.loads((folder / "manifest.json").read_text())
    assert m["method"] == c.method and m["privacy"]["delta"] == 0.0
    ledger = m["privacy"]["ledger"]
    assert all(s["rho"] == 0.0 and s["mechanism"] == "laplace" for s in ledger)
    assert m["privacy"]["epsilon_spent"] == pytest.approx(1.0) and m["privacy"]["epsilon_spent"] <= 1.0 + 1e-9
    d = len(load_schema(demo_paths[1]).columns)
    meas = json.loads((folder / "measurement.json").read_text())
    assert {x["mechanism"] for x in meas["measured"]} == {"laplace"}
    rest = 1.0 - COUNT_SHARE  # the record count took its share first
    assert {round(float(x["stddev"]), 9) for x in meas["measured"]} == {round(discrete_laplace_sd(d / rest), 9)}
    count = m["auto_record_count"]
    assert count["mechanism"] == "laplace" and ledger[0]["stage"] == COUNT_STAGE
    assert ledger[0]["epsilon"] == pytest.approx(COUNT_SHARE) and ledger[0]["detail"]["sensitivity_l1"] == 1.0
    assert count["stddev"] == pytest.approx(discrete_laplace_sd(1.0 / COUNT_SHARE))


def test_pure_marginals_noise_has_the_laplace_scale():
    """Residuals of the pure (delta 0) histograms have the discrete Laplace sd of scale d/eps,
    and a test of that sd rejects the Gaussian scale of a delta 1e-6 budget (z > 5)."""
    from dpsynth.rows.encoding import EncodedTable
    from dpsynth.schema import schema_from_dict

    d = 4
    schema = schema_from_dict({"name": "t", "columns": [{"name": f"c{j}", "type": "categorical",
                                                         "values": [str(v) for v in range(500)]}
                                                        for j in range(d)]})
    codes = np.random.default_rng(0).integers(0, 500, size=(20_000, d)).astype(np.uint16)
    enc = EncodedTable(schema=schema, codes=codes)
    budget = Budget(epsilon=0.5, delta=0.0)
    method = MarginalsMethod()
    m = method.measure(enc, Ledger(budget, method.plan(schema, budget)), np.random.default_rng(1))
    resid = np.concatenate([m.marginals[(f"c{j}",)] - np.bincount(codes[:, j], minlength=500) for j in range(d)])
    want = discrete_laplace_sd(d / 0.5)
    se = want * np.sqrt(2.0 / resid.size) * 2.5  # sd of a sample sd (heavy tails: generous factor)
    assert abs(resid.std() - want) < 5 * se  # alpha well below 1e-6 for 2,000 draws
    gauss = Budget(epsilon=0.5, delta=1e-6)
    wrong = MarginalsMethod().plan(schema, gauss)[0].rho
    wrong_sd = 1.0 / np.sqrt(2.0 * wrong)
    assert abs(resid.std() - wrong_sd) > 5 * se


def test_delta_zero_refuses_a_zcdp_method_before_spending(tmp_path, demo_paths, monkeypatch):
    measured: list[int] = []
    monkeypatch.setattr(PgmMethod, "measure", lambda *a, **k: measured.append(1))
    with pytest.raises(ParamError, match=r"--delta 0 asks for pure epsilon-DP.*'pgm'.*--method auto"):
        pipeline.run_release(_config(tmp_path, *demo_paths, delta=0.0, method="pgm"))
    assert not measured and not (tmp_path / "out").exists()
    b = Budget(epsilon=1.0, delta=0.0)
    assert b.rho == 0.0 and b.pure
    with pytest.raises(BudgetExceeded, match="pure epsilon-DP.*zCDP"):
        Ledger(b, [Charge(stage="a", rho=1e-9)])
    Ledger(b, [Charge(stage="a", epsilon=0.5, mechanism="laplace"), Charge(stage="b", epsilon=0.5)])


def test_pure_release_after_a_zcdp_one_composes_at_the_larger_delta(tmp_path):
    registry.charge(tmp_path, "ds", "k1", "a", (Charge(stage="s", rho=0.05),), 1e-6)
    st = registry.charge(tmp_path, "ds", "k2", "b", (Charge(stage="s", epsilon=0.5, mechanism="laplace"),), 0.0)
    assert np.isfinite(st.spent_epsilon) and st.delta == 1e-6
    assert st.spent_epsilon == pytest.approx(0.5 + epsilon_from_rho(0.05, 1e-6))


def test_auto_refuses_method_parameters_naming_method(tmp_path, demo_paths):
    with pytest.raises(ParamError, match=r"name it with --method"):
        pipeline.prepare(_config(tmp_path, *demo_paths, params={"select": "mst"}))
    plan = pipeline.prepare(_config(tmp_path, *demo_paths, params={"correct_marginals": "true"}))
    assert plan.options == {"correct_marginals": True} and plan.method_name == "auto"


def _cli(tmp_path, demo_paths, *extra):
    data, schema = demo_paths
    return main(["release", "--data", str(data), "--schema", str(schema), "--epsilon", "1", "--out",
                 str(tmp_path / "out"), "--workspace", str(tmp_path / "ws"), "--engine", "local", *extra])


def test_cli_without_method_uses_auto_and_says_why(tmp_path, demo_paths, capsys):
    assert _cli(tmp_path, demo_paths, "--name", "r") == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "method auto" in line]
    assert len(err) == 2 and err[0].startswith("dpsynth: method auto: draws a DP record count (1% of the budget")
    assert "method auto chose pgm select=aim degree=2: " in err[1] and "DP record count" in err[1]
    assert json.loads((tmp_path / "out" / "r" / "manifest.json").read_text())["method_requested"] == "auto"


def test_unknown_method_names_the_option(tmp_path, demo_paths, capsys):
    assert _cli(tmp_path, demo_paths, "--method", "nope") == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("dpsynth")]
    assert len(err) == 1 and "unknown method 'nope' (--method)" in err[0] and "auto (the default)" in err[0]


def test_auto_is_the_default_of_the_api_the_flow_and_the_deployments():
    from dpsynth.orchestration.release import release_flow

    assert inspect.signature(dpsynth.release).parameters["method"].default == AUTO
    assert inspect.signature(release_flow.fn).parameters["method"].default == AUTO
    assert pipeline.ReleaseConfig.__dataclass_fields__["method"].default == AUTO
    spec = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    assert {d["parameters"].get("method", AUTO) for d in spec["deployments"]} == {AUTO}
    assert "--method" not in (ROOT / "Makefile").read_text().split("demo:", 1)[1].split("\n\n", 1)[0]
