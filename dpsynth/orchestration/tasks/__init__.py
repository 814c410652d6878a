"""Prefect tasks: thin wrappers around the stages of :mod:`dpsynth.pipeline`.

Each task returns only paths and small public summaries, and persists them to the
private workspace (the flow sets ``result_storage`` there), never to a shared store.
"""
