"""Shared task plumbing: the pipeline's stage timer with Prefect's run logger (which never sees data)
and the console reporter of :mod:`dpsynth.progress` (installed when the CLI or the API runs the flow)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from prefect import get_run_logger

from dpsynth import progress
from dpsynth.pipeline import timed


@contextmanager
def stage(name: str, timings: dict[str, float]) -> Iterator[None]:
    """Logs the start and end of a stage (names and seconds only) and records its time."""
    logger = get_run_logger()

    def say(line: str) -> None:
        logger.info(line)
        progress.say(line)

    with timed(name, timings, say):
        yield
