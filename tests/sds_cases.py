"""Shared by the tests of sds's chunked and expanded paths: the demo table measured by sds
(a fixture), and a table of two tied pairs with a sampler that draws every column alone,
the case where only sds's refit can meet the gate on the pairs."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth import pipeline
from dpsynth.measurement import Measurement


@pytest.fixture
def sds_measured(tmp_path, demo_paths, seed_file):
    """The demo table measured by sds at epsilon 4 (a 1,234-record release's plan)."""
    data, schema_path = demo_paths
    config = pipeline.ReleaseConfig(data=data, schema=schema_path, method="sds", epsilon=4.0, rows=1234,
                                    out=tmp_path / "out", workspace=tmp_path / "ws", seed_file=seed_file)
    plan = pipeline.prepare(config)
    codes = pipeline.encode_stage(data, plan.schema, config.workspace, plan.data_sha256)
    return plan, Measurement.load(pipeline.measure_stage(plan, codes, pipeline.charge_dataset(plan).draw))


def tied_pairs_ratios(monkeypatch, sampler_type: type, chunks: int | None = None) -> tuple[object, dict[str, float]]:
    """Measure the tied-pairs table (200,000 x 6, c0|c1 and c4|c5 85% equal) at epsilon 2,
    synthesize it with the patched sampler (chunk size set by the caller), check that the
    sampler is a ``sampler_type`` (with ``chunks`` chunks when given) and return the
    sampler and each measured marginal's gate TVD over its threshold."""
    from dpsynth.gate.checks import _marginal_checks
    from dpsynth.methods import get_method
    from dpsynth.methods.sds import method as sds_method
    from dpsynth.privacy.budget import Budget, Ledger
    from dpsynth.rows.encoding import EncodedTable
    from dpsynth.schema import schema_from_dict

    rng = np.random.default_rng(5)
    n = 200_000
    schema = schema_from_dict({"name": "pairs", "columns": [
        {"name": f"c{j}", "type": "categorical", "values": [f"v{v}" for v in range(4)]} for j in range(6)]})
    codes = rng.integers(0, 4, size=(n, 6))
    codes[:, 1] = np.where(rng.random(n) < 0.85, codes[:, 0], codes[:, 1])
    codes[:, 5] = np.where(rng.random(n) < 0.85, codes[:, 4], codes[:, 5])

    def independent(model, rows, params, g):
        return np.stack([g.choice(model.cards[j], size=rows, p=model.marginal(j) / model.marginal(j).sum())
                         for j in range(model.p)], axis=1).astype(np.int64)

    monkeypatch.setattr(sds_method, "_sample_complete", independent)
    method = get_method("sds", {})
    budget = Budget(epsilon=2.0, delta=1e-6)
    m = method.measure(EncodedTable(schema, codes.astype(np.uint8)), Ledger(budget, method.plan(schema, budget)),
                       np.random.default_rng(0))
    sampler = method.sampler(m, schema, None, np.random.default_rng(1))
    assert isinstance(sampler, sampler_type)
    if chunks is not None:
        assert len(sampler.sizes) == chunks
    out = sampler.sample(int(m.records.value), np.random.default_rng(2))
    gate = _marginal_checks(EncodedTable(schema, out.astype(np.uint8)), m, float(m.records.value), {})
    return sampler, {e["marginal"]: e["tvd"] / e["threshold"] for e in gate.errors}
