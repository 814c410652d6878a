"""Running the release flow from the command line: one error line, no orphan server.

Two things Prefect does on its own do not fit the CLI's contract:

* with no ``PREFECT_API_URL``, Prefect starts a temporary API server as a child
  process and stops it from an ``atexit`` hook; after ``kill -9`` of the CLI that hook
  never runs and the server is left running. Here the CLI starts that server itself,
  with the Linux parent-death signal set (``PR_SET_PDEATHSIG``), so the kernel stops it
  when the CLI dies for any reason; elsewhere the ``atexit`` hook is all there is.
* on a failure Prefect's console handlers print the task's and the flow's tracebacks
  (30-100 lines). :func:`quiet_failures` filters, on the console only, records at
  ERROR and above and any record that carries a traceback; the CLI prints its own one
  line. It also drops the flow and task runs' own records (a warning would otherwise
  show twice: the CLI's reporter says it). Logs sent to the Prefect API are unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from typing import Any, Iterator

__all__ = ["quiet_failures", "run_release_flow", "temporary_server"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """In the child, before exec: ask the kernel for SIGTERM when the parent dies."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)


class _ConsoleFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith(("prefect.flow_runs", "prefect.task_runs")):
            return False  # the run's own lines: the CLI's reporter says them (dpsynth.progress)
        return record.levelno < logging.ERROR and not record.exc_info


def _console_handlers() -> list[logging.Handler]:
    names = [n for n in logging.Logger.manager.loggerDict if n == "prefect" or n.startswith("prefect.")]
    handlers = []
    for logger in [logging.getLogger()] + [logging.getLogger(n) for n in names]:
        for h in logger.handlers:
            if isinstance(h, logging.StreamHandler) and h not in handlers:
                handlers.append(h)
    return handlers


@contextlib.contextmanager
def quiet_failures() -> Iterator[None]:
    """Drops error records and tracebacks from console handlers (not from the API)."""
    flt = _ConsoleFilter()
    handlers = _console_handlers()
    for h in handlers:
        h.addFilter(flt)
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(flt)


@contextlib.contextmanager
def temporary_server() -> Iterator[str | None]:
    """Yields an API URL: the configured one, or a temporary server that dies with us."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from dpsynth import progress

    if PREFECT_API_URL.value():
        progress.say(f"using the Prefect server at {PREFECT_API_URL.value()}")
        yield PREFECT_API_URL.value()
        return
    progress.say("starting the Prefect engine (a temporary server; `make serve` keeps one running)...")
    t0 = time.perf_counter()
    from prefect.server.api import server as server_module

    parent = os.getpid()
    real_popen = subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen:
        if sys.platform.startswith("linux"):
            kwargs.setdefault("preexec_fn", lambda: _die_with_parent(parent))
        return real_popen(*args, **kwargs)

    server = server_module.SubprocessASGIServer()
    quiet = logging.getLogger(server_module.subprocess_server_logger.name)
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # no "Starting/Stopping temporary server" lines
    server_module.subprocess.Popen = popen  # only while this one server starts
    try:
        server.start()
    finally:
        server_module.subprocess.Popen = real_popen
    progress.say(f"Prefect engine ready in {time.perf_counter() - t0:.1f} s")
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            yield server.api_url
    finally:
        progress.say("stopping the temporary Prefect server")
        _drain_api_logs()  # else the log worker reports a failed send after the stop
        server.stop()
        quiet.setLevel(level)


def _drain_api_logs() -> None:
    try:
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=5)
    except Exception:  # best effort: never mask the run's own outcome
        pass


def run_release_flow(config: Any) -> dict[str, Any]:
    """The release flow for a :class:`dpsynth.pipeline.ReleaseConfig`, quiet on failure."""
    from .release import flow_parameters, release_flow

    with temporary_server(), quiet_failures():
        return release_flow(**flow_parameters(config))
