"""What a release with ``--method auto`` runs: a DP record count, then the chosen method.

The plan has two charges: ``auto/record-count`` (:data:`~dpsynth.methods.auto.COUNT_SHARE`
of the budget) and ``auto/method`` (the rest). Measuring draws the record count first
(exact discrete Gaussian noise under a zCDP budget, discrete Laplace under ``--delta 0``),
chooses with :func:`dpsynth.methods.auto.choose` from the schema, epsilon, delta and that
noisy count only, then measures with the chosen method inside the rest of the budget (its
own ledger over a sub-budget). The measurement is the chosen method's, with the count's
charge first among its charges and the count and the choice in ``meta["auto"]``: a rerun
that reuses the stored measurement makes the same choice and draws nothing (DESIGN.md,
decision 14); synthesis reads the choice from the measurement alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .. import progress
from ..privacy.accounting import epsilon_from_rho
from ..privacy.budget import Budget, Charge, Ledger
from ..privacy.mechanisms import gaussian_counts, laplace_charge, laplace_counts
from ..rows.encoding import EncodedTable
from ..rows.rowsource import RowSource, as_source, load_rows
from ..schema import Schema
from .auto import AUTO, COUNT_SHARE, Choice, choose
from .base import DP_ADD_REMOVE, Measurement, MethodBase, PrivacyStatement

__all__ = ["COUNT_STAGE", "METHOD_STAGE", "AutoMethod", "AutoParams", "inner_budget", "recorded_choice"]

COUNT_STAGE = "auto/record-count"
METHOD_STAGE = "auto/method"
#: The methods the rule may choose: each measures counts and streams its synthesis.
CHOOSABLE = ("pgm", "marginals")


@dataclass(frozen=True, kw_only=True)
class AutoParams:
    """No parameters: name a method to set its parameters."""


def inner_budget(budget: Budget) -> Budget:
    """The budget left to the chosen method once the record count is paid: (1 - COUNT_SHARE)
    of rho (of epsilon when pure), as an (epsilon, delta) budget whose own rho is what the
    ``auto/method`` charge states."""
    if budget.pure:
        return Budget(epsilon=budget.epsilon * (1.0 - COUNT_SHARE), delta=0.0)
    return Budget(epsilon=epsilon_from_rho(budget.rho * (1.0 - COUNT_SHARE), budget.delta), delta=budget.delta)


def _inner(choice_method: str, params: Any) -> MethodBase:
    from . import get_method

    if choice_method not in CHOOSABLE:
        raise ValueError(f"auto cannot have chosen method {choice_method!r}: its measurement is not auto's")
    return get_method(choice_method, params)  # type: ignore[return-value]


class AutoMethod(MethodBase):
    """Method ``auto``: a DP record count, then the method :func:`dpsynth.methods.auto.choose`
    picks with it. See the module docstring."""

    name: ClassVar[str] = AUTO
    guarantee: ClassVar[PrivacyStatement] = PrivacyStatement(
        kind="dp", neighbours=DP_ADD_REMOVE.neighbours,
        detail="a DP record count and the chosen method's measurements, composed in the release's ledger")
    params_type: ClassVar[type] = AutoParams
    provides_marginals: ClassVar[bool] = True
    measures_counts: ClassVar[bool] = True
    streams_synthesis: ClassVar[bool] = True
    pure_epsilon: ClassVar[bool] = True  # delta 0: a Laplace count, then marginals with Laplace noise

    def plan(self, schema: Schema, budget: Budget) -> tuple[Charge, ...]:
        """Two charges from public information: the record count's and the chosen method's."""
        rest = inner_budget(budget)
        if budget.pure:
            count = laplace_charge(COUNT_STAGE, budget.epsilon - rest.epsilon)
            method = Charge(stage=METHOD_STAGE, epsilon=rest.epsilon, mechanism="chosen method (pure epsilon)",
                            detail={"budget_epsilon": rest.epsilon})
        else:
            count = Charge(stage=COUNT_STAGE, rho=budget.rho - rest.rho, detail={"sensitivity_l2": 1.0})
            method = Charge(stage=METHOD_STAGE, rho=rest.rho, mechanism="chosen method (zCDP)",
                            detail={"budget_epsilon": rest.epsilon, "budget_rho": rest.rho})
        return (dataclasses.replace(count, detail={**count.detail, "what": "the DP record count auto chooses with"}),
                method)

    def measure(self, codes: EncodedTable | RowSource, ledger: Ledger, rng: np.random.Generator) -> Measurement:
        """The record count (charged), the choice from it, then the chosen method's measurement."""
        source = as_source(codes)
        schema, budget = source.schema, ledger.budget
        charge = ledger.spend(COUNT_STAGE)
        truth = np.array([source.rows], dtype=np.int64)
        noised = (laplace_counts if budget.pure else gaussian_counts)(truth, charge, rng)
        records = float(noised.values[0])
        choice = choose(schema, budget.epsilon, budget.delta, records)
        progress.say(f"{choice.line()} (DP record count {max(0.0, records):,.0f}, noise sd {noised.stddev:.3g})")
        method = _inner(choice.method, choice.params)
        rest = inner_budget(budget)
        inner_ledger = Ledger(rest, method.plan(schema, rest))
        rows = source if getattr(method, "measures_counts", False) else load_rows(source, method.name)
        m = method.measure(rows, inner_ledger, rng)
        unspent = sorted({c.stage for c in inner_ledger.planned} - {c.stage for c in inner_ledger.spent})
        if unspent:
            raise RuntimeError(f"method {method.name!r} (chosen by auto) did not spend planned stages {unspent}")
        ledger.spend(METHOD_STAGE)
        auto = {"record_count": records, "record_count_stddev": noised.stddev, "mechanism": noised.mechanism,
                "stage": COUNT_STAGE, "choice": choice.to_dict(), "count_share": COUNT_SHARE}
        return dataclasses.replace(m, charges=(charge, *m.charges), meta={**dict(m.meta), "auto": auto})

    def spent_ledger(self, ledger: Ledger, m: Measurement) -> Ledger:
        """The ledger a release states once measured: the record count's charge and every
        stage the chosen method spent (within ``auto/method``'s share), all spent."""
        if {c.stage for c in ledger.spent} != {COUNT_STAGE, METHOD_STAGE}:
            raise RuntimeError("auto's ledger is stated only once the count and the chosen method are spent")
        stated = Ledger(ledger.budget, m.charges)
        for c in m.charges:
            stated.spend(c.stage)
        return stated

    def chosen(self, m: Measurement) -> MethodBase:
        """The method auto chose, rebuilt from its measurement alone."""
        if "auto" not in m.meta:
            raise ValueError("the measurement was not made by method auto (no 'auto' entry in its meta)")
        return _inner(m.method, dict(m.params))

    def synthesize(self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator) -> EncodedTable:
        """The chosen method's synthesis of its measurement."""
        return self.chosen(m).synthesize(m, schema, rows, rng)  # type: ignore[attr-defined]

    def sampler(self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator) -> Any:
        """The chosen method's block sampler (both methods auto chooses stream their synthesis)."""
        return self.chosen(m).sampler(m, schema, rows, rng)  # type: ignore[attr-defined]


def recorded_choice(meta: Any) -> Choice | None:
    """The choice a measurement's ``meta`` records (None for a named method's)."""
    auto = (meta or {}).get("auto")
    if not auto:
        return None
    c = auto["choice"]
    return Choice(method=c["method"], params=dict(c["params"]), reason=c["reason"])
