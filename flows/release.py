"""The release flow: encode -> measure -> synthesize -> validate -> publish.

Only orchestration lives here. The public checks (schema, method parameters, budget
plan, seed, release name) run first, in the flow itself, so a bad request fails
before any task reads a row. The flow then holds the release name's lock (tasks run
in the flow's process) from claim to publish, and charges the release to its
dataset's lifetime registry before measuring. Tasks exchange paths to Parquet
artifacts in the private workspace; their results are persisted there too.
"""

from __future__ import annotations

import hashlib
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.filesystems import LocalFileSystem

from dpsynth.pipeline import (
    DEFAULT_DELTA,
    ReleaseConfig,
    ReleaseError,
    ReleasePlan,
    charge_dataset,
    claim_name,
    default_workspace,
    prepare,
    spent_on_failure,
    utility_warning,
)
from tasks.encode import encode_task
from tasks.internal_report import internal_report_task
from tasks.measure import measure_task
from tasks.publish import publish_task
from tasks.synthesize import synthesize_task
from tasks.validate import validate_task


def _workspace_storage(workspace: Path) -> str:
    """A saved storage block for task results inside the private workspace.

    Prefect 3 only accepts result storage that the API knows about; the block name is
    derived from the workspace path so each workspace keeps its own results.
    """
    base = str((workspace / "prefect-results").resolve())
    name = "dpsynth-ws-" + hashlib.sha256(base.encode()).hexdigest()[:16]
    LocalFileSystem(basepath=base).save(name, overwrite=True)
    return f"local-file-system/{name}"


def scheduled_name(template: str, when: datetime, run_id: str) -> str:
    """``{scheduled}`` becomes the run's scheduled time (UTC, to the second) and the first
    eight characters of its flow-run id: two runs never share a name, even in one minute,
    and a retry of the same run keeps its name (and so resumes from the cache)."""
    stamp = when.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return template.replace("{scheduled}", f"{stamp}-{str(run_id).replace('-', '')[:8]}")


def _resolve_name(name: str | None) -> str | None:
    if not name or "{scheduled}" not in name:
        return name
    from prefect.runtime import flow_run

    return scheduled_name(name, flow_run.scheduled_start_time, flow_run.id)


def _check_deployment_home() -> None:
    """A deployment created without DPSYNTH_HOME runs at the filesystem root: say so at once."""
    ws = os.environ.get("DPSYNTH_WORKSPACE", "")
    if ws.startswith("/.dpsynth") or Path.cwd() == Path("/"):
        raise ReleaseError(
            "this deployment was created without DPSYNTH_HOME (its workspace would be at the filesystem "
            "root): redeploy with DPSYNTH_HOME set to the folder holding data/ and schemas/, e.g. `make serve`"
        )


def flow_parameters(config: ReleaseConfig) -> dict[str, Any]:
    """The flow's parameters for a config (paths as text: they are stored by the Prefect API)."""
    return {
        "data": str(config.data),
        "schema_path": str(config.schema),
        "method": config.method,
        "epsilon": config.epsilon,
        "delta": config.delta,
        "rows": config.rows,
        "params": dict(config.params),
        "seed_file": str(config.seed_file) if config.seed_file else None,
        "out": str(config.out),
        "name": config.name,
        "workspace": str(config.workspace),
        "internal_report": config.internal_report,
        "gate": dict(config.gate),
        "sign_key": str(config.sign_key) if config.sign_key else None,
        "dataset": config.dataset,
        "period": config.period,
        "period_epsilon": config.period_epsilon,
    }


def _run(task, storage: str, *args) -> tuple[dict[str, Any], bool]:
    state = task.with_options(result_storage=storage)(*args, return_state=True)
    return state.result(), state.name == "Cached"


