"""Where a release's row stages run: this process, or one Dask cluster per release.

:func:`row_runner` is what every row stage (encode, measure, synthesize, validate, the
internal report, the report's counts) opens. Inside :func:`release_cluster` (which
:func:`dpsynth.pipeline.engine.run_stages` enters for the whole release) the stages share
one runner per Dask address: started when a stage first asks for it, closed when the
release ends, whether it succeeded or failed. Outside it, each call opens and closes its
own (the behaviour of the stage functions called alone).

Without a Dask address, a large table is drawn (synthesize) and scanned (validate) on a
pool of this machine's cores (:func:`local_pool`): inside :func:`release_cluster` the
release's stages share one pool, started by the first stage that asks for it (its worker
processes import numpy, pandas and pyarrow once: 1-2 s of CPU each; synthesize starts it
before its model fit, :func:`warm_pool`, so that they do so on the core the fit leaves
idle) and closed when the release ends.
"""

from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, ContextManager, Iterator

from ..rows.rowsource import Runner, SerialRunner

__all__ = ["POOL_MIN_BLOCKS", "close_local_pool", "local_pool", "open_clusters", "open_pools", "release_cluster", "row_runner",
           "scan_runner", "synthesis_runner", "warm_pool"]


def _connect(address: str) -> ContextManager[Runner]:
    """A Dask runner of its own on ``address`` (closed on exit)."""
    from ..rows.dask_runner import connect

    return connect(address)


def _open_pool(workers: int) -> ContextManager[Runner]:
    """A pool of ``workers`` processes of this machine of its own (shut down on exit)."""
    from ..rows.pool_runner import pool

    return pool(workers)


class _Shared:
    """One runner (a Dask address's, or this machine's pool), opened by ``opener`` on first
    use, for the releases that share it."""

    def __init__(self, opener: Callable[[Any], ContextManager[Runner]]) -> None:
        self.opener = opener
        self.refs = 0
        self.lock = threading.Lock()
        self.stack: ExitStack | None = None
        self.runner: Runner | None = None

    def get(self, arg: Any) -> Runner:
        """The runner, opened now with ``arg`` (the address, or the workers) if it is not yet."""
        with self.lock:
            if self.runner is None:
                stack = ExitStack()
                self.runner = stack.enter_context(self.opener(arg))
                self.stack = stack
            return self.runner

    def close(self) -> None:
        with self.lock:
            stack, self.stack, self.runner = self.stack, None, None
        if stack is not None:
            stack.close()


_LOCK = threading.Lock()
_SHARED: dict[str, _Shared] = {}


def open_clusters() -> int:
    """How many shared Dask runners are started now (for tests and diagnostics)."""
    with _LOCK:
        return sum(1 for k, s in _SHARED.items() if k != _LOCAL and s.runner is not None)


#: The key of the local pool among the shared runners (a Dask address is never empty).
_LOCAL = ""


def close_local_pool() -> bool:
    """Closes the release's shared local pool now, unless another release of this process
    shares it (a stage that asks for it later starts another): validate closes it once its
    scan is done, so that publish does not carry the idle workers (about 450 MB at 10M).
    True when it closed one."""
    with _LOCK:  # no release joins, and none leaves, while the pool closes
        shared = _SHARED.get(_LOCAL)
        if shared is None or shared.refs > 1 or shared.runner is None:
            return False
        shared.close()
    return True


def open_pools() -> int:
    """How many shared local pools are started now (0 or 1; for tests and diagnostics)."""
    with _LOCK:
        shared = _SHARED.get(_LOCAL)
        return int(shared is not None and shared.runner is not None)


@contextmanager
def release_cluster(dask_address: str | None) -> Iterator[None]:
    """While open, :func:`row_runner` of ``dask_address`` hands out one shared runner,
    started lazily and closed on exit (also when the release fails). Releases of one
    process that run at once with the same address share it; the last one out closes it.
    Without an address the same holds for :func:`local_pool`'s pool of this machine."""
    key = dask_address or _LOCAL
    with _LOCK:
        shared = _SHARED.setdefault(key, _Shared(_open_pool if key == _LOCAL else _connect))
        shared.refs += 1
    try:
        yield
    finally:
        with _LOCK:
            shared.refs -= 1
            last = shared.refs == 0
            if last:
                del _SHARED[key]
        if last:
            shared.close()


