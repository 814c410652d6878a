"""Synthesis methods, looked up by name.

:data:`METHODS` maps each name to its class and imports a method's module only when
that method is looked up: a release of ``sds`` never pays for microaggregation's
geometry imports (0.4 s of a CLI release).
"""

from __future__ import annotations

import importlib
from typing import Any, Iterator, Mapping

from .base import Measurement, Method, ParamError, parse_params, params_to_dict

__all__ = ["METHODS", "Measurement", "Method", "ParamError", "get_method", "params_to_dict"]

#: name -> "module:Class" (relative to this package)
_WHERE = {
    "marginals": ".marginals:MarginalsMethod",
    "sds": ".sds:SdsMethod",
    "private-sampling": ".private_sampling:PrivateSamplingMethod",
    "one-step": ".one_step:OneStepMethod",
    "microaggregation": ".microaggregation:MicroaggregationMethod",
    "microaggregation-dp": ".microaggregation_dp:MicroaggregationDPMethod",
    "pgm": ".pgm:PgmMethod",
}


class _Registry(Mapping[str, Any]):
    """name -> method class (with ``params_type`` and ``__init__(params)``), imported on first use."""

    def __init__(self, where: Mapping[str, str]) -> None:
        self._where = dict(where)
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            module, cls_name = self._where[name].split(":")
            cls = getattr(importlib.import_module(module, __name__), cls_name)
            if cls.name != name:
                raise RuntimeError(f"method class {cls_name} is named {cls.name!r}, registered as {name!r}")
            self._loaded[name] = cls
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, name: object) -> bool:
        return name in self._where


METHODS: Mapping[str, Any] = _Registry(_WHERE)


def get_method(name: str, params: Mapping[str, Any] | None = None) -> Method:
    """Builds a method from its name and ``key=value`` parameters (text or typed); ``auto``
    is the record count and the choice it makes (:mod:`.auto_method`), not a registered method."""
    if name == "auto":
        from .auto_method import AutoMethod

        return AutoMethod(parse_params(AutoMethod.params_type, dict(params or {})))
    try:
        cls = METHODS[name]
    except KeyError:
        raise ParamError(f"unknown method {name!r} (--method); available: auto (the default), "
                         f"{', '.join(sorted(METHODS))}") from None
    return cls(parse_params(cls.params_type, dict(params or {})))
