"""The synthetic marginal counts the gate checked are kept beside validation.json, and
publish's report reads them instead of counting the codes again: the same report, byte for
byte; counts kept for other codes files or other marginals are never used."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from dpsynth.gate.checks import measured_subsets
from dpsynth.gate.scan import CodeCounts
from dpsynth.measurement import Measurement
from dpsynth.pipeline import gate_stage, stages

from small_release import pgm_release


@pytest.fixture
def released(tmp_path, demo_paths, seed_file, monkeypatch):
    plan, _, measurement, folder = pgm_release(tmp_path, demo_paths, seed_file, monkeypatch, synth_chunk_rows=97)
    return plan, measurement, folder


def _counted(plan, measurement, folder) -> CodeCounts:
    return CodeCounts.of_file(folder / "synthetic-codes.parquet", plan.schema, Measurement.load(measurement), 1 << 20)


def test_the_report_from_the_kept_counts_is_the_report_from_the_codes(released, tmp_path, monkeypatch):
    plan, measurement, folder = released
    copy = tmp_path / "synthetic-copy"
    shutil.copytree(folder, copy)
    summary = stages.validate_stage(plan, folder, measurement)
    kept = plan.release_dir() / gate_stage.COUNTS_FILE
    assert summary["success"] and kept.is_file()
    # measure removes the release folder's synthetic* entries as folders: the file is not one of them
    assert kept not in plan.release_dir().glob("synthetic*")
    want = _counted(plan, measurement, folder)
    got = gate_stage.synthetic_counts(plan.schema, folder, Measurement.load(measurement), 1 << 20, plan.release_dir())
    assert got.n == want.n and list(got.counts) == list(want.counts)
    assert all(np.array_equal(got.counts[k], want.counts[k]) and got.counts[k].dtype == np.int64 for k in want.counts)

    def no_counting(*a, **k):
        raise AssertionError("publish counted the codes again")

    with monkeypatch.context() as m:
        m.setattr(CodeCounts, "of_file", no_counting)
        first = stages.publish_stage(plan, measurement, folder, summary, {})
    kept.unlink()  # the second release counts the codes of its copy of the same table
    other = dataclasses.replace(plan, config=dataclasses.replace(plan.config, out=tmp_path / "out2"))
    second = stages.publish_stage(other, measurement, copy, summary, {})
    assert (first / "report.html").read_bytes() == (second / "report.html").read_bytes()


def test_counts_kept_for_other_codes_or_other_marginals_are_not_used(released, monkeypatch):
    plan, measurement, folder = released
    m = Measurement.load(measurement)
    found = _counted(plan, measurement, folder)
    kept = plan.release_dir() / gate_stage.COUNTS_FILE
    kept.parent.mkdir(parents=True, exist_ok=True)
    digests = gate_stage._codes_digests(folder)
    subsets = measured_subsets(plan.schema, m)
    calls = []
    monkeypatch.setattr(CodeCounts, "of_file", lambda *a, **k: calls.append(1) or found)

    kept.write_bytes(gate_stage._counts_bytes(found, digests))
    assert gate_stage._kept_counts(kept, plan.schema, subsets, digests) is not None
    gate_stage.synthetic_counts(plan.schema, folder, m, 1 << 20, plan.release_dir())
    assert calls == []
    kept.write_bytes(gate_stage._counts_bytes(found, ["0" * 64]))  # counted from other codes
    gate_stage.synthetic_counts(plan.schema, folder, m, 1 << 20, plan.release_dir())
    assert calls == [1]
    fewer = dataclasses.replace(found, counts={k: v for k, v in found.counts.items() if len(k) == 1})
    kept.write_bytes(gate_stage._counts_bytes(fewer, digests))  # not every measured marginal
    assert gate_stage._kept_counts(kept, plan.schema, subsets, digests) is None
    kept.write_bytes(b"not an npz file")
    assert gate_stage._kept_counts(kept, plan.schema, subsets, digests) is None
