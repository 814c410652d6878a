"""Every refusal says what to change (issue 15, item 3).

Each test triggers one public refusal and checks that its message names the change that
fixes it (a parameter with a value, epsilon or delta, a schema fix, another method), on
one line (the CLI prints only the first line of an error). Where the message proposes a
value, the test applies it and checks that this refusal is gone.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from dpsynth.inference import Domain, ModelTooLarge, build_junction_tree
from dpsynth.methods import ParamError, get_method
from dpsynth.methods.pgm import PgmMethod, PgmParams
from dpsynth.privacy.budget import Budget, BudgetExceeded, Charge, Ledger
from dpsynth.schema import SchemaError, schema_from_dict

BUDGET = Budget(epsilon=1.0, delta=1e-6)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text, "the CLI prints only the first line: the fix must be on it"
    return text


def _wide_schema(columns: int, card: int, binary: int = 0):
    cols = [{"name": f"c{i}", "type": "categorical", "values": [str(v) for v in range(card)]} for i in range(columns)]
    cols += [{"name": f"b{i}", "type": "categorical", "values": ["no", "yes"]} for i in range(binary)]
    return schema_from_dict({"name": "wide", "columns": cols})


def test_private_sampling_walsh_refusal_names_the_m_that_passes_and_the_alternatives():
    """The issue's example: m below the Walsh basis gave no action."""
    schema = _wide_schema(columns=10, card=8, binary=5)  # 80 + 10 one-hot features
    params = {"k": "10", "heuristic": "true", "m": "1000", "d": "2"}
    with pytest.raises(ParamError) as exc:
        get_method("private-sampling", params).plan(schema, BUDGET)
    msg = _one_line(exc)
    L = 1 + 90 + 90 * 89 // 2
    assert f"below the {L} Walsh functions" in msg
    assert f"pass --param m={L} or more" in msg
    assert "lower d to 1 (needs m >= 91)" in msg
    assert "compact=true (85 features, needs m >= 3656)" in msg  # 5 yes/no columns lose one bit each
    assert "--method pgm or sds" in msg
    # every proposed change passes the Walsh check
    for fix in ({"m": str(L)}, {"d": "1"}, {"compact": "true", "m": "3656"}):
        get_method("private-sampling", {**params, **fix}).plan(schema, BUDGET)


def test_pgm_column_above_max_clique_cells_names_the_value_that_passes():
    schema = _wide_schema(columns=2, card=30)
    with pytest.raises(ParamError) as exc:
        PgmMethod(PgmParams(max_clique_cells=20)).plan(schema, BUDGET)
    msg = _one_line(exc)
    assert "pass --param max_clique_cells=30 or more" in msg and "fewer bins or categories" in msg
    PgmMethod(PgmParams(max_clique_cells=30)).plan(schema, BUDGET)


def test_one_step_families_refusals_say_which_columns_to_use():
    schema = schema_from_dict({"name": "s", "columns": [
        {"name": "colour", "type": "categorical", "values": ["r", "g"]},
        {"name": "age", "type": "numeric", "bounds": [0, 100], "bins": 5},
    ]})
    with pytest.raises(ParamError) as exc:
        get_method("one-step", {"families": "agee:normal"}).plan(schema, BUDGET)
    assert "use the schema's numeric columns: ['age']" in _one_line(exc)
    with pytest.raises(ParamError) as exc:
        get_method("one-step", {"families": "colour:normal"}).plan(schema, BUDGET)
    assert "remove it from families" in _one_line(exc)


def test_budget_refusals_say_which_option_to_change():
    with pytest.raises(ValueError) as exc:
        Budget(epsilon=0.0, delta=1e-6)
    assert "pass e.g. --epsilon 1" in _one_line(exc)
    with pytest.raises(ValueError) as exc:
        Budget(epsilon=1.0, delta=2.0)
    assert "pass e.g. --delta 1e-6" in _one_line(exc)
    with pytest.raises(BudgetExceeded) as exc:
        Ledger(BUDGET, (Charge(stage="s", epsilon=2.0, mechanism="laplace"),))
    assert "raise --epsilon" in _one_line(exc)
    with pytest.raises(BudgetExceeded) as exc:
        Ledger(BUDGET, (Charge(stage="s", rho=10.0),))
    assert "raise --epsilon" in _one_line(exc)


