"""Shared task plumbing: the pipeline's stage timer with Prefect's run logger (which never sees data)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from prefect import get_run_logger

from dpsynth.pipeline import timed


@contextmanager
def stage(name: str, timings: dict[str, float]) -> Iterator[None]:
    """Logs the start and end of a stage (names and seconds only) and records its time."""
    with timed(name, timings, get_run_logger().info):
        yield
