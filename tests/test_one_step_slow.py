"""Slow statistical tests of the one-step inference (CI runs them; marked slow)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpsynth.onestep.tulap import release_counts, two_proportions_test

ALPHA = 1e-6


def _null_pvalues(tests: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(tests):
        xn, yn = release_counts(rng.binomial(200, 0.3), 200, rng.binomial(200, 0.3), 200, 1.0, rng)
        r = two_proportions_test(xn, 200, yn, 200, 1.0, rng, replicates=400)
        out.append((r.p_one_step, r.p_bootstrap))
    return np.array(out)


@pytest.mark.slow
def test_one_step_pvalues_are_uniform_under_the_null_and_the_bootstrap_is_conservative():
    p = _null_pvalues(800, 21)
    assert stats.kstest(p[:, 0], "uniform").pvalue > ALPHA
    # the bootstrap's p-values pile up in the middle (the paper's Figure 2(a)): too few small ones
    assert np.mean(p[:, 1] <= 0.05) < np.mean(p[:, 0] <= 0.05)
    assert stats.binomtest(int(np.sum(p[:, 1] <= 0.05)), len(p), 0.05).pvalue < 1e-3


@pytest.mark.slow
def test_pvalues_of_a_wrong_null_are_not_uniform():
    """The uniformity check can fail: p-values computed with the wrong epsilon are rejected."""
    rng = np.random.default_rng(22)
    out = []
    for _ in range(800):
        xn, yn = release_counts(rng.binomial(200, 0.3), 200, rng.binomial(200, 0.3), 200, 1.0, rng)
        out.append(two_proportions_test(xn, 200, yn, 200, 0.1, rng, replicates=400).p_one_step)
    assert stats.kstest(out, "uniform").pvalue < ALPHA


# --- default releases pass the gate and publish ---------------------------------------

def _release(tmp_path, data, schema, name):
    import json

    from dpsynth import pipeline
    from dpsynth.cli import main

    cfg = pipeline.ReleaseConfig(data=data, schema=schema, method="one-step", epsilon=1.0, delta=1e-6, rows=None,
                                 params={}, seed_file=None, out=tmp_path / "out", name=name,
                                 workspace=tmp_path / "ws", internal_report=False, gate={})
    folder = pipeline.run_release(cfg)  # raises when the gate fails: nothing is published
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["privacy"]["differentially_private"] is True
    assert main(["verify", str(folder)]) == 0
    return folder


@pytest.mark.slow
def test_default_demo_release_passes_the_gate(tmp_path):
    root = Path(__file__).resolve().parents[1]
    _release(tmp_path, root / "data" / "demo.csv", root / "schemas" / "demo.yaml", "demo-one-step")


@pytest.mark.slow
@pytest.mark.parametrize("csv, schema", [("adult/adult.csv", "adult.yaml"), ("nist/national2019.csv", "nist.yaml")])
def test_default_release_on_shared_data_passes_the_gate(tmp_path, shared_data_dir, csv, schema):
    """Before: adult and national2019 were refused by default (full table over max_cells), and
    with numeric columns by bins national2019 failed the gate (the IPF estimate)."""
    data = shared_data_dir / csv
    if not data.exists():
        pytest.skip(f"{csv} is absent")
    root = Path(__file__).resolve().parents[1]
    _release(tmp_path, data, root / "schemas" / schema, f"{schema.split('.')[0]}-one-step")
