"""Prefect orchestration of a release: the flow (:mod:`.release`), its tasks
(:mod:`.tasks`, thin wrappers around the stages of :mod:`dpsynth.pipeline`) and the
runner the CLI uses (:mod:`.runner`).

This is the only part of ``dpsynth`` that imports Prefect; ``import dpsynth`` and the
library modules never load it. It is installed inside ``dpsynth`` so that the package
adds no top-level names such as ``flows`` or ``tasks`` to a user's environment; the
repository's ``flows/`` and ``tasks/`` folders are thin shims over it for the Prefect
deployment entrypoints (``deployments/prefect.yaml``).
"""
