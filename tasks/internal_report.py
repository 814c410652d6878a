from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from dpsynth.pipeline import ReleasePlan, internal_report_stage

from ._common import stage


@task(name="internal-report", cache_policy=NO_CACHE, persist_result=False)
def internal_report_task(plan: ReleasePlan, encoded: dict[str, Any], synthesized: dict[str, Any]) -> float:
    """Utility against raw data: private workspace only, never published. Returns seconds."""
    timings: dict[str, float] = {}
    with stage("internal-report", timings):
        internal_report_stage(plan, Path(encoded["codes"]), Path(synthesized["synthetic"]))
    return timings["internal-report"]
