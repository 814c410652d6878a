"""Synthesis methods, looked up by name."""

from __future__ import annotations

from typing import Any, Mapping

from .base import Measurement, Method, ParamError, parse_params, params_to_dict
from .marginals import MarginalsMethod
from .microaggregation import MicroaggregationMethod
from .microaggregation_dp import MicroaggregationDPMethod
from .one_step import OneStepMethod
from .pgm import PgmMethod
from .private_sampling import PrivateSamplingMethod
from .sds import SdsMethod

__all__ = ["METHODS", "Measurement", "Method", "ParamError", "get_method", "params_to_dict"]

# name -> class with ``params_type`` and ``__init__(params)``
METHODS: dict[str, Any] = {MarginalsMethod.name: MarginalsMethod, SdsMethod.name: SdsMethod,
                           PrivateSamplingMethod.name: PrivateSamplingMethod, OneStepMethod.name: OneStepMethod}
METHODS |= {m.name: m for m in (MicroaggregationMethod, MicroaggregationDPMethod, PgmMethod)}


def get_method(name: str, params: Mapping[str, Any] | None = None) -> Method:
    """Builds a method from its name and ``key=value`` parameters (text or typed)."""
    try:
        cls = METHODS[name]
    except KeyError:
        raise ParamError(f"unknown method {name!r}; available: {sorted(METHODS)}") from None
    return cls(parse_params(cls.params_type, dict(params or {})))
