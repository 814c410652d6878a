"""Shared task plumbing: the pipeline's stage timer with Prefect's run logger (which never
sees data) and the console reporter of :mod:`dpsynth.progress` (installed when the CLI or the
API runs the flow), and errors without the workspace's private paths (Prefect logs a task's failure)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from prefect import get_run_logger

from dpsynth import progress
from dpsynth.pipeline import timed
from dpsynth.pipeline.messages import public_errors


@contextmanager
def stage(name: str, timings: dict[str, float], workspace: Path) -> Iterator[None]:
    """Logs the start and end of a stage (names and seconds only) and records its time; a
    failure leaves the task with no private workspace path or key in its message."""
    logger = get_run_logger()

    def say(line: str) -> None:
        logger.info(line)
        progress.say(line)

    with public_errors(workspace), timed(name, timings, say):
        yield
