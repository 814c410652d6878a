"""The one stage sequence of a release, and the local engine that runs it in-process.

:func:`run_stages` is the order every engine follows: claim the name, encode, charge
the dataset's registry, measure, the small-sample guard, synthesize, validate, the
optional internal report, publish. An engine supplies only a :class:`StageRunner`
that runs one named stage; :func:`run_release` runs the stage functions directly,
``flows/release.py`` runs their Prefect tasks. :func:`timed` is the one stage timer
(the tasks use it too).
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol

from .. import progress as _progress
from ..methods.guidance import assess
from ..measurement import Measurement
from ..privacy.registry import DatasetState, DrawRefused, charge, near_twin_warning, registry_path
from ..privacy.workspace import LockBusy, exclusive_lock, private_workspace
from . import stages
from .cluster import release_cluster
from .messages import public_error, public_message
from .config import BudgetSpent, ReleaseConfig, ReleaseError, ReleasePlan, prepare
from .stages import COMPLETE, write_atomic

__all__ = [
    "StageRunner",
    "StagesDone",
    "charge_dataset",
    "claim_name",
    "local_runner",
    "no_cap_warning",
    "registry_line",
    "run_release",
    "run_stages",
    "spent_on_failure",
    "timed",
    "utility_warning",
]

Say = Callable[[str], None]


def _quiet(line: str) -> None:
    """A progress sink that drops every line."""


@contextmanager
def timed(stage: str, timings: dict[str, float], say: Say = _quiet) -> Iterator[None]:
    """Says the start and end of a stage (names and seconds only) and records its time."""
    say(f"{stage}: started")
    t0 = time.perf_counter()
    yield
    timings[stage] = round(time.perf_counter() - t0, 6)
    say(f"{stage}: done in {timings[stage]:.2f} s")


@contextmanager
def spent_on_failure(stage: str, workspace: Path | None = None) -> Iterator[None]:
    """Turns any failure inside ``stage`` (the measure stage or later) into :class:`BudgetSpent`.

    The first line of the original message is kept (our messages never quote a row),
    without the workspace's private paths and keys (:mod:`.messages`); the cause chained
    to it is the same public form, never the original with its paths.
    """
    try:
        yield
    except (BudgetSpent, DrawRefused):
        raise
    except Exception as exc:
        cause = public_error(exc, workspace)
        reason = public_message(cause, workspace).splitlines()[0]
        raise BudgetSpent(f"{stage} failed after measuring, {BudgetSpent.NOTE}: {reason}") from cause


@contextmanager
def claim_name(plan: ReleasePlan) -> Iterator[None]:
    """Holds the release name exclusively for the block (claim, measure, publish).

    An OS lock (``flock`` on ``names/<name>.lock``) that a second run of the same name
    finds taken at once; the OS releases it when the holder dies, so a crashed run's name
    is free again and its complete measurement is kept. Under the lock, a name already
    bound to another complete measurement is refused (DESIGN.md, decision 11).
    """
    names = plan.config.workspace / "names"
    try:
        with exclusive_lock(names / f"{plan.name}.lock"):
            target = Path(plan.config.out) / plan.name
            if target.exists():  # published while this run was preparing
                raise ReleaseError(f"release {target} already exists: releases are never overwritten; pass another --name")
            _bind_name(plan, names / f"{plan.name}.json")
            yield
    except LockBusy:
        raise ReleaseError(
            f"release name {plan.name!r} is being built by another run right now; nothing was measured "
            "(wait for it to finish, or choose another --name)"
        ) from None


def _bind_name(plan: ReleasePlan, record: Path) -> None:
    """One release name, one measurement: refuse a name already measured differently."""
    if record.exists():
        key = json.loads(record.read_text())["key"]
        if key != plan.key and (plan.config.workspace / "releases" / key / "measurement" / COMPLETE).exists():
            raise ReleaseError(
                f"release name {plan.name!r} was already measured with other inputs or parameters; "
                "a second measurement would spend the budget again: choose a new --name"
            )
    write_atomic(record, json.dumps({"key": plan.key}) + "\n")


def utility_warning(plan: ReleasePlan, measurement_dir: Path) -> str | None:
    """The small-sample guard's warning when the measurement predicts a release below the
    independent-columns baseline (public information only; see :mod:`dpsynth.methods.guidance`)."""
    advice = assess(Measurement.load(measurement_dir), plan.schema)
    return advice.message if advice is not None and advice.below_baseline else None


def no_cap_warning(dataset: Mapping[str, Any]) -> str:
    """The warning for a release of a dataset without a lifetime cap (the manifest's
    ``privacy.dataset``; names and rounded figures only)."""
    return (f"dataset {dataset['name']!r} has no lifetime privacy cap (its releases have spent epsilon "
            f"{_progress.fmt(dataset['spent_epsilon_including_this'])}); set one with "
            f"`dpsynth budget set {dataset['name']} --epsilon E --delta D`")


def charge_dataset(plan: ReleasePlan) -> DatasetState:
    """Charges the release's noise draw to its dataset's lifetime registry before it measures.

    Called under the name's lock, right before the measure stage. Free only when the
    stored complete measurement of this release key exists (the measure stage will reuse
    it and draw nothing); otherwise a new draw is charged, even for a known key (its
    measurement was deleted, or a crash came before it was complete), and refused past
    the cap with :class:`dpsynth.privacy.registry.RegistryRefused`. The state's ``draw`` is what
    the measure stage needs to draw noise (DESIGN.md, decision 14).
    """
    limit = (plan.config.period, float(plan.config.period_epsilon)) if plan.config.period else None
    reuse = (plan.release_dir() / "measurement" / COMPLETE).exists()
    return charge(plan.config.workspace, plan.dataset, plan.key, plan.name, plan.charges,
                  float(plan.budget.delta), reuse=reuse, limit=limit)  # type: ignore[arg-type]


def registry_line(plan: ReleasePlan, dataset: DatasetState) -> str:
    """One line for the operator's console (never a published file): which registry the
    run charged, and whether it drew noise or reused its stored measurement."""
    where = registry_path(plan.config.workspace).absolute()
    if dataset.charged_now and dataset.draw is not None and dataset.draw.fresh:
        n = len(dataset.draws_by_name().get(plan.name, []))
        what = (f"charged a noise draw of release {plan.name!r} to dataset {plan.dataset!r} "
                f"({'its first draw' if n == 1 else f'draw {n} of that release name'})")
    elif dataset.charged_now:
        what = f"charged release {plan.name!r} to dataset {plan.dataset!r} (its measurement was not on record)"
    else:
        what = f"no new charge: release {plan.name!r} reused its stored measurement (dataset {plan.dataset!r})"
    return f"privacy registry {where}: {what}"


class StageRunner(Protocol):
    """Runs one named stage for an engine: returns its output, its seconds (0.0 when
    served from a cache) and whether it was served from a cache.

    Stages and their arguments: ``encode(plan) -> codes path``, ``measure(plan, codes,
    draw) -> measurement folder`` (``draw``: the registry's grant), ``synthesize(plan, measurement) -> synthetic folder``,
    ``validate(plan, synthetic, measurement) -> gate summary``,
    ``internal_report(plan, codes, synthetic, measurement) -> page path``, ``publish(plan, measurement,
    synthetic, summary, timings, dataset) -> release folder``.
    """

    def __call__(self, stage: str, *args: Any) -> tuple[Any, float, bool]: ...


@dataclass(frozen=True)
class StagesDone:
    """What a finished run reports: the release folder, stage seconds, the stages served
    from a cache, every warning (the plan's, then the small-sample guard's), and which
    registry was charged (:func:`registry_line`)."""

    folder: Any
    timings: dict[str, float]
    cached: list[str]
    warnings: list[str]
    registry: str = ""  # registry_line(): for the operator's console only


def run_stages(
    plan: ReleasePlan,
    runner: StageRunner,
    timings: dict[str, float],
    *,
    warn: Say = _quiet,
    started: float | None = None,
) -> StagesDone:
    """The release's stages in order, for every engine, under the name's lock.

    ``timings`` already holds the prepare stage's seconds; ``warn`` receives the
    small-sample guard's warning as soon as it is known, before anything is published.
    With ``started`` (a ``perf_counter`` value), the time not spent in stages is
    recorded as ``orchestration``.
    """
    cached: list[str] = []
    warnings = list(plan.warnings)
    ws = plan.config.workspace

    def step(stage: str, *args: Any) -> Any:
        out, seconds, hit = runner(stage, *args)
        timings[stage] = seconds
        if hit:
            cached.append(stage)
            _progress.say(f"{stage}: reused from the cache (no noise redrawn)")
        return out

    # one Dask cluster (of --dask-address) for every row stage, closed at the end, also on failure
    with claim_name(plan), release_cluster(plan.config.dask_address):
        codes = step("encode", plan)
        if (twin := near_twin_warning(plan.config.workspace, plan.dataset)) is not None:
            warnings.append(twin)  # on the console only: it names another dataset
            warn(twin)
        dataset = charge_dataset(plan)  # in the orchestrating process, right before measuring
        # GE's import runs in the background while the method works; only a request that
        # got its name and its budget pays for it (a refused one exits with one clean line).
        stages.start_gate_warm_up()
        # From the measure stage on, a failure means the budget was spent (exit 1, said so).
        with spent_on_failure("measure", ws):
            measurement = step("measure", plan, codes, dataset.draw)
            said = [utility_warning(plan, Path(measurement)), stages.measured_delta_warning(plan, Path(measurement))]
        for advice in filter(None, said):
            warnings.append(advice)
            warn(advice)
        with spent_on_failure("synthesize", ws):
            synthetic = step("synthesize", plan, measurement)
        with spent_on_failure("validate", ws):
            summary = step("validate", plan, synthetic, measurement)
        if plan.config.internal_report:
            with spent_on_failure("internal report", ws):
                page = step("internal_report", plan, codes, synthetic, measurement)
            _progress.say(f"internal report (private, computed from the raw data: never publish it): {page}")
        if started is not None:
            work = sum(timings.values())
            timings["orchestration"] = round(max(0.0, time.perf_counter() - started - work), 6)
        _progress.say("publish: started")  # no "done" line: the manifest it writes holds the timings
        with spent_on_failure("publish", ws):
            folder, _, _ = runner("publish", plan, measurement, synthetic, summary, timings,
                                  dataset.to_manifest())
    return StagesDone(folder=folder, timings=timings, cached=cached, warnings=warnings,
                      registry=registry_line(plan, dataset))


def local_runner(say: Say = _quiet) -> StageRunner:
    """Runs the stage functions of :mod:`dpsynth.pipeline.stages` in this process, timed.

    A stage function is looked up when it runs, so a test can replace it in that module.
    """

    def run(stage: str, *args: Any) -> tuple[Any, float, bool]:
        function = getattr(stages, _STAGE_FUNCTIONS[stage])
        if stage == "publish":  # not timed: the manifest it writes holds the timings
            return function(*args), 0.0, False
        timings: dict[str, float] = {}
        with timed(stage, timings, say):
            out = function(*args)
        return out, timings[stage], False

    return run


# Stage name -> function of dpsynth.pipeline.stages (each takes the runner's arguments).
_STAGE_FUNCTIONS = {
    "encode": "encode_release",
    "measure": "measure_stage",
    "synthesize": "synthesize_stage",
    "validate": "validate_stage",
    "internal_report": "internal_report_stage",
    "publish": "publish_stage",
}


def run_release(config: ReleaseConfig, progress: Say | None = None) -> Path:
    """All stages in order, without Prefect, in the privately opened workspace
    (:func:`dpsynth.privacy.workspace.private_workspace`). Returns the published folder.

    ``progress`` receives one line per stage start and end (names and seconds only),
    each warning as ``warning: ...``, and at the end which registry was charged as
    ``registry: ...`` (a local path: for the operator's console, never a published file).
    Without it they go to the current reporter of :mod:`dpsynth.progress` (none by default:
    silent), as the counters of long stages do; the registry line as a note.
    """
    say = progress or _progress.say
    warn = (lambda text: say(f"warning: {text}")) if progress is not None else _progress.warn
    timings: dict[str, float] = {}
    with private_workspace(config.workspace):
        with timed("prepare", timings, say):
            plan = prepare(config)
        for warning in plan.warnings:
            warn(warning)
        done = run_stages(plan, local_runner(say), timings, warn=warn)
    if progress is not None:
        progress(f"registry: {done.registry}")
    else:
        _progress.note(done.registry)
    return done.folder
