"""Marginal-based inference: junction trees, the Private-PGM estimator, sampling.

Plain numpy, no Prefect. Given noisy marginals with their noise scales, fit one
consistent graphical model (:func:`estimate`), query its marginals
(:meth:`GraphicalModel.project`) and draw records from it (:meth:`GraphicalModel.sample`).
"""

from .estimate import (EstimatorOptions, FitReport, FitTarget, Observation, estimate, estimate_total, fit_loss,
                       fit_to_target, scaled_options)
from .junction_tree import Domain, JunctionTree, ModelTooLarge, build_junction_tree, triangulate
from .measurement import domain_of, fit_measurement, observations_of
from .model import GraphicalModel, allocate, calibrate, calibrate_probs

__all__ = [
    "Domain",
    "EstimatorOptions",
    "FitReport",
    "FitTarget",
    "GraphicalModel",
    "JunctionTree",
    "ModelTooLarge",
    "Observation",
    "allocate",
    "build_junction_tree",
    "calibrate",
    "calibrate_probs",
    "estimate",
    "estimate_total",
    "domain_of",
    "fit_loss",
    "fit_measurement",
    "fit_to_target",
    "observations_of",
    "scaled_options",
    "triangulate",
]
