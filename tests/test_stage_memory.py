"""The stages hand freed memory back (``stages.give_back_memory``): after measure, after the
synthesize stage reads its measurement and after it wrote the table, and around the report's
counting in publish, so that a later stage's peak counts what is live, not what an earlier one
left in the allocators (issue 25, docs/scale.md, sds-peak)."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import dpsynth
from dpsynth.pipeline import stages


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident size from /proc")
def test_freed_arrow_memory_is_handed_back_and_live_data_kept():
    pa = pytest.importorskip("pyarrow")
    table = pa.table({f"c{i}": pa.array(np.arange(2_000_000, dtype=np.int64) + i) for i in range(8)})
    frame = table.to_pandas()  # 128 MB of Arrow's pool, as a loaded measurement's frame is
    del table
    kept = frame["c3"].to_numpy()[:5].copy()
    del frame
    held = _rss_mb()
    stages.give_back_memory()
    assert _rss_mb() < held - 64, (held, _rss_mb())  # the pool kept the freed pages until asked
    assert kept.tolist() == [3, 4, 5, 6, 7]


def test_a_release_gives_memory_back_after_measure_around_synthesize_and_the_report(tmp_path, demo_paths, monkeypatch):
    calls: list[str] = []
    real = stages.give_back_memory

    def spy() -> None:
        calls.append(inspect.stack()[1].function)
        real()

    monkeypatch.setattr(stages, "give_back_memory", spy)
    data, schema = demo_paths
    rel = dpsynth.release(str(data), str(schema), epsilon=1.0, method="marginals", out=str(tmp_path / "out"),
                          workspace=str(tmp_path / "ws"), name="mem", quiet=True)
    assert rel.synthetic.shape[0] > 0
    assert calls == ["measure_stage", "synthesize_stage", "synthesize_stage", "report", "report"]
