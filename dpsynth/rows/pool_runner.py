"""A :class:`dpsynth.rows.rowsource.Runner` on a pool of worker processes of this machine.

The synthesize stage draws and formats a large synthetic table on every core: each task
(a run of blocks) goes to one of ``workers`` processes started with ``spawn`` (a fresh
interpreter: safe beside the threads of the Prefect engine and the progress reporter).
Functions and their arguments are pickled by reference, as for Dask. A failing task
cancels the tasks not yet started and its error is raised once the others have stopped.

The validate stage scans the synthetic files on the same kind of pool
(:meth:`PoolRunner.imap`: results in order, a bounded number of them computed ahead), on
the release's one pool when the synthesize stage started it
(:func:`dpsynth.pipeline.cluster.local_pool`).
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Iterator, Sequence, TypeVar

__all__ = ["PoolRunner", "default_workers", "pool"]

T = TypeVar("T")


def default_workers() -> int:
    """``$DPSYNTH_SYNTH_WORKERS`` if set (``0`` or ``1``: no pool), else the cores this
    process may run on."""
    raw = os.environ.get("DPSYNTH_SYNTH_WORKERS", "").strip()
    if raw:
        try:
            return max(0, int(raw))
        except ValueError:
            raise ValueError(f"DPSYNTH_SYNTH_WORKERS must be a whole number, got {raw!r}") from None
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True, eq=False)
class PoolRunner:
    """Maps functions over parts on a ``ProcessPoolExecutor`` of ``workers`` processes."""

    executor: ProcessPoolExecutor
    workers: int
    local: ClassVar[bool] = False  # the parts run in other processes

    def map(self, fn: Callable[..., T], parts: Sequence[Any], *args: Any) -> list[T]:
        """Each part's result, in order; the first error is raised after the pool stopped
        the other tasks (those not started are cancelled)."""
        futures = [self.executor.submit(fn, p, *args) for p in parts]
        try:
            for f in as_completed(futures):
                f.result()
        except BaseException:
            _stop(futures)
            raise
        return [f.result() for f in futures]

    def imap(self, fn: Callable[..., T], parts: Iterable[Any], *args: Any, ahead: int) -> Iterator[T]:
        """Each part's result, in order, as soon as it and those before it are done; at most
        ``ahead`` tasks submitted or finished but not yet handed over (what the caller holds
        at once stays bounded whatever the number of parts). The first error is raised once
        the tasks not started are cancelled and the running ones have stopped; the same when
        the caller stops iterating early."""
        if ahead < 1:
            raise ValueError(f"ahead must be at least 1, got {ahead}")
        running: deque[Future] = deque()
        try:
            for p in parts:
                running.append(self.executor.submit(fn, p, *args))
                if len(running) >= ahead:
                    yield running.popleft().result()
            while running:
                yield running.popleft().result()
        finally:  # after an error, or a caller that stopped early (GeneratorExit): no task left behind
            _stop(running)

    def fold(self, fn: Callable[..., T], parts: Sequence[Any], combine: Callable[[T, T], T], *args: Any) -> T:
        """The parts' results combined in the order of ``parts``."""
        if not parts:
            raise ValueError("no partitions to fold")
        results = self.map(fn, parts, *args)
        acc = results[0]
        for r in results[1:]:
            acc = combine(acc, r)
        return acc


def _stop(futures: Iterable[Future]) -> None:
    """Cancels the tasks not started and waits for the running ones (no task still writes
    or reads when the caller goes on)."""
    futures = list(futures)
    for f in futures:
        f.cancel()
    for f in futures:
        if not f.cancelled():
            try:
                f.exception()
            except BaseException:  # noqa: BLE001 - waiting only
                pass


@contextmanager
def pool(workers: int) -> Iterator[PoolRunner]:
    """A runner on ``workers`` fresh processes, shut down on exit."""
    if workers < 1:
        raise ValueError(f"a pool needs at least one worker, got {workers}")
    executor = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        yield PoolRunner(executor, workers)
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
