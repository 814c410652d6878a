"""Privacy budget and the ledger that plans and records its use.

A release states its budget as (epsilon, delta). It is converted once to the zCDP
budget ``rho`` that composition works in. Before the first measurement, the method
*plans* every stage's share; a plan whose total exceeds ``rho`` is refused, so no
noise is ever drawn for a release that could not be completed within budget.
Measurements then *spend* the planned shares, each exactly once.
"""

from __future__ import annotations

import math
from functools import cached_property
from dataclasses import dataclass, field
from typing import Any, Iterable

from .accounting import epsilon_from_rho, rho_from_epsilon

__all__ = ["MAX_DELTA", "Budget", "Charge", "Ledger", "BudgetExceeded", "LedgerError", "RefusedMidPlan", "check_delta",
           "delta_warning", "is_pure", "stated_budget", "total_epsilon"]

# Relative slack allowed when comparing sums of floating-point shares with the budget.
_RHO_TOLERANCE = 1e-9


#: A release's or a dataset cap's delta must lie below this (docs/privacy.md, "Choosing delta"):
#: a delta of 1e-3 or more is above 1/n for every table of 1,000 rows or more, which no
#: standard accepts (a mechanism publishing each record with probability delta meets it).
MAX_DELTA = 1e-3


def check_delta(delta: Any, what: str = "delta") -> float:
    """Refuses a delta outside (0, :data:`MAX_DELTA`), naming ``what``; returns it as a float."""
    ok = isinstance(delta, (int, float)) and not isinstance(delta, bool) and math.isfinite(delta)
    if not (ok and 0 < delta < MAX_DELTA):
        raise ValueError(
            f"{what} must lie in (0, {MAX_DELTA:g}), got {delta!r}: a delta this large lets a release publish "
            "about delta x rows records outright, which no DP standard accepts; pass e.g. --delta 1e-6, well "
            "below 1/rows (docs/privacy.md, 'Choosing delta')"
        )
    return float(delta)


def delta_warning(delta: float, records: int | None, source: str) -> str | None:
    """A warning when ``delta`` is above 1/``records`` (the usual standard is delta well
    below 1/n); ``source`` says where the count comes from (public or DP: never the rows)."""
    if records is None or records < 1 or delta <= 1.0 / records:
        return None
    return (f"delta {delta:g} is above 1/{records} ({source}): the guarantee then allows publishing "
            f"records outright; use a delta well below 1/rows, e.g. --delta {10 ** math.floor(math.log10(0.1 / records)):g}")


class BudgetExceeded(ValueError):
    """A plan or a charge would spend more than the release's budget."""


class LedgerError(RuntimeError):
    """A charge that was not planned, or one spent twice."""


class RefusedMidPlan(ValueError):
    """A method stopped after spending only part of its plan (e.g. ``sds`` after its DP record
    count, where the count says the gate would refuse the release). What the release cost is
    the ledger's spent charges; the rest of the plan drew no noise. The message names the
    parameter to change and never quotes a row."""


@dataclass(frozen=True, kw_only=True)
class Budget:
    """An (epsilon, delta) budget; ``rho`` is its zCDP equivalent.

    ``delta == 0`` is a pure epsilon-DP policy: ``rho`` is then 0 and the ledger admits
    only pure-epsilon charges (Laplace, exponential charged as epsilon)."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        if not isinstance(self.epsilon, (int, float)) or not (
            math.isfinite(self.epsilon) and self.epsilon > 0
        ):
            raise ValueError(f"epsilon must be a finite number > 0, got {self.epsilon!r}: pass e.g. --epsilon 1 "
                             "(docs/choosing.md, 'Choosing epsilon')")
        if isinstance(self.delta, bool) or not isinstance(self.delta, (int, float)) or not (0 <= self.delta < 1):
            raise ValueError(f"delta must lie in [0, 1), got {self.delta!r}: pass e.g. --delta 1e-6, well below "
                             "1/rows, or 0 for pure epsilon-DP (docs/choosing.md, 'Choosing delta')")

    @property
    def pure(self) -> bool:
        """A pure epsilon-DP budget (delta 0): no zCDP charge fits it."""
        return self.delta == 0

    @cached_property
    def rho(self) -> float:
        """The largest zCDP rho whose (epsilon, delta) conversion fits this budget (0 when delta is 0)."""
        if self.pure:
            return 0.0
        return rho_from_epsilon(float(self.epsilon), float(self.delta))

    def to_dict(self) -> dict[str, float]:
        """JSON form: epsilon, delta and rho."""
        return {"epsilon": float(self.epsilon), "delta": float(self.delta), "rho": self.rho}


@dataclass(frozen=True, kw_only=True)
class Charge:
    """One stage's share of the budget.

    ``rho`` is a zCDP cost; ``epsilon`` is a pure-DP cost composed by basic composition
    (for a mechanism that is only known to be pure epsilon-DP, adding epsilon directly is
    tighter than converting it to epsilon^2/2-zCDP and back). A charge may carry both.
    """

    stage: str
    rho: float = 0.0
    epsilon: float = 0.0
    mechanism: str = "gaussian"
    detail: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.stage:
            raise ValueError("a charge needs a stage name")
        if not (math.isfinite(self.rho) and self.rho >= 0):
            raise ValueError(f"rho of stage {self.stage!r} must be finite and >= 0, got {self.rho!r}")
        if not (math.isfinite(self.epsilon) and self.epsilon >= 0):
            raise ValueError(f"epsilon of stage {self.stage!r} must be finite and >= 0, got {self.epsilon!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the manifest's ledger); ``epsilon`` and ``detail`` only when set."""
        out: dict[str, Any] = {"stage": self.stage, "rho": self.rho, "mechanism": self.mechanism}
        if self.epsilon:
            out["epsilon"] = self.epsilon
        if self.detail:
            out["detail"] = dict(self.detail)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Charge":
        """Inverse of :meth:`to_dict`."""
        return cls(
            stage=str(d["stage"]),
            rho=float(d.get("rho", 0.0)),
            epsilon=float(d.get("epsilon", 0.0)),
            mechanism=str(d.get("mechanism", "gaussian")),
            detail=dict(d.get("detail", {})),
        )


