"""The encode stage as a Prefect task, cached on the input's content and the schema."""

from __future__ import annotations

from typing import Any

from prefect import task

from dpsynth.pipeline import ReleasePlan, encode_release
from dpsynth.privacy.workspace_key import opaque_key

from ._common import stage


def _key(context: Any, args: dict[str, Any]) -> str:
    # Keyed by the workspace secret: the Prefect database never holds a hash of the raw input.
    plan: ReleasePlan = args["plan"]
    return "dpsynth-encode-" + opaque_key(plan.config.workspace, "encode", plan.data_sha256, plan.schema.fingerprint())


@task(name="encode", cache_key_fn=_key, persist_result=True, retries=1)
def encode_task(plan: ReleasePlan) -> dict[str, Any]:
    """Raw table -> integer codes (private artifact in the workspace)."""
    timings: dict[str, float] = {}
    with stage("encode", timings, plan.config.workspace):
        path = encode_release(plan)
    return {"codes": str(path), "seconds": timings["encode"]}
