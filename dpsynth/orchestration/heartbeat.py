"""A flow run's heartbeats, sent by the release flow itself so that its end waits for nothing.

Prefect sends a run's heartbeats (the ``prefect.flow-run.heartbeat`` event, which an
automation can watch to call a silent run crashed) from a thread that sleeps in one-second
steps; the run's end joins it, so every release run from the CLI waited up to a second for
that sleep to finish. :func:`own_heartbeats` (the CLI's runner) turns Prefect's thread off
for one flow call and has the flow send the same event at the same interval with
:func:`heartbeats`, from a thread that waits on an event and so stops at once. A flow run
started any other way (a deployment's worker, a test) keeps Prefect's own heartbeats; with
Prefect's heartbeats switched off (``flows.heartbeat_frequency`` unset, as on a temporary
server) none is sent either way. Heartbeats carry the run's id, name, flow and tags: no data.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Any, Callable, Iterator

__all__ = ["HEARTBEAT_EVENT", "beat_until", "heartbeats", "own_heartbeats"]

HEARTBEAT_EVENT = "prefect.flow-run.heartbeat"

# Seconds between the flow's own heartbeats, set by own_heartbeats for one flow call.
_INTERVAL: contextvars.ContextVar[int | None] = contextvars.ContextVar("dpsynth_heartbeat_seconds", default=None)


@contextlib.contextmanager
def own_heartbeats() -> Iterator[int | None]:
    """Around a flow call: Prefect's heartbeat thread off, the flow's own (:func:`heartbeats`)
    on at Prefect's interval. Yields that interval (None: heartbeats are off, nothing changes)."""
    from prefect.settings import get_current_settings, temporary_settings

    seconds = get_current_settings().flows.heartbeat_frequency
    if seconds is None:
        yield None
        return
    token = _INTERVAL.set(seconds)
    try:
        with temporary_settings({"flows.heartbeat_frequency": None}):
            yield seconds
    finally:
        _INTERVAL.reset(token)


@contextlib.contextmanager
def heartbeats() -> Iterator[None]:
    """Inside the flow: the current run's heartbeat event now and every interval while the
    body runs, when :func:`own_heartbeats` asked for them (else nothing); stops without waiting."""
    seconds = _INTERVAL.get()
    resource, related = _run_resources()
    if seconds is None or resource is None:
        yield
        return
    from prefect.events import emit_event

    def send() -> None:
        emit_event(event=HEARTBEAT_EVENT, resource=resource, related=related)

    with beat_until(send, float(seconds)):
        yield


@contextlib.contextmanager
def beat_until(send: Callable[[], Any], seconds: float) -> Iterator[threading.Thread]:
    """Calls ``send`` at once and then every ``seconds`` from a daemon thread (in a copy of
    the caller's context: Prefect's settings and clients) until the block ends; the thread
    waits on an event, so the end is not held up. A failed send is skipped, not raised."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                send()
            except Exception:  # noqa: BLE001 - a lost heartbeat must not fail the release
                pass
            if stop.wait(seconds):
                return

    thread = threading.Thread(target=contextvars.copy_context().run, args=(loop,), daemon=True,
                              name="dpsynth-flow-run-heartbeat")
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(timeout=5)


def _run_resources() -> tuple[dict[str, str] | None, list[Any]]:
    """The heartbeat's resource (the current flow run) and related resources (its flow,
    deployment and tags), as Prefect describes a flow run in its events; None outside a run."""
    from prefect import __version__
    from prefect.context import FlowRunContext
    from prefect.events.related import tags_as_related_resources
    from prefect.events.schemas.events import RelatedResource

    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    if run is None:
        return None, []
    resource = {"prefect.resource.id": f"prefect.flow-run.{run.id}", "prefect.resource.name": run.name or "",
                "prefect.version": __version__}
    related: list[Any] = []
    if run.flow_id:
        related.append(RelatedResource.model_validate({
            "prefect.resource.id": f"prefect.flow.{run.flow_id}", "prefect.resource.role": "flow",
            "prefect.resource.name": ctx.flow.name if ctx.flow is not None else ""}))
    if run.deployment_id:
        related.append(RelatedResource.model_validate({
            "prefect.resource.id": f"prefect.deployment.{run.deployment_id}",
            "prefect.resource.role": "deployment"}))
    related += tags_as_related_resources(set(run.tags or []))
    return resource, related
