"""The release flow: encode -> measure -> synthesize -> validate -> publish.

Only orchestration lives here: the flow builds the config
(:meth:`dpsynth.pipeline.ReleaseConfig.from_arguments`), runs the public checks
(:func:`dpsynth.pipeline.prepare`) before any task reads a row, then follows the
library's one stage sequence (:func:`dpsynth.pipeline.run_stages`: name lock, registry
charge before measuring, stages in order) with :func:`prefect_runner`, which runs each
stage as its task. Tasks exchange paths to Parquet artifacts in the private workspace;
the results of the cached ones are persisted there too.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prefect import Flow, get_run_logger

from dpsynth import progress
from dpsynth.pipeline import (
    DEFAULT_DELTA,
    ReleaseConfig,
    ReleaseError,
    StageRunner,
    prepare,
    run_stages,
    timed,
)
from dpsynth.pipeline.stages import COMPLETE
from dpsynth.privacy.workspace import private_workspace
from dpsynth.methods.auto import AUTO
from dpsynth.rows.rowsource import DEFAULT_CHUNK_ROWS
from .heartbeat import heartbeats
from .tasks.encode import encode_task
from .tasks.internal_report import internal_report_task
from .tasks.measure import measure_task
from .tasks.publish import publish_task
from .tasks.synthesize import synthesize_task
from .tasks.validate import validate_task

# Stage name -> (task, key of its output in the task's result, served from a cache?).
_TASKS = {
    "encode": (encode_task, "codes", True),
    "measure": (measure_task, "measurement", True),
    "synthesize": (synthesize_task, "synthetic", True),
    "validate": (validate_task, "summary", False),
    "internal_report": (internal_report_task, "report", False),
}


def _workspace_storage(workspace: Path) -> Path:
    """Where the cached tasks persist their results: a folder of the private workspace.

    Given as a path, Prefect writes there through an unsaved local file system (as it
    does for its own default storage): no storage block is saved on the API at every run
    nor loaded by every cached task, which cost 0.5-0.8 s of API calls per release. A
    cache hit and a resume after a crash read the same files.
    """
    return (workspace / "prefect-results").resolve()


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


def _deployment_id() -> Any:
    """The current flow run's deployment (None: not a deployed run), from the run's context.

    ``prefect.runtime.deployment.id`` fetches the flow run from the API again (Prefect 3.8
    looks for the id on the context instead of on its flow run), a round trip at the start
    and the end of every release."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    return run.deployment_id if run is not None else None


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
    params = config.to_arguments()
    params["schema_path"] = params.pop("schema")  # `schema` would shadow a pydantic attribute
    return params


def prefect_runner(workspace: Path) -> StageRunner:
    """Runs each stage as its Prefect task; the cached ones persist their results (paths
    and seconds) in the private workspace and report a cache hit as 0 seconds.

    A cache entry must not outlive what it points to: a hit whose folder is gone from the
    workspace (an operator cleared ``encoded/`` or ``releases/`` but not
    ``prefect-results/``) runs the task again with its cache refreshed, which rebuilds
    the folder (the measure stage only with a fresh registry charge).
    """
    storage = _workspace_storage(workspace)

    def run(stage: str, *args: Any) -> tuple[Any, float, bool]:
        if stage == "publish":
            return publish_task(*args), 0.0, False
        task, key, cacheable = _TASKS[stage]
        if not cacheable:
            result = task(*args)
            return result[key], result["seconds"], False
        cached = task.with_options(result_storage=storage)
        state = cached(*args, return_state=True)
        result, hit = state.result(), state.name == "Cached"
        if hit and not _present(stage, Path(result[key])):
            state = cached.with_options(refresh_cache=True)(*args, return_state=True)
            result, hit = state.result(), False
        return Path(result[key]), 0.0 if hit else result["seconds"], hit

    return run


def _present(stage: str, path: Path) -> bool:
    """Whether a cached stage's output is still in the workspace (a complete folder for
    measure and synthesize, the codes folder for encode)."""
    return (path / COMPLETE).exists() if stage in ("measure", "synthesize") else path.exists()


class ReleaseFlow(Flow):
    """The release flow's class: Prefect's flow whose parameters, plain JSON values (the
    config's paths as text, numbers, names), are stored on the API as they are."""

    def serialize_parameters(self, parameters: dict[str, Any]) -> dict[str, Any]:
        """The parameters as the API stores them: plain JSON values unchanged, anything else
        through Prefect's own encoder (whose FastAPI import costs 0.1 CPU s at every run)."""
        if all(_plain_json(v) for v in parameters.values()):
            return dict(parameters)
        return super().serialize_parameters(parameters)


