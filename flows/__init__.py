"""Repository shims for Prefect deployment entrypoints; the flows are in
:mod:`dpsynth.orchestration`. Not installed (see pyproject.toml)."""
