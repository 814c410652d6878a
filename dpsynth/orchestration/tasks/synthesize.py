"""The synthesize stage as a Prefect task, cached on the release key and the row count."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from prefect import task

from dpsynth.pipeline import ReleasePlan, synthesize_stage
from dpsynth.pipeline.stages import COMPLETE, synthetic_folder

from ._common import stage


def _key(context: Any, args: dict[str, Any]) -> str:
    plan = args["plan"]
    key = f"dpsynth-synthesize-{plan.opaque('synthesize')}-rows{plan.config.rows}"
    if not (synthetic_folder(plan) / COMPLETE).exists():
        # no complete table in the workspace (not drawn yet, or moved out by a publish that
        # crashed): a cached result would name files that are not there; draw it again
        key += f"-redraw-{uuid.uuid4().hex}"
    return key


@task(name="synthesize", cache_key_fn=_key, persist_result=True, retries=1)
def synthesize_task(plan: ReleasePlan, measurement: Path) -> dict[str, Any]:
    """Post-processing of the measurement alone (no privacy cost)."""
    timings: dict[str, float] = {}
    with stage("synthesize", timings, plan.config.workspace):
        folder = synthesize_stage(plan, Path(measurement))
    return {"synthetic": str(folder), "seconds": timings["synthesize"]}
