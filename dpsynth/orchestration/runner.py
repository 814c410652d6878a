"""Running the release flow from the command line: one error line, no orphan server.

Two things Prefect does on its own do not fit the CLI's contract:

* with no ``PREFECT_API_URL``, Prefect starts a temporary API server and stops it from an
  ``atexit`` hook; after ``kill -9`` of the CLI that hook never runs and the server is left
  running. Here the API comes from :mod:`.server`: a configured or running server is
  reused, else a temporary one is launched with the Linux parent-death signal set, so the
  kernel stops it when the CLI dies for any reason.
* on a failure Prefect's console handlers print the task's and the flow's tracebacks
  (30-100 lines). :func:`quiet_failures` filters, on the console only, records at
  ERROR and above and any record that carries a traceback; the CLI prints its own one
  line. It also drops the flow and task runs' own records (a warning would otherwise
  show twice: the CLI's reporter says it). Logs sent to the Prefect API are unchanged.
* Prefect's heartbeat thread makes a run's end wait up to 1 s: the flow sends the run's
  heartbeats itself instead (:mod:`.heartbeat`), from a thread that stops at once.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

from .heartbeat import own_heartbeats
from .server import ApiServer, api_server, configured_instead

__all__ = ["quiet_failures", "run_release_flow", "temporary_server"]


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
def temporary_server(server: ApiServer | None = None) -> Iterator[str]:
    """Yields the API URL this run uses (:mod:`.server`), set as Prefect's for the run;
    a temporary server (``server``'s, or one launched here) is waited for, then stopped."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from dpsynth import progress

    with contextlib.ExitStack() as stack:
        if server is None:
            server = stack.enter_context(api_server())
            progress.say(server.line)
        if server.kind == "configured":
            yield server.url
            return
        temporary = server.kind == "temporary"
        took = server.ready()
        if temporary:
            progress.say(f"Prefect server ready {took:.1f} s after its launch")
        # A temporary server lives only as long as this run: nothing can act on the flow
        # run's heartbeats, and stopping the heartbeat thread waits up to 1 s at the end.
        updates = {PREFECT_API_URL: server.url, **({"flows.heartbeat_frequency": None} if temporary else {})}
        try:
            with temporary_settings(updates):
                yield server.url
        finally:
            if temporary:
                progress.say("stopping the temporary Prefect server")
                _drain_api_logs()  # else the log worker reports a failed send after the stop
                server.stop()


def _drain_api_logs() -> None:
    try:
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=5)
    except Exception:  # best effort: never mask the run's own outcome
        pass


def run_release_flow(config: Any, server: ApiServer | None = None) -> dict[str, Any]:
    """The release flow for a :class:`dpsynth.pipeline.ReleaseConfig`, quiet on failure, on
    ``server`` (found or launched by the caller, e.g. while it imported) or one found here.

    While a temporary server starts, the input is encoded here (:func:`encode_ahead`); the
    result's ``encoded_ahead`` holds those seconds (the flow's encode stage then finds the codes).
    """
    from dpsynth import progress

    from .release import flow_parameters, release_flow

    with contextlib.ExitStack() as stack:
        if server is None:
            server = stack.enter_context(api_server())
            progress.say(server.line)
        if (settled := configured_instead(server)) is not server:
            server = settled
            progress.say(server.line)
        ahead = encode_ahead(config) if server.kind == "temporary" else 0.0
        stack.enter_context(temporary_server(server))
        stack.enter_context(quiet_failures())
        stack.enter_context(own_heartbeats())  # Prefect's heartbeat thread held the run's end up to 1 s
        result = release_flow(**flow_parameters(config))
    return {**result, "encoded_ahead": ahead}


def encode_ahead(config: Any) -> float:
    """The public checks and the encode stage, run by the library while the temporary server
    starts (they need no API): the flow's own encode stage then finds the codes in the
    workspace (:func:`dpsynth.pipeline.stages.encode_stage` reuses a complete folder). Nothing
    is measured or charged here. Returns the encode's seconds."""
    from dpsynth import progress
    from dpsynth.pipeline import encode_release, prepare, timed
    from dpsynth.privacy.workspace import private_workspace

    timings: dict[str, float] = {}
    with private_workspace(config.workspace):
        plan = prepare(config)
        with timed("encode", timings, lambda line: progress.say(f"{line} (while the Prefect server starts)")):
            encode_release(plan)
    return timings["encode"]