def test_registry_refusal_says_how_to_proceed(tmp_path):
    from dpsynth.privacy import registry

    registry.set_cap(tmp_path, "census", registry.Cap(epsilon=0.5, delta=1e-6))
    with pytest.raises(registry.RegistryRefused) as exc:
        registry.charge(tmp_path, "census", "k1", "night-1", (Charge(stage="s", epsilon=1.0, mechanism="laplace"),), 1e-6)
    msg = _one_line(exc)
    assert "over the cap" in msg and "Lower --epsilon" in msg
    assert "dpsynth budget set census --epsilon E --delta D" in msg


def test_model_too_large_says_what_to_coarsen():
    domain = Domain(names=("a", "b"), sizes=(100, 100))
    with pytest.raises(ModelTooLarge) as exc:
        build_junction_tree(domain, [("a", "b")], max_cells=1000)
    assert "fewer bins or categories in the schema" in _one_line(exc)


def test_net_too_large_says_which_parameters_to_set():
    schema = _wide_schema(columns=3, card=3)
    with pytest.raises(ParamError) as exc:
        get_method("microaggregation-dp", {"t": "6", "alpha": "0.02"}).plan(schema, BUDGET)
    msg = _one_line(exc)
    alpha = re.search(r"smallest feasible alpha for t=6 is ([0-9.e-]+)", msg).group(1)
    assert "raise max_net_points" in msg and "leave t and alpha unset" in msg
    get_method("microaggregation-dp", {"t": "6", "alpha": alpha}).plan(schema, BUDGET)


def test_microaggregation_with_too_few_rows_says_lower_group_size():
    from dpsynth.rows.encoding import EncodedTable

    schema = _wide_schema(columns=2, card=3)
    method = get_method("microaggregation", {"anonymous_only": "true", "group_size": "50"})
    table = EncodedTable(schema=schema, codes=np.zeros((10, 2), dtype=np.uint8))
    with pytest.raises(ValueError) as exc:
        method.measure(table, Ledger(BUDGET, method.plan(schema, BUDGET)), np.random.default_rng(0))
    assert "pass a smaller --param group_size" in _one_line(exc)


def test_schema_refusals_list_what_is_allowed():
    with pytest.raises(SchemaError) as exc:
        schema_from_dict({"name": "s", "columns": [{"name": "c", "type": "categorical", "values": ["a"],
                                                    "colour": 1}]})
    assert "a column takes [" in _one_line(exc) and "'values'" in str(exc.value)
    with pytest.raises(SchemaError) as exc:
        schema_from_dict({"name": "s", "colums": [], "columns": [{"name": "c", "type": "categorical",
                                                                   "values": ["a"]}]})
    assert "a schema takes name, columns, description, draft and dp_draft" in _one_line(exc)


def test_unknown_parameter_points_to_dpsynth_methods():
    with pytest.raises(ParamError) as exc:
        get_method("pgm", {"selct": "aim"})
    assert "`dpsynth methods`" in _one_line(exc) and "'select'" in str(exc.value)


def test_input_column_refusals_say_what_to_fix(tmp_path):
    from dpsynth.rows.encoding import DataError, check_file

    schema = _wide_schema(columns=2, card=3)
    (tmp_path / "a.csv").write_text("c0\n1\n")
    with pytest.raises(DataError) as exc:
        check_file(tmp_path / "a.csv", schema)
    assert "['c1']" in _one_line(exc) and "add them to the input, or remove them from the schema" in str(exc.value)
    (tmp_path / "b.csv").write_text("c0,c0,c1\n1,1,1\n")
    with pytest.raises(DataError) as exc:
        check_file(tmp_path / "b.csv", schema)
    assert "rename or drop the copies" in _one_line(exc)


def test_an_existing_release_folder_says_choose_another_name(tmp_path):
    from dpsynth.publish.bundle import PublishError, publish_release

    (tmp_path / "r1").mkdir()
    with pytest.raises(PublishError) as exc:
        publish_release(tmp_path, "r1", {}, {})
    assert "pass another --name" in _one_line(exc)


def test_sds_reporting_length_above_the_width_names_the_largest_that_passes():
    schema = _wide_schema(columns=3, card=2)
    method = get_method("sds", {"reporting_length": 4})
    with pytest.raises(ValueError) as exc:
        method.plan(schema, BUDGET)
    text = _one_line(exc)
    assert "--param reporting_length=3 or less" in text
    get_method("sds", {"reporting_length": 3}).plan(schema, BUDGET)  # the proposed value passes


def test_sds_records_share_that_leaves_nothing_says_lower_it():
    schema = _wide_schema(columns=3, card=2)
    method = get_method("sds", {"number_of_records_epsilon_proportion": 0.999})
    with pytest.raises(ValueError) as exc:
        method.plan(schema, Budget(epsilon=0.01, delta=1e-6))
    assert "lower it" in _one_line(exc)

