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
from typing import Any, Callable, Iterator, Protocol

from ..methods.guidance import assess
from ..measurement import Measurement
from ..privacy.registry import DatasetState, charge
from ..privacy.workspace import LockBusy, exclusive_lock
from . import stages
from .config import BudgetSpent, ReleaseConfig, ReleaseError, ReleasePlan, prepare
from .stages import COMPLETE, write_atomic

__all__ = [
    "StageRunner",
    "StagesDone",
    "charge_dataset",
    "claim_name",
    "local_runner",
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
def spent_on_failure(stage: str) -> Iterator[None]:
    """Turns any failure inside ``stage`` (the measure stage or later) into :class:`BudgetSpent`.

    The first line of the original message is kept (our messages never quote a row).
    """
    try:
        yield
    except BudgetSpent:
        raise
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BudgetSpent(f"{stage} failed after measuring, {BudgetSpent.NOTE}: {reason}") from exc


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


def charge_dataset(plan: ReleasePlan) -> DatasetState:
    """Charges the release to its dataset's lifetime registry before it measures.

    Raises :class:`dpsynth.privacy.registry.RegistryRefused` past the dataset's cap; a retry of
    the same release (same key) is not charged again.
    """
    limit = (plan.config.period, float(plan.config.period_epsilon)) if plan.config.period else None
    return charge(plan.config.workspace, plan.dataset, plan.key, plan.name, plan.charges,
                  float(plan.budget.delta), limit=limit)  # type: ignore[arg-type]


class StageRunner(Protocol):
    """Runs one named stage for an engine: returns its output, its seconds (0.0 when
    served from a cache) and whether it was served from a cache.

    Stages and their arguments: ``encode(plan) -> codes path``, ``measure(plan, codes)
    -> measurement folder``, ``synthesize(plan, measurement) -> synthetic folder``,
    ``validate(plan, synthetic, measurement) -> gate summary``,
    ``internal_report(plan, codes, synthetic)``, ``publish(plan, measurement,
    synthetic, summary, timings, dataset) -> release folder``.
    """

    def __call__(self, stage: str, *args: Any) -> tuple[Any, float, bool]: ...


@dataclass(frozen=True)
class StagesDone:
    """What a finished run reports: the release folder, stage seconds, the stages served
    from a cache, and every warning (the plan's, then the small-sample guard's)."""

    folder: Any
    timings: dict[str, float]
    cached: list[str]
    warnings: list[str]


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

    def step(stage: str, *args: Any) -> Any:
        out, seconds, hit = runner(stage, *args)
        timings[stage] = seconds
        cached.extend([stage] if hit else [])
        return out

    with claim_name(plan):
        codes = step("encode", plan)
        dataset = charge_dataset(plan)  # in the orchestrating process, before measuring
        # GE's import runs in the background while the method works; only a request that
        # got its name and its budget pays for it (a refused one exits with one clean line).
        stages.start_gate_warm_up()
        # From the measure stage on, a failure means the budget was spent (exit 1, said so).
        with spent_on_failure("measure"):
            measurement = step("measure", plan, codes)
        if (advice := utility_warning(plan, Path(measurement))) is not None:
            warnings.append(advice)
            warn(advice)
        with spent_on_failure("synthesize"):
            synthetic = step("synthesize", plan, measurement)
        with spent_on_failure("validate"):
            summary = step("validate", plan, synthetic, measurement)
        if plan.config.internal_report:
            with spent_on_failure("internal report"):
                step("internal_report", plan, codes, synthetic)
        if started is not None:
            work = sum(timings.values())
            timings["orchestration"] = round(max(0.0, time.perf_counter() - started - work), 6)
        with spent_on_failure("publish"):
            folder, _, _ = runner("publish", plan, measurement, synthetic, summary, timings,
                                  dataset.to_manifest())
    return StagesDone(folder=folder, timings=timings, cached=cached, warnings=warnings)


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
    """All stages in order, without Prefect. Returns the published folder.

    ``progress`` receives one line per stage start and end (names and seconds only),
    and each warning as ``warning: ...``.
    """
    say = progress or _quiet
    timings: dict[str, float] = {}
    with timed("prepare", timings, say):
        plan = prepare(config)
    for warning in plan.warnings:
        say(f"warning: {warning}")
    done = run_stages(plan, local_runner(say), timings, warn=lambda advice: say(f"warning: {advice}"))
    return done.folder
