"""A :class:`dpsynth.rows.rowsource.Runner` on a pool of worker processes of this machine.

The synthesize stage draws and formats a large synthetic table on every core: each task
(a run of blocks) goes to one of ``workers`` processes started with ``spawn`` (a fresh
interpreter: safe beside the threads of the Prefect engine and the progress reporter).
Functions and their arguments are pickled by reference, as for Dask. A failing task
cancels the tasks not yet started and its error is raised once the others have stopped.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator, Sequence, TypeVar

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
            for f in futures:
                f.cancel()
            for f in futures:  # no task still writes when the caller cleans up
                if not f.cancelled():
                    try:
                        f.exception()
                    except BaseException:  # noqa: BLE001 - waiting only
                        pass
            raise
        return [f.result() for f in futures]

    def fold(self, fn: Callable[..., T], parts: Sequence[Any], combine: Callable[[T, T], T], *args: Any) -> T:
        """The parts' results combined in the order of ``parts``."""
        if not parts:
            raise ValueError("no partitions to fold")
        results = self.map(fn, parts, *args)
        acc = results[0]
        for r in results[1:]:
            acc = combine(acc, r)
        return acc


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
