"""The validate stage's scan on a pool of this machine's cores (issue 25): the pool's ordered
streaming map, the choice of the path, the one pass's scan whatever the pool, and a whole
release whose gate files are those of the serial scan; a failing pool task publishes nothing."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pyarrow.parquet as pq
import pytest

from dpsynth import pipeline
from dpsynth.gate.checks import measured_subsets
from dpsynth.gate.scan import Scan, file_chunks, merge_scans, scan_files, scan_parts, scan_table
from dpsynth.measurement import Measurement
from dpsynth.pipeline import cluster, gate_stage, stages, synthetic
from dpsynth.rows.pool_runner import PoolRunner, pool

from small_release import pgm_release
from test_gate_scan_runner import _assert_same


# --- PoolRunner.imap ----------------------------------------------------------------------


def _threads(workers: int = 2) -> PoolRunner:
    """A PoolRunner on threads (the same submit/future protocol as processes; lambdas allowed)."""
    return PoolRunner(ThreadPoolExecutor(workers), workers)


def test_imap_hands_results_in_order_when_later_parts_finish_first():
    runner = _threads(3)
    done = []

    def slow_first(p):
        time.sleep(0.05 * (5 - p))  # part 0 finishes last
        done.append(p)
        return p * 10

    assert list(runner.imap(slow_first, range(6), ahead=3)) == [0, 10, 20, 30, 40, 50]
    assert done[:3] != [0, 1, 2]  # they did finish out of order: the order is imap's doing


def test_imap_keeps_at_most_ahead_tasks_submitted_and_not_handed_over():
    runner = _threads(4)
    lock, started, worst = threading.Lock(), [], []
    handed = 0

    def task(p):
        with lock:
            started.append(p)
            worst.append(len(started) - handed)
        return p

    for r in runner.imap(task, range(20), ahead=3):
        time.sleep(0.01)  # the caller is slow: tasks would run ahead if nothing held them
        handed = r + 1
    assert len(started) == 20 and max(worst) <= 3


def test_imap_raises_the_first_error_and_starts_nothing_after_it():
    runner = _threads(1)
    ran = []

    def task(p):
        ran.append(p)
        if p == 2:
            raise RuntimeError("part 2 failed")
        return p

    got = []
    with pytest.raises(RuntimeError, match="part 2 failed"):
        for r in runner.imap(task, range(50), ahead=2):
            got.append(r)
    assert got == [0, 1] and max(ran) <= 3  # at most the one submitted beside it ran


# --- the path -------------------------------------------------------------------------------


def test_the_scan_runs_on_a_pool_only_for_a_large_table_and_more_than_one_core(monkeypatch):
    large = cluster.POOL_MIN_BLOCKS * synthetic.BLOCK_ROWS
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "2")
    with cluster.scan_runner(large) as runner:
        assert isinstance(runner, PoolRunner) and runner.workers == 2
    with cluster.scan_runner(large - 1) as runner:  # small: the gate's worker reads it
        assert runner is None
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "1")
    with cluster.scan_runner(10 * large) as runner:
        assert runner is None
    monkeypatch.delenv("DPSYNTH_SYNTH_WORKERS")
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    with cluster.scan_runner(10 * large) as runner:  # one core
        assert runner is None


def test_a_release_s_stages_share_one_pool_closed_when_it_ends(monkeypatch):
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "2")
    large = cluster.POOL_MIN_BLOCKS * synthetic.BLOCK_ROWS
    with cluster.scan_runner(large) as alone_a, cluster.scan_runner(large) as alone_b:
        assert alone_a is not alone_b  # outside a release: a pool of its own each
    assert cluster.open_pools() == 0
    with cluster.release_cluster(None):
        assert cluster.open_pools() == 0  # started by the first stage that asks
        with cluster.scan_runner(large) as first:
            pass
        with cluster.local_pool(2) as second:
            assert second is first
        assert cluster.open_pools() == 1 and cluster.open_clusters() == 0
    assert cluster.open_pools() == 0
    with pytest.raises(RuntimeError):  # shut down with the release
        first.executor.submit(int, 1)


def test_the_pool_is_warmed_only_inside_a_release_for_a_large_table_on_this_machine(monkeypatch):
    large = cluster.POOL_MIN_BLOCKS * synthetic.BLOCK_ROWS
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "2")
    assert not cluster.warm_pool(None, large)  # a stage called alone: its pool would close at once
    with cluster.release_cluster(None):
        assert not cluster.warm_pool(None, large - 1) and not cluster.warm_pool(None, None)
        assert cluster.open_pools() == 0
        monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "1")
        assert not cluster.warm_pool(None, large) and cluster.open_pools() == 0
        monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "2")
        assert cluster.warm_pool(None, large) and cluster.open_pools() == 1
        with cluster.local_pool(2) as runner:  # what synthesize and validate get: the warm pool
            assert runner.map(abs, [-1, -2]) == [1, 2]
    assert cluster.open_pools() == 0
    with cluster.release_cluster("local:2"):
        assert not cluster.warm_pool("local:2", large) and cluster.open_clusters() == 0


# --- the scan on a process pool ---------------------------------------------------------------


@pytest.fixture
def released(tmp_path, demo_paths, seed_file, monkeypatch):
    """A pgm release measured and synthesized on the demo table: 1234 rows in 13 row groups."""
    plan, _, measurement, folder = pgm_release(tmp_path, demo_paths, seed_file, monkeypatch, synth_chunk_rows=97)
    assert pq.ParquetFile(str(folder / "synthetic.parquet")).metadata.num_row_groups == 13
    return plan, measurement, folder


def test_the_scan_on_a_process_pool_is_the_one_pass_and_an_unordered_merge_is_not(released):
    plan, measurement, folder = released
    subsets = measured_subsets(plan.schema, Measurement.load(measurement))
    pairs = stages.synthetic_pairs(folder)
    want = scan_table(file_chunks(*pairs[0], plan.schema), plan.schema, subsets)
    with pool(2) as runner:
        for part_rows in (97, 617):  # 13 partitions (more than the 4 held ahead), 2 partitions
            _assert_same(scan_files(pairs, plan.schema, subsets, chunk_rows=part_rows, runner=runner), want)
    # What the comparison catches: the partitions merged out of order, or one lost.
    from dpsynth.gate.scan import _scan_part

    keys = tuple(dict.fromkeys(tuple(sorted(s)) for s in subsets))
    scans = [_scan_part(p, plan.schema, keys) for p in scan_parts(pairs, plan.schema, 97)]
    merged = _merge(scans[::-1])
    with pytest.raises(AssertionError):
        _assert_same(merged, want)
    with pytest.raises(AssertionError):
        _assert_same(_merge(scans[:6] + scans[7:]), want)


def test_the_driver_s_scan_reads_the_measurement_s_metadata_alone(released, monkeypatch):
    """scan_synthetic (the driver's side of a pooled or Dask validate) takes which marginals to
    count from measurement.json, not the whole measurement: loading sds's counts and reported
    tuples there too put 500 MB more in the driver at 10M while the gate's worker held them."""
    plan, measurement, folder = released
    full = measured_subsets(plan.schema, Measurement.load(measurement))
    pairs = stages.synthetic_pairs(folder)
    want = scan_table(file_chunks(*pairs[0], plan.schema), plan.schema, full)

    def refused(*a, **k):
        raise AssertionError("the whole measurement was loaded")

    monkeypatch.setattr(Measurement, "load", refused)
    from dpsynth.measurement import measured_attrs

    assert measured_subsets(plan.schema, measured_attrs(measurement)) == full
    _assert_same(gate_stage.scan_synthetic(plan.schema, folder, measurement, 97), want)


def test_the_release_pool_closes_after_its_last_use_unless_another_release_shares_it(monkeypatch):
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "2")
    assert not cluster.close_local_pool()  # outside a release: nothing shared to close
    with cluster.release_cluster(None):
        assert not cluster.close_local_pool()  # not started
        with cluster.local_pool(2) as runner:
            assert runner.map(abs, [-3]) == [3]
        with cluster.release_cluster(None):  # a second release of this process shares it
            assert not cluster.close_local_pool() and cluster.open_pools() == 1
        assert cluster.close_local_pool() and cluster.open_pools() == 0
        with cluster.local_pool(2) as runner:  # a later stage starts another
            assert runner.map(abs, [-4]) == [4] and cluster.open_pools() == 1
    assert cluster.open_pools() == 0


