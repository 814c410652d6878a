from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from dpsynth.pipeline import ReleasePlan, encode_stage

from ._common import stage


def _key(context: Any, args: dict[str, Any]) -> str:
    plan: ReleasePlan = args["plan"]
    return f"dpsynth-encode-{plan.data_sha256[:32]}-{plan.schema.fingerprint()[:16]}"


@task(name="encode", cache_key_fn=_key, persist_result=True, retries=1)
def encode_task(plan: ReleasePlan) -> dict[str, Any]:
    """Raw table -> integer codes (private artifact in the workspace)."""
    timings: dict[str, float] = {}
    with stage("encode", timings):
        path = encode_stage(Path(plan.config.data), plan.schema, plan.config.workspace, plan.data_sha256)
    return {"codes": str(path), "seconds": timings["encode"]}
