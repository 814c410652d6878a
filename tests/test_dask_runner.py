"""The Dask runner keeps a bounded number of tasks in flight, whatever the partitions
(issue 25: memory flat in rows on Dask), and still returns every result in order."""

from __future__ import annotations

import pytest

pytest.importorskip("distributed")

from distributed import Client, LocalCluster  # noqa: E402

from dpsynth.rows import dask_runner  # noqa: E402
from dpsynth.rows.dask_runner import DaskRunner  # noqa: E402


def _square(part: int, offset: int) -> int:
    return part * part + offset


@pytest.fixture(scope="module")
def runner():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield DaskRunner(client)


def _held(runner: DaskRunner) -> int:
    """Futures this client holds now (the tasks submitted and not yet taken, and the
    scattered shared arguments)."""
    return len(runner.client.futures)


def _bound(runner: DaskRunner) -> int:
    """The window, the shared argument, and as many again: a future's release reaches the
    client's event loop a moment after ``release()`` returns (the old code held every part)."""
    return 2 * runner.window() + 1


def test_fold_holds_at_most_its_window_of_tasks_whatever_the_partitions(runner):
    parts = list(range(40))
    seen: list[int] = []

    def combine(a: int, b: int) -> int:
        seen.append(_held(runner))
        return a + b

    assert runner.window() == dask_runner.IN_FLIGHT_PER_WORKER * 2
    assert runner.fold(_square, parts, combine, 3) == sum(p * p + 3 for p in parts)
    assert max(seen) <= _bound(runner) < len(parts), max(seen)
    import gc

    gc.collect()
    runner.client.sync(lambda: __import__("asyncio").sleep(0.2))
    assert _held(runner) == 0  # every future released at the end


def test_map_returns_every_result_in_order_with_a_bounded_window(runner, monkeypatch):
    submitted: list[int] = []
    submit = runner.client.submit

    def counting(*a, **k):
        submitted.append(_held(runner))
        return submit(*a, **k)

    monkeypatch.setattr(runner.client, "submit", counting)
    parts = list(range(25))
    assert runner.map(_square, parts, 1) == [p * p + 1 for p in parts]
    assert len(submitted) == len(parts)  # one task per part
    assert max(submitted) <= _bound(runner) < len(parts), max(submitted)
    assert runner.map(_square, [], 1) == []


def _rows(part: int) -> int:
    return part


def test_a_map_without_shared_arguments_runs(runner):
    # count_rows maps a function of the part alone: an empty scatter used to be refused
    assert runner.map(_rows, [3, 1, 2]) == [3, 1, 2]


def test_a_failing_task_raises_and_releases_every_future(runner):
    def bad(part: int) -> int:
        if part == 7:
            raise RuntimeError("part 7 failed")
        return part

    with pytest.raises(RuntimeError, match="part 7") as failed:
        runner.fold(bad, list(range(20)), lambda a, b: a + b)
    del failed  # its traceback holds the failed future
    import gc

    gc.collect()
    runner.client.sync(lambda: __import__("asyncio").sleep(0.2))
    assert _held(runner) == 0