@contextmanager
def row_runner(dask_address: str | None) -> Iterator[Runner]:
    """This process (no address); the release's shared Dask runner inside
    :func:`release_cluster`; else a cluster of its own (``dpsynth.rows.dask_runner.connect``),
    closed on exit."""
    if not dask_address:
        yield SerialRunner()
        return
    with _shared_or_own(dask_address, dask_address, _connect) as runner:
        yield runner


@contextmanager
def _shared_or_own(key: str, arg: Any, opener: Callable[[Any], ContextManager[Runner]]) -> Iterator[Runner]:
    """The release's shared runner of ``key`` (opened with ``arg`` on first use) inside
    :func:`release_cluster`; else ``opener(arg)``, closed on exit."""
    with _LOCK:
        shared = _SHARED.get(key)
    if shared is not None:
        yield shared.get(arg)
        return
    with opener(arg) as runner:
        yield runner


#: Blocks from which a synthetic table is drawn on a process pool of this machine's cores
#: (below, starting the pool costs more than it saves).
POOL_MIN_BLOCKS = 8


@contextmanager
def synthesis_runner(dask_address: str | None, sampler) -> Iterator[Runner | None]:
    """Where the synthetic blocks are drawn and written: the Dask cluster of
    ``dask_address``; else, for a streaming sampler of at least :data:`POOL_MIN_BLOCKS`
    blocks, a pool of this machine's cores (``$DPSYNTH_SYNTH_WORKERS``); else ``None``
    (this process). A whole table (:class:`~dpsynth.pipeline.synthetic.TableSampler`) is
    always written here. The bytes are the same in every case."""
    from .synthetic import BLOCK_ROWS, TableSampler

    if (isinstance(sampler, TableSampler) or getattr(sampler, "sequential", False)  # read in order, here
            or int(sampler.rows) <= BLOCK_ROWS):  # one block: nothing to share
        yield None
    elif dask_address:
        with row_runner(dask_address) as runner:
            yield runner
    elif (workers := _pool_workers(int(sampler.rows))) > 1:
        with local_pool(workers) as runner:
            yield runner
    else:
        yield None


def _pool_workers(rows: int) -> int:
    """The processes a local table of ``rows`` rows is drawn and scanned on: this machine's
    cores (``$DPSYNTH_SYNTH_WORKERS``) from :data:`POOL_MIN_BLOCKS` blocks, else 1 (no pool)."""
    from ..rows.pool_runner import default_workers
    from .synthetic import BLOCK_ROWS

    return default_workers() if rows >= POOL_MIN_BLOCKS * BLOCK_ROWS else 1


def _warm() -> None:
    """A pool task that imports what the release's tasks need (the block writer, the
    gate's scan), so that a worker started early pays for its imports before the work."""
    import dpsynth.gate.scan  # noqa: F401
    import dpsynth.pipeline.synthetic  # noqa: F401


def warm_pool(dask_address: str | None, rows: int | None) -> bool:
    """Inside a release on the local engine, starts the release's pool now for a table of
    ``rows`` (expected) rows that :func:`synthesis_runner` will draw on it, each worker
    importing what its tasks need (numpy, pandas, pyarrow, the block writer and the
    gate's scan: 1-2 s of CPU each) while this process fits the model alone; the tasks
    are not waited for. True when it started them. Nothing else changes: the pool is the
    one :func:`local_pool` hands out later."""
    with _LOCK:
        shared = _SHARED.get(_LOCAL)
    if dask_address or shared is None or rows is None or (workers := _pool_workers(int(rows))) <= 1:
        return False
    runner = shared.get(workers)
    for _ in range(workers):
        runner.executor.submit(_warm)
    return True


@contextmanager
def scan_runner(rows: int) -> Iterator[Runner | None]:
    """Where the validate stage of the local engine scans a synthetic table of ``rows``
    rows: for a table of at least :data:`POOL_MIN_BLOCKS` blocks (as synthesize decides),
    a pool of this machine's cores (``$DPSYNTH_SYNTH_WORKERS``; the release's, when
    synthesize started it); else ``None`` (the gate's worker reads the files itself). The
    scan, and so every byte the gate writes, is the same in every case."""
    if (workers := _pool_workers(int(rows))) > 1:
        with local_pool(workers) as runner:
            yield runner
    else:
        yield None


@contextmanager
def local_pool(workers: int) -> Iterator[Runner]:
    """A pool of ``workers`` processes of this machine: inside :func:`release_cluster`
    without an address, the release's one pool (started now if no stage started it yet,
    closed when the release ends); else a pool of its own, shut down on exit."""
    with _shared_or_own(_LOCAL, workers, _open_pool) as runner:
        yield runner
