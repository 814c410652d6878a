"""Repository shim: the Prefect tasks are in :mod:`dpsynth.orchestration.tasks`. Not installed."""

from dpsynth.orchestration.tasks.encode import encode_task
from dpsynth.orchestration.tasks.internal_report import internal_report_task
from dpsynth.orchestration.tasks.measure import measure_task
from dpsynth.orchestration.tasks.publish import publish_task
from dpsynth.orchestration.tasks.synthesize import synthesize_task
from dpsynth.orchestration.tasks.validate import validate_task

__all__ = ["encode_task", "internal_report_task", "measure_task", "publish_task", "synthesize_task",
           "validate_task"]
