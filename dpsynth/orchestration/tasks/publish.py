"""The publish stage as a Prefect task (never cached: a release is written once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from prefect import task
from prefect.cache_policies import NO_CACHE

from dpsynth.pipeline import ReleasePlan, publish_stage
from dpsynth.pipeline.messages import public_errors


@task(name="publish", cache_policy=NO_CACHE, persist_result=False)
def publish_task(
    plan: ReleasePlan,
    measurement: Path,
    synthetic: Path,
    summary: Mapping[str, Any],
    timings: Mapping[str, float],
    dataset: Mapping[str, Any] | None = None,
) -> str:
    """Writes the release folder atomically; refuses to overwrite."""
    with public_errors(plan.config.workspace):
        return str(publish_stage(plan, Path(measurement), Path(synthetic), summary, timings, dataset))
