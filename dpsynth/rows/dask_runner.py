"""Running the row-reading work on a Dask cluster (dask.distributed).

:class:`DaskRunner` is a :class:`dpsynth.rows.rowsource.Runner`: each partition of a
:class:`dpsynth.rows.rowsource.RowSource` (Parquet files or row groups of codes) becomes one
Dask task on some worker; results (integer counts, small histograms) come back to this
process, which sums them and adds noise once. Rows never leave the workers.

:func:`connect` opens a runner on a running scheduler (``tcp://host:8786``) or, given
``"local"`` (or ``local:N``), on a :class:`distributed.LocalCluster` of N single-threaded
worker processes that it closes afterwards. Dask is imported only here and only when a
runner is opened: single-process runs never import it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator, Sequence, TypeVar

from ..extras import require

__all__ = ["DaskRunner", "connect", "parse_address"]

T = TypeVar("T")


def parse_address(address: str) -> tuple[str | None, int]:
    """``local`` / ``local:N`` -> (None, N); a scheduler address -> (address, 0)."""
    text = address.strip()
    if text == "local":
        return None, 2
    if text.startswith("local:"):
        try:
            n = int(text.split(":", 1)[1])
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"dask address {address!r}: local:N needs a whole number of workers >= 1")
        return None, n
    if "://" not in text and ":" not in text:
        raise ValueError(f"dask address {address!r}: expected 'local', 'local:N' or a scheduler address host:port")
    return text, 0


@dataclass(frozen=True, eq=False)
class DaskRunner:
    """Maps partition functions over a ``distributed.Client``'s workers."""

    client: Any
    local: ClassVar[bool] = False

    @property
    def workers(self) -> int:
        """Workers the scheduler knows now (at least 1)."""
        return max(1, len(self.client.scheduler_info().get("workers", {})))

    def map(self, fn: Callable[..., T], parts: Sequence[Any], *args: Any) -> list[T]:
        """Each part's result, in order (one task per part; at most :meth:`window` tasks
        submitted and not yet gathered at once)."""
        out: list[Any] = [None] * len(parts)
        for index, result in self._completed(fn, parts, args):
            out[index] = result
        return out

    def fold(self, fn: Callable[..., T], parts: Sequence[Any], combine: Callable[[T, T], T], *args: Any) -> T:
        """The parts' results combined as their tasks finish (each released once added; at
        most :meth:`window` tasks submitted and not yet combined at once)."""
        if not parts:
            raise ValueError("no partitions to fold")
        acc: Any = None
        for _, result in self._completed(fn, parts, args):
            acc = result if acc is None else combine(acc, result)
        return acc

    def window(self) -> int:
        """Tasks submitted ahead of the results taken: :data:`IN_FLIGHT_PER_WORKER` per
        worker. Bounds what the workers hold (finished results waiting to be taken) and
        the scheduler's tasks, whatever the number of partitions."""
        return IN_FLIGHT_PER_WORKER * self.workers

    def _completed(self, fn: Callable[..., T], parts: Sequence[Any], args: tuple[Any, ...]) -> Iterator[tuple[int, T]]:
        """(index, result) of every part as its task finishes; a new task is submitted as
        each result is taken, and each future is released once its result is taken."""
        from distributed import as_completed

        if not parts:
            return
        # The shared arguments travel once to every worker (not once per task), and each
        # worker then holds one copy, so per-process caches keyed on them hit across tasks.
        # hash=False, pure=False: no key depends on (nor reveals a hash of) the inputs.
        # (Nothing to scatter without shared arguments: distributed refuses an empty scatter.)
        shared = self.client.scatter(args, broadcast=True, hash=False) if args else ()
        live: dict[Any, tuple[int, Any]] = {}  # key -> (part index, future), until taken
        pending = iter(range(len(parts)))

        def submit(i: int) -> Any:
            future = self.client.submit(_call_with, parts[i], fn=fn, args=shared, pure=False)
            live[future.key] = (i, future)
            return future

        running = as_completed([submit(i) for _, i in zip(range(self.window()), pending)], with_results=True)
        try:
            for future, result in running:
                i, _ = live.pop(future.key)
                future.release()
                nxt = next(pending, None)
                if nxt is not None:
                    running.add(submit(nxt))
                yield i, result
        finally:
            running.clear()
            for _, future in live.values():  # after a failure: what is still submitted
                future.release()
            live.clear()


#: Tasks a :class:`DaskRunner` keeps submitted per worker ahead of the results it has taken.
IN_FLIGHT_PER_WORKER = 2


def _call_with(part: Any, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    return fn(part, *args)


@contextmanager
def connect(address: str, *, memory_limit: str | None = None) -> Iterator[DaskRunner]:
    """A runner on the scheduler at ``address``, or on a LocalCluster for ``local[:N]``."""
    require("distributed")
    from distributed import Client, LocalCluster

    target, workers = parse_address(address)
    if target is not None:
        with Client(target) as client:
            yield DaskRunner(client)
        return
    kwargs: dict[str, Any] = {"n_workers": workers, "threads_per_worker": 1, "processes": True,
                              "dashboard_address": None}
    if memory_limit is not None:
        kwargs["memory_limit"] = memory_limit
    with LocalCluster(**kwargs) as cluster, Client(cluster) as client:
        yield DaskRunner(client)