def _merge(scans: list[Scan]) -> Scan:
    out = scans[0]
    for s in scans[1:]:
        out = merge_scans(out, s)
    return out


# --- whole releases --------------------------------------------------------------------------


def _config(tmp_path, demo_paths, seed_file, name="r"):
    data, schema_path = demo_paths
    return pipeline.ReleaseConfig(data=data, schema=schema_path, method="pgm", epsilon=1.0, rows=1234,
                                  out=tmp_path / "out", workspace=tmp_path / "ws", seed_file=seed_file, name=name)


def _spy_scan_runner(monkeypatch) -> list:
    seen = []
    real = gate_stage.scan_runner

    def spy(rows):
        cm = real(rows)

        class Spied:
            def __enter__(self):
                runner = cm.__enter__()
                seen.append(type(runner).__name__)
                return runner

            def __exit__(self, *exc):
                return cm.__exit__(*exc)

        return Spied()

    monkeypatch.setattr(gate_stage, "scan_runner", spy)
    return seen


def _private_gate_files(tmp_path, name="r") -> dict[str, bytes]:
    kept = {}
    for f in ("validation.json", gate_stage.COUNTS_FILE):
        (found,) = (tmp_path / "ws").rglob(f)
        kept[f] = found.read_bytes()
    return kept


