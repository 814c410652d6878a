"""The typed measurement contract: construction checks, save/load, row estimate."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpsynth.measurement import (
    DP_ADD_REMOVE,
    Measurement,
    NoisyCount,
    NoisyMarginal,
    PrivacyStatement,
)
from dpsynth.privacy.budget import Charge


def _m(**kw) -> Measurement:
    base = dict(
        method="t",
        params={"a": 1},
        charges=(Charge(stage="s", rho=0.1), Charge(stage="e", epsilon=0.5, mechanism="laplace")),
        measured=(
            NoisyMarginal(attrs=("x",), counts=np.array([10.0, 20.0]), stddev=2.0),
            NoisyMarginal(attrs=("x", "y"), counts=np.arange(6.0).reshape(2, 3), stddev=3.0, mechanism="laplace"),
        ),
    )
    base.update(kw)
    return Measurement(**base)


def test_round_trip_keeps_every_typed_field(tmp_path):
    statement = PrivacyStatement(kind="heuristic", detail="outside the theorem")
    m = _m(records=NoisyCount(value=31.0, stddev=1.5), statement=statement,
           tables={"blocks": pd.DataFrame({"w": [0.5, 0.5]})}, meta={"k": [1, 2]})
    m.save(tmp_path)
    back = Measurement.load(tmp_path)
    assert back.method == "t" and back.params == {"a": 1}
    assert [c.to_dict() for c in back.charges] == [c.to_dict() for c in m.charges]
    assert [(x.attrs, x.stddev, x.mechanism) for x in back.measured] == [
        (("x",), 2.0, "gaussian"), (("x", "y"), 3.0, "laplace")]
    np.testing.assert_array_equal(back.marginals[("x", "y")], np.arange(6.0).reshape(2, 3))
    assert back.records.to_dict() == {"value": 31.0, "stddev": 1.5, "mechanism": "laplace"}
    assert back.statement == statement and not back.statement.differentially_private
    assert back.tables["blocks"]["w"].tolist() == [0.5, 0.5] and back.meta == {"k": [1, 2]}
    assert back.stddev(("x", "y")) == 3.0


def test_load_reads_any_row_order_and_a_thousand_marginals_at_once(tmp_path):
    """The fast path slices the file in ``save``'s order; a file in another row order (written
    by another tool) is read by key and cell and gives the same counts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    marginals = tuple(NoisyMarginal(attrs=(f"a{i}", f"b{i}"), counts=rng.normal(size=(2, 3)), stddev=1.0)
                      for i in range(1000))
    m = _m(measured=marginals)
    m.save(tmp_path)
    back = Measurement.load(tmp_path)
    assert [x.attrs for x in back.measured] == [x.attrs for x in marginals]
    assert all(np.array_equal(x.counts, y.counts) for x, y in zip(back.measured, marginals))
    path = tmp_path / "measurement.parquet"
    frame = pq.read_table(path).to_pandas().sample(frac=1.0, random_state=1)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    shuffled = Measurement.load(tmp_path)
    assert all(np.array_equal(x.counts, y.counts) for x, y in zip(shuffled.measured, marginals))


def test_a_measurement_file_missing_a_marginal_is_refused(tmp_path):
    import pyarrow.parquet as pq

    m = _m()
    m.save(tmp_path)
    path = tmp_path / "measurement.parquet"
    table = pq.read_table(path)
    pq.write_table(table.slice(0, 2), path)  # the 1-way table only
    with pytest.raises(KeyError):
        Measurement.load(tmp_path)


@pytest.mark.parametrize(
    "bad",
    [
        dict(attrs=("x",), counts=[1.0], stddev=-1.0),
        dict(attrs=("x",), counts=[1.0], stddev=float("nan")),
        dict(attrs=("x",), counts=[1.0], stddev=1.0, mechanism="none"),
        dict(attrs=("x",), counts=[1.0], stddev=1.0, mechanism="exponential"),
        dict(attrs=("x", "x"), counts=[1.0], stddev=1.0),
        dict(attrs=(), counts=[1.0], stddev=1.0),
    ],
)
def test_marginal_refuses_a_malformed_noise_statement(bad):
    with pytest.raises(ValueError):
        NoisyMarginal(**bad)


def test_measurement_refuses_a_marginal_twice():
    one = NoisyMarginal(attrs=("x",), counts=np.ones(2), stddev=1.0)
    with pytest.raises(ValueError, match="twice"):
        _m(measured=(one, one))


def test_statements():
    with pytest.raises(ValueError):
        PrivacyStatement(kind="dp")  # a DP claim must name its neighbours
    with pytest.raises(ValueError):
        PrivacyStatement(kind="maybe", neighbours="x")
    assert DP_ADD_REMOVE.differentially_private
    assert "NOT differentially private" in PrivacyStatement(kind="anonymous", detail="k=5").headline()


def test_estimated_records_is_the_inverse_variance_mean():
    a = NoisyMarginal(attrs=("a",), counts=np.array([50.0, 50.0]), stddev=1.0)  # total 100, var 2
    b = NoisyMarginal(attrs=("b",), counts=np.array([40.0, 40.0, 40.0, 40.0]), stddev=1.0)  # 160, var 4
    m = _m(measured=(a, b))
    assert m.estimated_records() == round((100 / 2 + 160 / 4) / (1 / 2 + 1 / 4))
    assert _m(measured=(a, b), records=NoisyCount(value=77.4, stddev=1.0)).estimated_records() == 77
    assert _m(measured=()).estimated_records() is None


def test_total_epsilon_adds_pure_parts():
    m = _m()
    assert m.total_epsilon(1e-6) > 0.5
    assert m.rho == pytest.approx(0.1)
