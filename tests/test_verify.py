from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from dpsynth import pipeline
from dpsynth.cli import main
from dpsynth.publish.verify import verify_release


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """One release for the module (building one takes seconds); each test gets a copy."""
    root = Path(__file__).resolve().parents[1]
    tmp = tmp_path_factory.mktemp("verify")
    return pipeline.run_release(pipeline.ReleaseConfig(
        data=root / "data" / "demo.csv", schema=root / "schemas" / "demo.yaml", method="marginals",
        epsilon=1.0, out=tmp / "out", workspace=tmp / "ws", rows=300))


@pytest.fixture
def release(built, tmp_path) -> Path:
    return Path(shutil.copytree(built, tmp_path / built.name))


def test_intact_release_verifies(release, capsys):
    assert verify_release(release) == []
    assert main(["verify", str(release)]) == 0


def test_modified_file_is_caught(release, capsys):
    with open(release / "synthetic.csv", "a") as f:
        f.write("north,40,male,primary,employed,NA,NA,no,good,0\n")
    assert any("synthetic.csv" in p for p in verify_release(release))
    assert main(["verify", str(release)]) == 1


def test_added_and_removed_files_are_caught(release):
    (release / "extra.txt").write_text("hello")
    (release / "measurement.json").unlink()
    problems = verify_release(release)
    assert any("extra.txt" in p and "not listed" in p for p in problems)
    assert any("measurement.json" in p and "missing" in p for p in problems)


def test_overspent_ledger_is_caught(release):
    mpath = release / "manifest.json"
    m = json.loads(mpath.read_text())
    m["privacy"]["epsilon"] = 0.5  # the ledger spent the rho of epsilon 1
    mpath.write_text(json.dumps(m))
    assert any("over the budget" in p for p in verify_release(release))


def test_understated_epsilon_spent_is_caught(release):
    mpath = release / "manifest.json"
    m = json.loads(mpath.read_text())
    m["privacy"]["epsilon_spent"] = 0.0  # what a report that summed rho alone showed for a pure-epsilon ledger
    mpath.write_text(json.dumps(m))
    assert "manifest: epsilon_spent differs from the charges in measurement.json" in verify_release(release)


def test_invalid_table_with_matching_hash_is_caught(release):
    df = pd.read_parquet(release / "synthetic.parquet")
    df.loc[0, "region"] = "atlantis"
    df.to_parquet(release / "synthetic.parquet", index=False)
    mpath = release / "manifest.json"
    m = json.loads(mpath.read_text())
    from dpsynth.publish.bundle import sha256_file

    m["files"]["synthetic.parquet"] = sha256_file(release / "synthetic.parquet")
    mpath.write_text(json.dumps(m))
    problems = verify_release(release)
    assert problems == ["synthetic.parquet: check failed: region: values inside the schema domain"]


def test_default_release_with_merged_marginals_verifies_and_a_lower_scale_does_not(tmp_path, seed_file):
    """The default (auto: pgm AIM) merges a marginal measured in several rounds: its noise is
    below any one charge's but never below the pool of all charges. verify refused every such
    release before; a scale below the pool is still a forgery."""
    from dpsynth.publish.bundle import sha256_file
    from dpsynth.measurement import Measurement
    from dpsynth.precheck import min_noise_sd, pooled_noise_sd
    from dpsynth.privacy import Charge

    root = Path(__file__).resolve().parents[1]
    folder = pipeline.run_release(pipeline.ReleaseConfig(
        data=root / "data" / "demo.csv", schema=root / "schemas" / "demo.yaml", epsilon=1.0,
        out=tmp_path / "out", workspace=tmp_path / "ws", rows=300, seed_file=seed_file))
    meta = json.loads((folder / "measurement.json").read_text())
    charges = [Charge.from_dict(c) for c in meta["charges"]]
    sds = [e["stddev"] for e in meta["measured"]]
    assert min(sds) < min_noise_sd(charges)  # a merged marginal: below any single charge
    assert verify_release(folder) == []
    floor = pooled_noise_sd(charges)
    meta["measured"][0]["stddev"] = floor * 0.9
    (folder / "measurement.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["measurement.json"] = sha256_file(folder / "measurement.json")
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    assert any("states noise sd" in p for p in verify_release(folder))