@pytest.mark.slow
def test_a_release_validated_on_the_pool_writes_the_serial_gate_files(tmp_path, demo_paths, seed_file, monkeypatch):
    monkeypatch.setattr(synthetic, "BLOCK_ROWS", 100)  # 13 blocks: a "large" table (8 or more)
    seen = _spy_scan_runner(monkeypatch)
    closed = []
    real_close = gate_stage.close_local_pool
    monkeypatch.setattr(gate_stage, "close_local_pool", lambda: closed.append(real_close()) or closed[-1])
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "1")
    serial = pipeline.run_release(_config(tmp_path / "a", demo_paths, seed_file))
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "2")
    pooled = pipeline.run_release(_config(tmp_path / "b", demo_paths, seed_file))
    assert seen == ["NoneType", "PoolRunner"]
    assert cluster.open_pools() == 0
    assert _private_gate_files(tmp_path / "a") == _private_gate_files(tmp_path / "b")
    assert (serial / "validation.json").read_bytes() == (pooled / "validation.json").read_bytes()
    assert (serial / "report.html").read_bytes() == (pooled / "report.html").read_bytes()
    a, b = (json.loads((f / "manifest.json").read_text()) for f in (serial, pooled))
    assert a["validation"]["success"] and a.pop("timings").keys() == b.pop("timings").keys()
    assert a == b  # every file's hash, the validation summary: all but the stages' seconds
    assert closed == [False, True]  # the pooled release's pool closed after its scan, before publish


def _broken_part(part, schema, keys):
    """A pool task that fails (module level: a pool worker unpickles it by reference)."""
    if part.row_groups[0] > 0:
        raise RuntimeError("a scan partition failed")
    from dpsynth.gate.scan import _scan_part

    return _scan_part(part, schema, keys)


@pytest.mark.slow
def test_a_failing_pool_task_fails_the_release_and_publishes_nothing(tmp_path, demo_paths, seed_file, monkeypatch):
    from dpsynth.gate import scan, worker

    # The gate's worker outlives the test: forked with the patch below, it would keep it
    # (and later tests' scans would recurse into _broken_part); it is started first.
    worker.start()
    monkeypatch.setattr(synthetic, "BLOCK_ROWS", 100)
    monkeypatch.setenv("DPSYNTH_SYNTH_WORKERS", "2")
    monkeypatch.setattr(scan, "_scan_part", _broken_part)  # pickled by name: this module's function
    seen = _spy_scan_runner(monkeypatch)
    with pytest.raises(pipeline.BudgetSpent, match="validate failed.*a scan partition failed"):
        pipeline.run_release(_config(tmp_path, demo_paths, seed_file, "broken"))
    assert seen == ["PoolRunner"]
    assert not (tmp_path / "out" / "broken").exists()
    assert not list((tmp_path / "ws").rglob("validation.json"))
    assert cluster.open_pools() == 0


# --- the scan's one encoding of a categorical chunk --------------------------------------------


@pytest.mark.parametrize("limit", [1, 2, 3, 100])
def test_the_text_pass_finds_the_general_path_s_witness_and_counts(limit):
    import numpy as np

    from dpsynth.gate.scan import _outside_count, _reduce, _text_pass
    from dpsynth.gate.validation import ColumnDomain

    rng = np.random.default_rng(3)
    words = ["b", None, "a", "zz", "e\u0301", "\u00e9", "", " a", "q"]  # outside, decomposed, blank, padded
    for n in (0, 1, 7, 500):
        for nulls_first in (False, True):
            picked = [words[i] for i in rng.integers(0, len(words), n)]
            if nulls_first and n:
                picked[0] = None
            s = pd.Series(picked, dtype="string[pyarrow]")
            domain = ColumnDomain(values=("a", "b", "\u00e9"), nullable=True)
            got = _text_pass(s, frozenset(domain.values), limit)
            assert got is not None
            witness, nulls, outside = got
            pd.testing.assert_series_equal(witness, _reduce("values", s, limit))
            assert nulls == int(s.isna().sum()) and outside == _outside_count(s, domain)
    assert _text_pass(pd.Series(["a", None], dtype=object), frozenset({"a"}), 5) is None  # the general path
