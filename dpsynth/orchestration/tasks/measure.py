"""The measure stage (the DP boundary) as a Prefect task, cached on the release key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from dpsynth.pipeline import ReleasePlan, measure_stage
from dpsynth.privacy.registry import Draw

from ._common import stage


def _key(context: Any, args: dict[str, Any]) -> str:
    # The release key covers input content, schema, method, parameters, budget, seed
    # commitment and release name; the draw's record number ties the entry to one charged
    # noise draw. A retry that reuses the stored measurement gets the same draw (a cache
    # hit, no new noise: DESIGN.md, decision 5); a run whose measurement was deleted is
    # charged a new draw, so it misses this cache and cannot be served a measurement that
    # is gone (decision 14). The runner also re-runs a hit whose folder is gone.
    # plan.opaque: the release key under the workspace secret (no hash of the raw input).
    draw: Draw | None = args.get("draw")
    return f"dpsynth-measure-{args['plan'].opaque('measure')}-draw{draw.id if draw is not None else 'none'}"


@task(name="measure", cache_key_fn=_key, persist_result=True, retries=0)
def measure_task(plan: ReleasePlan, codes: Path, draw: Draw | None = None) -> dict[str, Any]:
    """The DP boundary: the only task that reads private rows; draws noise only with a
    fresh registry charge (``draw``)."""
    timings: dict[str, float] = {}
    with stage("measure", timings, plan.config.workspace):
        folder = measure_stage(plan, Path(codes), draw)
    return {"measurement": str(folder), "seconds": timings["measure"]}
