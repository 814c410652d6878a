"""The measure stage (the DP boundary) as a Prefect task, cached on the release key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from dpsynth.pipeline import ReleasePlan, measure_stage

from ._common import stage


def _key(context: Any, args: dict[str, Any]) -> str:
    # The release key covers input content, schema, method, parameters, budget, seed
    # commitment and release name: a retry of the same release is a cache hit and draws
    # no new noise (DESIGN.md, decision 5). measure_stage is idempotent as well, so a
    # lost Prefect cache still never measures twice.
    # plan.opaque: the release key under the workspace secret (no hash of the raw input).
    return f"dpsynth-measure-{args['plan'].opaque('measure')}"


@task(name="measure", cache_key_fn=_key, persist_result=True, retries=0)
def measure_task(plan: ReleasePlan, codes: Path) -> dict[str, Any]:
    """The DP boundary: the only task that reads private rows."""
    timings: dict[str, float] = {}
    with stage("measure", timings, plan.config.workspace):
        folder = measure_stage(plan, Path(codes))
    return {"measurement": str(folder), "seconds": timings["measure"]}
