"""The synthesize stage as a Prefect task, cached on the release key and the row count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from dpsynth.pipeline import ReleasePlan, synthesize_stage

from ._common import stage


def _key(context: Any, args: dict[str, Any]) -> str:
    return f"dpsynth-synthesize-{args['plan'].opaque('synthesize')}-rows{args['plan'].config.rows}"


@task(name="synthesize", cache_key_fn=_key, persist_result=True, retries=1)
def synthesize_task(plan: ReleasePlan, measurement: Path) -> dict[str, Any]:
    """Post-processing of the measurement alone (no privacy cost)."""
    timings: dict[str, float] = {}
    with stage("synthesize", timings, plan.config.workspace):
        folder = synthesize_stage(plan, Path(measurement))
    return {"synthetic": str(folder), "seconds": timings["synthesize"]}
