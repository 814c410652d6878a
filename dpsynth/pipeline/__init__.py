"""The release pipeline: config, stages and the one stage sequence, without Prefect.

* :mod:`.config` -- :class:`ReleaseConfig` (every setting of a release, built by the CLI,
  the flow and the API through :meth:`ReleaseConfig.from_arguments`), :func:`prepare`
  and the checked :class:`ReleasePlan`;
* :mod:`.stages` -- encode, measure, synthesize, validate, internal report, publish, as
  plain functions over files in the private workspace;
* :mod:`.engine` -- :func:`run_stages`, the stage order every engine follows, the stage
  timer, and :func:`run_release`, the local engine. ``tasks/`` wraps each stage in a
  Prefect task and ``flows/release.py`` runs the same sequence over them.

Workspace layout (private: it holds codes of raw rows; never publish it). One per user by
default (:func:`dpsynth.privacy.workspace.default_workspace`), owner-only (folders 0700, files 0600:
:func:`dpsynth.privacy.workspace.private_workspace`)::

    WORKSPACE/
      encoded/<HMAC of data sha256 and schema>/codes/   encode cache (Parquet parts)
      releases/<release key>/
        measurement/      measurement.parquet, measurement.json, ledger.json, COMPLETE
        synthetic/        synthetic-codes.parquet, synthetic.parquet, synthetic.csv, COMPLETE
                          (publish moves the last two into the release and removes COMPLETE)
        synthetic-rows<N>/  the same for --rows N (one cache per row count)
        validation.json
      names/<release name>.json                           name -> release key
      names/<release name>.lock                           held (flock) for a whole run
      inputs/, schemas/                                   the Python API's frames and schemas
      prefect-results/                                    the Prefect engine's cached task results
      registry.sqlite                                     lifetime budget per dataset: every noise draw
      secret.key                                          keys the release key and names derived from the input
      .private-v1                                         the workspace was tightened once

A measurement folder is written to a temporary name and renamed once complete, so a
crash never leaves a half measurement, and a completed one is never redrawn: a
re-run of the same release reuses it and is not charged again (DESIGN.md, decision 5).
A release name can carry only one measurement: re-using it with different inputs is
refused before anything is measured, and a run holds its name exclusively from claim to
publish (decision 11). Right before measuring, the draw is charged to its dataset in the
lifetime registry (decisions 10 and 14, :mod:`dpsynth.privacy.registry`); a run whose complete
measurement is gone is charged again, and the measure stage draws only with that charge.
"""

from __future__ import annotations

from .config import (
    DEFAULT_DELTA,
    POSTPROCESS_OPTIONS,
    BudgetSpent,
    PartlySpent,
    ReleaseConfig,
    ReleaseError,
    ReleasePlan,
    ValidationFailed,
    default_workspace,
    prepare,
    split_params,
)
from .engine import (
    StageRunner,
    StagesDone,
    charge_dataset,
    claim_name,
    local_runner,
    no_cap_warning,
    run_release,
    run_stages,
    spent_on_failure,
    timed,
    utility_warning,
)
from .stages import (
    INTERNAL_LABEL,
    correct_to_measurement,
    encode_release,
    encode_stage,
    internal_report_stage,
    measure_stage,
    publish_stage,
    synthesize_stage,
    start_gate_warm_up,
    validate_stage,
)

__all__ = [
    "DEFAULT_DELTA",
    "INTERNAL_LABEL",
    "POSTPROCESS_OPTIONS",
    "BudgetSpent",
    "PartlySpent",
    "ReleaseConfig",
    "ReleaseError",
    "ReleasePlan",
    "StageRunner",
    "StagesDone",
    "ValidationFailed",
    "charge_dataset",
    "claim_name",
    "correct_to_measurement",
    "default_workspace",
    "encode_release",
    "encode_stage",
    "internal_report_stage",
    "local_runner",
    "measure_stage",
    "no_cap_warning",
    "prepare",
    "publish_stage",
    "run_release",
    "run_stages",
    "spent_on_failure",
    "split_params",
    "synthesize_stage",
    "timed",
    "utility_warning",
    "start_gate_warm_up",
    "validate_stage",
]
