"""Shared task plumbing: timing and a logger that never sees data."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from prefect import get_run_logger


@contextmanager
def stage(name: str, timings: dict[str, float]) -> Iterator[None]:
    """Logs the start and end of a stage (names and seconds only) and records its time."""
    logger = get_run_logger()
    logger.info("%s: started", name)
    t0 = time.perf_counter()
    yield
    timings[name] = round(time.perf_counter() - t0, 6)
    logger.info("%s: done in %.2f s", name, timings[name])