def _plain_json(value: Any) -> bool:
    if value is None or type(value) in (str, int, float, bool):
        return True
    if type(value) is list:
        return all(_plain_json(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _plain_json(v) for k, v in value.items())
    return False


def release_flow(
    data: str,
    schema_path: str,
    epsilon: float,
    out: str,
    method: str = AUTO,
    delta: float = DEFAULT_DELTA,
    rows: int | None = None,
    params: dict[str, str] | None = None,
    seed_file: str | None = None,
    name: str | None = None,
    workspace: str | None = None,
    internal_report: bool = False,
    data_docs: bool = False,
    gate: dict[str, float] | None = None,
    sign_key: str | None = None,
    dataset: str | None = None,
    period: str | None = None,
    period_epsilon: float | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    dask_address: str | None = None,
    accept_data_derived_schema: bool = False,
) -> dict[str, Any]:
    """Runs one release and returns its folder and timings (no data).

    ``dataset`` names the registry's dataset (default: the schema's name); ``period`` and
    ``period_epsilon`` declare a per-period budget (a scheduled deployment's), checked
    beside the dataset's own caps. ``chunk_rows`` and ``dask_address``: how encode and
    measure read the rows (docs/scale.md); the release does not depend on them.
    ``accept_data_derived_schema``: publish on a schema still marked ``drafted_from_data``,
    labelled NOT differentially private (refused without it).
    """
    arguments = dict(locals())  # exactly the flow's parameters: keep this the first statement
    with heartbeats():  # when the CLI's runner asked for the flow's own (heartbeat.py)
        return _release(arguments, time.perf_counter())


release_flow = ReleaseFlow(fn=release_flow, name="dpsynth-release", persist_result=False, log_prints=False,
                           validate_parameters=True)


def _release(arguments: dict[str, Any], t_flow: float) -> dict[str, Any]:
    """The flow's body: the config from its parameters, the public checks, the stages."""
    deployed = _deployment_id() is not None
    if deployed:  # a deployed run: its working folder must be DPSYNTH_HOME
        _check_deployment_home()
    arguments["schema"] = arguments.pop("schema_path")
    arguments["name"] = _resolve_name(arguments["name"])
    config = ReleaseConfig.from_arguments(**arguments)
    timings: dict[str, float] = {}
    logger = get_run_logger()

    def warn(text: str) -> None:  # the run's log and, run from the CLI or the API, the console
        logger.warning(text)
        progress.warn(text)

    with private_workspace(config.workspace):  # owner-only: codes, measurements, registry, task results
        with timed("prepare", timings, progress.say):
            plan = prepare(config)
        for warning in plan.warnings:
            warn(warning)
        done = run_stages(plan, prefect_runner(config.workspace), timings, warn=warn, started=t_flow)
    progress.note(done.registry)  # run from the CLI or the API: its console
    if deployed:  # a deployed run: the worker's console is the operator's (the CLI prints its own)
        print(f"dpsynth: {done.registry}", file=sys.stderr, flush=True)
    _release_artifact(done.folder)
    return {"release": done.folder, "timings": done.timings, "cached": done.cached, "warnings": done.warnings,
            "registry": done.registry}


def _release_artifact(folder: str) -> None:
    """A Prefect artifact for the run: where the release is and what it spent (public facts only)."""
    import json

    from prefect.artifacts import create_markdown_artifact

    manifest = json.loads((Path(folder) / "manifest.json").read_text())
    privacy = manifest["privacy"]
    lines = [
        f"**Release** `{manifest['name']}` published at [{folder}](file://{Path(folder).resolve()})",
        "",
        f"- method: `{manifest['method']}`, rows: {manifest['rows']}"
        + (f" (chosen by auto: {manifest['auto_reason']})" if manifest.get("auto_reason") else ""),
        f"- guarantee: {privacy.get('headline', '')}",
        f"- epsilon spent: {privacy['epsilon_spent']:.6g} of {privacy['epsilon']:g} (delta {privacy['delta']:g})",
    ]
    ds = privacy.get("dataset")
    if ds:
        cap = ds.get("cap_epsilon")
        lines.append(f"- dataset `{ds['name']}`: epsilon {ds['spent_epsilon_including_this']:.6g} spent over "
                     f"{ds['releases_including_this']} release(s) ({ds.get('draws_including_this', '?')} noise "
                     f"draw(s)), cap {'none declared' if cap is None else cap}")
    create_markdown_artifact(key="dpsynth-release", markdown="\n".join(lines),
                             description=f"dpsynth release {manifest['name']}")
