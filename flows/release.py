"""Deployment entrypoint ``flows/release.py:release_flow`` (deployments/prefect.yaml).

The flow lives in :mod:`dpsynth.orchestration.release`; this shim keeps the entrypoint a
file of the repository, run from ``DPSYNTH_HOME``. It is not installed.
"""

from dpsynth.orchestration.release import flow_parameters, release_flow, scheduled_name

__all__ = ["flow_parameters", "release_flow", "scheduled_name"]
