"""Optional dependencies: which extra installs each, and one clear error when it is missing.

The default install (``pip install dpsynth``) runs the default release path: the
methods that measure counts, the gate, the report, the Prefect flow. Two paths need
more and name the extra that brings it:

* ``solvers`` (cvxpy with CLARABEL, HiGHS, OSQP, SCS: about 240 MB): the LP and QP of
  private sampling and the marginal correction (``correct_marginals``);
* ``dask`` (dask.distributed and its 13 packages): encoding and measuring on a Dask
  cluster (``dask_address``).

A release that needs a missing one is refused by :func:`dpsynth.precheck` before any
row is read or any budget spent; a library call that needs it raises
:class:`MissingExtra` naming the extra.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

__all__ = ["EXTRAS", "MissingExtra", "missing", "require"]

#: importable module -> (extra that installs it, what needs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "cvxpy": ("solvers", "private sampling and the marginal correction solve an LP and a QP with cvxpy"),
    "distributed": ("dask", "encoding and measuring on a Dask cluster use dask.distributed"),
}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


def missing(module: str) -> str | None:
    """Why ``module`` cannot be used (the line to show), or None when it is installed."""
    if importlib.util.find_spec(module) is not None:
        return None
    extra, why = EXTRAS[module]
    return f"{why}, which is not installed: pip install 'dpsynth[{extra}]'"


def require(module: str) -> ModuleType:
    """Imports ``module``, or raises :class:`MissingExtra` naming the extra that installs it."""
    reason = missing(module)
    if reason is not None:
        raise MissingExtra(reason)
    return importlib.import_module(module)