def total_epsilon(charges: Iterable[Charge], delta: float) -> float:
    """(epsilon, delta) of a set of charges: pure parts add up, the zCDP part converts (CKS)."""
    charges = list(charges)
    rho = sum(c.rho for c in charges)
    pure = sum(c.epsilon for c in charges)
    if rho > 0 and delta == 0:
        return math.inf  # no finite epsilon bounds a zCDP charge at delta 0
    return pure + (epsilon_from_rho(rho, delta) if rho > 0 else 0.0)


def is_pure(charges: Iterable[Charge]) -> bool:
    """Whether every charge is a pure-epsilon cost (no zCDP part): the charges then compose
    to pure epsilon-DP, delta 0, whatever delta the release was configured with."""
    charges = list(charges)
    return bool(charges) and all(c.rho == 0.0 for c in charges) and any(c.epsilon > 0.0 for c in charges)


def stated_budget(privacy: Any) -> Budget:
    """The budget a manifest's ``privacy`` section states. A pure epsilon-DP release states
    delta 0; its ledger does not depend on delta, so it is checked at the delta it was
    configured with (``delta_requested``)."""
    delta = float(privacy["delta"])
    if delta == 0.0:
        delta = float(privacy.get("delta_requested", 1e-6))
    return Budget(epsilon=float(privacy["epsilon"]), delta=delta)


class Ledger:
    """Plans the shares of a budget, then records each share spent exactly once."""

    def __init__(self, budget: Budget, plan: Iterable[Charge]):
        self.budget = budget
        planned = tuple(plan)
        names = [c.stage for c in planned]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise LedgerError(f"stages planned twice: {', '.join(dupes)}")
        total = sum(c.rho for c in planned)
        pure = sum(c.epsilon for c in planned)
        cap = budget.rho
        zcdp = next((c for c in planned if c.rho > 0), None)
        if budget.pure and zcdp is not None:
            raise BudgetExceeded(
                f"delta 0 asks for pure epsilon-DP, but stage {zcdp.stage!r} is a zCDP ({zcdp.mechanism}) charge: "
                "choose a pure-epsilon method (--method auto does: marginals; or microaggregation-dp), "
                "or pass --delta above 0"
            )
        if pure == 0.0 and total > cap * (1.0 + _RHO_TOLERANCE):
            raise BudgetExceeded(
                f"the plan spends rho={total:.6g} but the budget (epsilon={budget.epsilon}, "
                f"delta={budget.delta}) allows rho={cap:.6g}: raise --epsilon, or lower the method's own "
                "budget parameters (e.g. sds epsilon=)"
            )
        eps = total_epsilon(planned, budget.delta) if pure > 0.0 else 0.0
        if eps > budget.epsilon * (1.0 + _RHO_TOLERANCE):
            raise BudgetExceeded(
                f"the plan spends epsilon={eps:.6g} (pure {pure:.6g} "
                f"plus rho={total:.6g}) but the budget allows epsilon={budget.epsilon}: raise --epsilon, or "
                "lower the method's own budget parameters"
            )
        self._planned: dict[str, Charge] = {c.stage: c for c in planned}
        self._spent: dict[str, Charge] = {}

    @property
    def planned(self) -> tuple[Charge, ...]:
        """Every planned charge, in plan order."""
        return tuple(self._planned.values())

    @property
    def spent(self) -> tuple[Charge, ...]:
        """The charges spent so far, in spending order."""
        return tuple(self._spent.values())

    @property
    def rho_spent(self) -> float:
        """zCDP part of the spent charges."""
        return sum(c.rho for c in self._spent.values())

    @property
    def rho_planned(self) -> float:
        """zCDP part of the plan."""
        return sum(c.rho for c in self._planned.values())

    def spend(self, stage: str) -> Charge:
        """Record that the planned share of ``stage`` has been used."""
        if stage not in self._planned:
            raise LedgerError(f"stage {stage!r} was not planned")
        if stage in self._spent:
            raise LedgerError(f"stage {stage!r} was already charged")
        charge = self._planned[stage]
        self._spent[stage] = charge
        return charge

    def epsilon_spent(self) -> float:
        """Total (epsilon, delta) cost of the spent charges (:func:`total_epsilon`)."""
        return total_epsilon(self._spent.values(), float(self.budget.delta))

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``ledger.json`` and the manifest's privacy section)."""
        return {
            "budget": self.budget.to_dict(),
            "rho_planned": self.rho_planned,
            "rho_spent": self.rho_spent,
            "epsilon_pure_spent": sum(c.epsilon for c in self._spent.values()),
            "epsilon_spent": self.epsilon_spent(),
            "stages": [
                {**c.to_dict(), "spent": c.stage in self._spent} for c in self._planned.values()
            ],
        }
