"""``--method auto``: the method and parameters a release gets when it names none.

:func:`choose` is a pure function of public information only (the schema's columns and
their code counts, epsilon, delta); it never sees a row, so two tables with the same
schema get the same choice. The release resolves it in ``prepare``, before anything is
read or charged, and records the choice and its reason in the manifest and the report.
The rule and the benchmark its constants come from: docs/choosing.md ("What auto chooses").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Mapping, Sequence

from ..schema import Schema

__all__ = ["AUTO", "COUNT_SHARE", "MAX_WIDE_AIM_COLUMNS", "MIN_SIGNAL", "WIDE_AIM", "Choice",
           "cell_signal", "choose", "choose_for"]

#: The name a user passes (or leaves as the default) to ask for the automatic choice.
AUTO = "auto"

#: AIM (``select=aim degree=2``) scores every column pair each round, for about 16 rounds per
#: column, and refits a model of up to ``max_model_cells``: its time grows faster than the
#: square of the columns. Above these bounds ``auto`` takes MST, whose time is about linear.
#: Set on the tuning half of benchmarks/auto_choice.py: 30 columns at 100,000 rows took 20 s
#: at epsilon 1 and 48 s at epsilon 10 on this 2-core machine (the 60 s target), 45 columns
#: did not finish in 300 s (docs/choosing.md, "What auto chooses").
MAX_AIM_COLUMNS = 32
#: Sum over column pairs of their cells: the per-round scoring work. The widest measured,
#: schemas/nist-fine.yaml (247,923 pair cells, 24 columns), took 31-35 s (pgm_vs_mbi.json).
MAX_AIM_PAIR_CELLS = 500_000
#: From 33 columns to this many (within MAX_AIM_PAIR_CELLS), AIM with its rounds and model
#: bounded (:data:`WIDE_AIM`) instead of MST. Set on the tuning half: on 5,000 x 60 it scored
#: 932.8 at epsilon 1 (22 s of CPU) and 956.2 at epsilon 10 (97 s of CPU), 16 and 29 points
#: above MST, where default AIM took 66 s under load and did not finish in 300 s.
MAX_WIDE_AIM_COLUMNS = 64
#: AIM bounded for wide tables: 256 budget units (rounds; the default is 16 per column) and a
#: model of at most 200,000 cells (the default 1,000,000).
WIDE_AIM = {"select": "aim", "degree": "2", "units": "256", "max_model_cells": "200000"}

#: The share of the budget (of rho; of epsilon under --delta 0) the DP record count costs.
COUNT_SHARE = 0.01
#: The rule's measure of signal (:func:`cell_signal`): a typical 1-way cell (the DP record count
#: over the median column's code count) in units of the noise one column's histogram gets
#: when the budget is split evenly over the columns. Below MIN_SIGNAL, independent columns
#: (``marginals``) were the most accurate; above, AIM. Set on the tuning half of
#: benchmarks/auto_choice.py (5 seeds per cell): marginals won at 2.3 and 10.6, AIM (with its
#: low-budget compression bound, docs/pgm.md) at 17.6, 19.7 and above; the bound is the
#: geometric middle of that gap. (Before that bound, MST won at 17.6 and 19.7 and had a band
#: of its own up to 26.) Checked again after marginals' projection and row allocation (issue
#: 26): marginals won at 2.3, 10.6 and 12.3, AIM at 17.6, 19.7 and 29.9, so it stays; AIM also
#: won one tuning cell below it (1,000 x 5 at signal 6.4; docs/choosing.md).
MIN_SIGNAL = 14.0

#: What a pure-epsilon release gives up, from benchmarks/results/auto_choice.json (held-out half).
PURE_GIVES_UP = ("A pure-epsilon release keeps each column's distribution but no relationship between "
                 "columns: on the benchmark's held-out tables it scores {loss} points (of 1000, 3-way) below "
                 "what auto chooses with a delta > 0")
PURE_LOSS_POINTS = "60 to 235"


@dataclass(frozen=True, kw_only=True)
class Choice:
    """What ``auto`` resolved to: a method name, its parameters as text (as ``--param``
    takes them) and a one-sentence reason a user can read."""

    method: str
    params: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""

    def line(self) -> str:
        """One line for the terminal: what was chosen and why."""
        shown = " ".join(f"{k}={v}" for k, v in self.params.items())
        return f"method auto chose {self.method}{' ' + shown if shown else ''}: {self.reason}"

    def preview(self) -> str:
        """One line before the release: the choice from the schema alone, decided after the count."""
        shown = " ".join(f"{k}={v}" for k, v in self.params.items())
        return (f"method auto: draws a DP record count ({COUNT_SHARE:.0%} of the budget, charged), then chooses; "
                f"from the schema alone it would take {self.method}{' ' + shown if shown else ''}")

    def to_dict(self) -> dict[str, object]:
        """JSON form (the manifest's ``auto`` entry)."""
        return {"method": self.method, "params": dict(self.params), "reason": self.reason}


def choose(schema: Schema, epsilon: float, delta: float, records: float | None = None) -> Choice:
    """The method and parameters for a release of ``schema`` at (epsilon, delta).

    Public information only: the schema's code counts, epsilon, delta and ``records``, a
    DP record count (a noisy value, already charged), or None before it is drawn.
    """
    return choose_for(schema.cardinalities, epsilon, delta, records)


def cell_signal(cardinalities: Sequence[int], epsilon: float, delta: float, records: float) -> float:
    """A typical 1-way cell in noise sds: (records / the median code count) / sigma, where sigma
    = sqrt(columns / (2 rho)) is one column's noise with rho split evenly (pure epsilon: the
    discrete Laplace sd at epsilon / columns). ``records`` is the DP count (never the rows)."""
    from statistics import median

    from ..privacy.budget import Budget

    d = len(cardinalities)
    budget = Budget(epsilon=float(epsilon), delta=float(delta))
    sigma = math.sqrt(d / (2.0 * budget.rho)) if not budget.pure else math.sqrt(2.0) * d / float(epsilon)
    return max(0.0, float(records)) / float(median(cardinalities)) / sigma


def choose_for(cardinalities: Sequence[int], epsilon: float, delta: float, records: float | None = None) -> Choice:
    """:func:`choose` on the columns' code counts alone (what the rule depends on)."""
    cards = [int(c) for c in cardinalities]
    if not cards:
        raise ValueError("auto needs a schema with at least one column")
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not (isinstance(delta, (int, float)) and 0 <= delta < 1):
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}")
    if delta == 0:
        return Choice(method="marginals", params={}, reason=(
            "delta 0 asks for pure epsilon-DP, so auto chooses among pure-epsilon methods; marginals (discrete "
            "Laplace histograms) was the better of them on the benchmark. " + PURE_GIVES_UP.format(loss=PURE_LOSS_POINTS)))
    d = len(cards)
    widest = max(cards)
    if widest > 1_000_000:
        return Choice(method="marginals", params={}, reason=(
            f"a column has {widest:,} codes, more than any pair model can hold (1,000,000 cells): only "
            "independent histograms fit; give that column fewer categories or bins"))
    signal = cell_signal(cards, epsilon, delta, records) if records is not None else None
    counted = f"with the DP record count ({max(0.0, float(records or 0.0)):,.0f}) a typical column value's count is"
    if signal is not None and signal < MIN_SIGNAL:
        return Choice(method="marginals", params={}, reason=(
            f"{counted} {signal:.1f} noise sds, below {MIN_SIGNAL:g}: too few records for this epsilon to "
            "measure pairs, and independent columns were the most accurate there on the benchmark "
            "(docs/choosing.md, 'What auto chooses')"))
    pair_cells = sum(a * b for a, b in combinations(cards, 2))
    if d <= MAX_AIM_COLUMNS and pair_cells <= MAX_AIM_PAIR_CELLS:
        return Choice(method="pgm", params={"select": "aim", "degree": "2"}, reason=(
            f"{d} columns and {pair_cells:,} pair cells fit AIM's time bound ({MAX_AIM_COLUMNS} columns, "
            f"{MAX_AIM_PAIR_CELLS:,} pair cells); AIM with degree 2 was the most accurate configuration in the "
            f"benchmark's cells once a typical column value's count is {MIN_SIGNAL:g} noise sds or more "
            "(docs/choosing.md, 'What auto chooses')"))
    if d <= MAX_WIDE_AIM_COLUMNS and pair_cells <= MAX_AIM_PAIR_CELLS:
        return Choice(method="pgm", params=dict(WIDE_AIM), reason=(
            f"{d} columns are beyond default AIM's time bound ({MAX_AIM_COLUMNS}) but within "
            f"{MAX_WIDE_AIM_COLUMNS}: "
            f"AIM with {WIDE_AIM['units']} rounds and a model of at most {int(WIDE_AIM['max_model_cells']):,} cells "
            "keeps its time bounded and beat MST on the benchmark's wide tables "
            "(docs/choosing.md, 'What auto chooses')"))
    return Choice(method="pgm", params={"select": "mst"}, reason=(
        f"{d} columns with {pair_cells:,} pair cells are beyond AIM's time bound ({MAX_AIM_COLUMNS} columns, "
        f"{MAX_AIM_PAIR_CELLS:,} pair cells): MST measures one pair per column and stays fast "
        "(AIM would be more accurate and take minutes: pass --method pgm --param select=aim --param degree=2)"))
