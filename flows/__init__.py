"""Prefect flows: orchestration only (the work is in dpsynth)."""
