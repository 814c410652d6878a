"""Shared task plumbing: the pipeline's stage timer with Prefect's run logger (which never
sees data), and errors without the workspace's private paths (Prefect logs a task's failure)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from prefect import get_run_logger

from dpsynth.pipeline import timed
from dpsynth.pipeline.messages import public_errors


@contextmanager
def stage(name: str, timings: dict[str, float], workspace: Path) -> Iterator[None]:
    """Logs the start and end of a stage (names and seconds only) and records its time; a
    failure leaves the task with no private workspace path or key in its message."""
    with public_errors(workspace), timed(name, timings, get_run_logger().info):
        yield