@flow(name="dpsynth-release", persist_result=False, log_prints=False, validate_parameters=True)
def release_flow(
    data: str,
    schema_path: str,
    method: str,
    epsilon: float,
    out: str,
    delta: float = DEFAULT_DELTA,
    rows: int | None = None,
    params: dict[str, str] | None = None,
    seed_file: str | None = None,
    name: str | None = None,
    workspace: str | None = None,
    internal_report: bool = False,
    gate: dict[str, float] | None = None,
    sign_key: str | None = None,
    dataset: str | None = None,
    period: str | None = None,
    period_epsilon: float | None = None,
) -> dict[str, Any]:
    """Runs one release and returns its folder and timings (no data).

    ``dataset`` names the registry's dataset (default: the schema's name); ``period`` and
    ``period_epsilon`` declare a per-period budget (a scheduled deployment's), checked
    beside the dataset's own caps.
    """
    t_flow = time.perf_counter()
    from prefect.runtime import deployment

    if deployment.id:  # a deployed run: its working folder must be DPSYNTH_HOME
        _check_deployment_home()
    config = ReleaseConfig(
        data=Path(data),
        schema=Path(schema_path),
        method=method,
        epsilon=epsilon,
        delta=delta,
        rows=rows,
        params=dict(params or {}),
        seed_file=Path(seed_file) if seed_file else None,
        out=Path(out),
        name=_resolve_name(name),
        workspace=Path(workspace) if workspace else default_workspace(),
        internal_report=internal_report,
        gate=dict(gate or {}),
        sign_key=Path(sign_key) if sign_key else None,
        dataset=dataset,
        period=period,
        period_epsilon=period_epsilon,
    )
    t0 = time.perf_counter()
    plan = prepare(config)
    timings: dict[str, float] = {"prepare": round(time.perf_counter() - t0, 6)}
    with claim_name(plan):
        return _run_stages(plan, timings, t_flow)


def _run_stages(plan: ReleasePlan, timings: dict[str, float], t_flow: float) -> dict[str, Any]:
    """The tasks of one claimed release, in order (the caller holds the name's lock)."""
    config = plan.config
    cached: list[str] = []
    # Task results (paths and seconds) are persisted in the private workspace.
    storage = _workspace_storage(config.workspace)
    encoded, hit = _run(encode_task, storage, plan)
    timings["encode"] = 0.0 if hit else encoded["seconds"]
    cached += ["encode"] if hit else []
    dataset = charge_dataset(plan)  # in the flow's process, before measuring
    # From the measure stage on, a failure means the budget was spent (exit 1, said so).
    with spent_on_failure("measure"):
        measured, hit = _run(measure_task, storage, plan, encoded)
    timings["measure"] = 0.0 if hit else measured["seconds"]
    cached += ["measure"] if hit else []
    advice = utility_warning(plan, Path(measured["measurement"]))  # the small-sample guard, as the local engine
    with spent_on_failure("synthesize"):
        synthesized, hit = _run(synthesize_task, storage, plan, measured)
    timings["synthesize"] = 0.0 if hit else synthesized["seconds"]
    cached += ["synthesize"] if hit else []
    with spent_on_failure("validate"):
        validated = validate_task(plan, synthesized, measured)
    timings["validate"] = validated["seconds"]
    if config.internal_report:
        with spent_on_failure("internal report"):
            timings["internal_report"] = internal_report_task(plan, encoded, synthesized)

    elapsed = time.perf_counter() - t_flow
    work = sum(timings.values())
    timings["orchestration"] = round(max(0.0, elapsed - work), 6)
    with spent_on_failure("publish"):
        folder = publish_task(plan, measured, synthesized, validated, timings, dataset.to_manifest())
    _release_artifact(folder)
    warnings = list(plan.warnings) + ([advice] if advice else [])
    return {"release": folder, "timings": timings, "cached": cached, "warnings": warnings}


def _release_artifact(folder: str) -> None:
    """A Prefect artifact for the run: where the release is and what it spent (public facts only)."""
    import json

    from prefect.artifacts import create_markdown_artifact

    manifest = json.loads((Path(folder) / "manifest.json").read_text())
    privacy = manifest["privacy"]
    lines = [
        f"**Release** `{manifest['name']}` published at [{folder}](file://{Path(folder).resolve()})",
        "",
        f"- method: `{manifest['method']}`, rows: {manifest['rows']}",
        f"- guarantee: {privacy.get('headline', '')}",
        f"- epsilon spent: {privacy['epsilon_spent']:.6g} of {privacy['epsilon']:g} (delta {privacy['delta']:g})",
    ]
    ds = privacy.get("dataset")
    if ds:
        cap = ds.get("cap_epsilon")
        lines.append(f"- dataset `{ds['name']}`: epsilon {ds['spent_epsilon_including_this']:.6g} spent over "
                     f"{ds['releases_including_this']} release(s), cap {'none declared' if cap is None else cap}")
    create_markdown_artifact(key="dpsynth-release", markdown="\n".join(lines),
                             description=f"dpsynth release {manifest['name']}")
