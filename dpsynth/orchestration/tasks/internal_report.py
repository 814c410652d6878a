"""The internal utility report as a Prefect task (private workspace only, never published)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from dpsynth.pipeline import ReleasePlan, internal_report_stage

from ._common import stage


@task(name="internal-report", cache_policy=NO_CACHE, persist_result=False)
def internal_report_task(plan: ReleasePlan, codes: Path, synthetic: Path, measurement: Path) -> dict[str, Any]:
    """Utility against raw data: private workspace only, never published."""
    timings: dict[str, float] = {}
    with stage("internal_report", timings, plan.config.workspace):
        path = internal_report_stage(plan, Path(codes), Path(synthetic), Path(measurement))
    return {"report": str(path), "seconds": timings["internal_report"]}
