"""The validation gate as a Prefect task (never cached: it runs on every attempt)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from dpsynth.pipeline import ReleasePlan, validate_stage

from ._common import stage


@task(name="validate", cache_policy=NO_CACHE, persist_result=False)
def validate_task(plan: ReleasePlan, synthetic: Path, measurement: Path) -> dict[str, Any]:
    """Gate: raises (and nothing is published) when a check fails."""
    timings: dict[str, float] = {}
    with stage("validate", timings, plan.config.workspace):
        summary = validate_stage(plan, Path(synthetic), Path(measurement))
    return {"summary": summary, "seconds": timings["validate"]}
