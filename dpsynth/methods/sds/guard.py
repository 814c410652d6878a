"""The pre-spend refusal of ``sds``: releases its gate would refuse, refused before the budget is spent.

Public information only: the schema's code counts, the budget split and the parameters,
and the DP record count, which is the first planned charge of ``sds``
(``measure/sds/records``). Right after that count, :func:`forecast` predicts the
validation gate's thresholds for the 2-way tables sds is about to measure (the gate's own
formula, :mod:`dpsynth.evaluation.predicted`, with uniform tables, the DP count as the row
count and Delta_2 at its bound C(p, 2)); where the tightest of them is below what sds's
sampler reaches (:data:`MIN_PAIR_THRESHOLD`), :class:`SdsCannotPublish` is raised before
any marginal is measured, so the ledger holds the record count alone. The rule, its
constant and the benchmark it was set on: docs/sds-generalisation.md ("Sixth round").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Sequence

import numpy as np

from ...evaluation.predicted import DEFAULT_MIN_FACTOR, DEFAULT_SD_FACTOR
from ...privacy.budget import RefusedMidPlan
from .budget import NoiseSplit
from .params import SdsParams

__all__ = ["MIN_PAIR_THRESHOLD", "MIN_PAIR_THRESHOLD_EXPANDED", "floor_for", "Forecast", "SdsCannotPublish", "forecast", "refuse_if_unpublishable"]

#: Below this tightest predicted 2-way gate threshold sds is refused. The gate's thresholds
#: shrink with the row count (and a little with the budget); sds's sampler leaves some pair
#: off by more. Set on the tuning half of benchmarks/sds_matrix.py's interaction tables
#: (docs/sds-generalisation.md, "Sixth round" and "Eighth round"): with the guard off the gate
#: refused every tuning run up to 0.00695 (int4 at 0.0055-0.0061, int8 at 0.0064, int9 at
#: 0.00695, 2 of 2) and passed the runs at 0.0072 and 0.0074 (int8 and int9 at epsilon 1, 4
#: of 4); 0.0071 is the geometric middle of that gap. Above it the tuning runs overlap (int10
#: at 0.0078 failed 1 seed of 3 on a triple at 1.007), which no floor on a size forecast can
#: fix; every floor from 0.0071 to 0.0078 accepts that run, and 0.0071 is the one that also
#: accepts the runs at 0.0072-0.0074 that published (0.0075, the sixth round's, refused them).
#: Ninth round (parents from the 3-way tables): int8 at 0.0064 now publishes, int9 at 0.00695
#: is still refused (2 of 2); the runs overlap there too, and the floor stays.
#: Eleventh round (the tenth round's finisher, the default refit): every tuning run below the
#: floor publishes with the guard off (int4 at 0.0055-0.0061, 3 of 3; int8 at 0.0064; int9 at
#: 0.0068-0.00695) and so does int10 at 0.0078 seed 1. With no tuning refusal left there is no
#: gap to place a floor in. The floor was then moved (the lead's decision) to the lowest rule
#: value at which a tuning run has published, int4 at epsilon 4 (0.00551): every tuning run
#: at or above it publishes, and below it nothing has been seen to publish (the 1M scale
#: table at about 0.0037 was refused on its held-out draw, int6 at 0.0025 never ran without
#: the guard), so the guard refuses only where there is no evidence that sds can publish.
MIN_PAIR_THRESHOLD = 0.0055
#: The floor for a release expanded from one fitted pool (expand.py: more than its switch's
#: records, 524,288 at 20 columns). Twelfth round (docs/sds-generalisation.md): on the tuning
#: half the expanded release published the 1M x 20 scale table (seed 0, forecast 0.00372) and
#: was refused by the gate on the 10M draw of the same table (0.00107: every pair off, the
#: pool's weights cannot reach the 10M tables' precision); the floor is the lowest tuning
#: publication, as the chunked floor's (0.0037 then). Fourteenth round (the pool's record
#: update, expand.update_pool): every tuning run above the switch now publishes with the guard
#: off: the 1M scale table (0.00372), int6 at 1M (0.00253, refused by the gate before the
#: update) and the 10M scale table (0.00107, published since the thirteenth round's last pass);
#: the floor was set to the lowest tuning publication, 0.00107 (the 10M forecast). The lead's
#: check of that floor on the held-out int7 generator at 5M rows (forecast 0.00133, accepted by
#: it) was refused by the gate after spending: 2 pairs and 52 triples over (worst 1.37; 967
#: tables off, too many for the update). So no floor on the forecast separates the 10M scale
#: table (published) from int-like tables at 2-5M; the floor is the lowest publication above
#: every refusal seen, int6 at 1M and epsilon 1 (0.00253), rounded down: the 1M tables (scale,
#: int6, int7) are accepted and the 10M scale table is refused before spending (a false refusal:
#: it published with the guard off on both draws).
#: Seventeenth round (session 40: the descent's rounds grow with the copies per pool record,
#: and the last pass runs on every expanded release): no tuning release is refused by the gate
#: any more. The floor is the lowest forecast at which a release published whose code was not
#: set on it, the 10M scale table's development draw (0.00107; worst pair .898 with the pass),
#: rounded down: 0.001. int7's generator 9103 at 10M (0.00093), on which the rounds' cap was set,
#: stays refused (no evidence apart from its tuning). Held out, named before any run: int7's
#: shape (generator 9106) at 7.5M (0.00108) published (worst pair .753, triple .897), the scale
#: table's held-out 10M draw published (.688); int7's shape 9104 and int6's 9105 at 10M
#: (0.00078, under the floor) were refused by the gate after spending with the guard off, so
#: the guard's refusal of them is a true one (docs/sds-generalisation.md, seventeenth round).
MIN_PAIR_THRESHOLD_EXPANDED = 0.001


class SdsCannotPublish(RefusedMidPlan):
    """sds refused a release before measuring its marginals: the gate would refuse it. The
    ledger holds the DP record count alone; ``forecast`` is the rule's prediction."""

    def __init__(self, message: str, forecast: "Forecast | None" = None):
        super().__init__(message)
        self.forecast = forecast


@dataclass(frozen=True, kw_only=True)
class Forecast:
    """What the rule predicts for one release: the tightest predicted 2-way threshold, the
    pair it belongs to (column indices) and whether sds can publish."""

    min_pair_threshold: float
    pair: tuple[int, int]
    floor: float
    publishable: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (as benchmarks/sds_matrix.py records them)."""
        return {"min_pair_threshold": self.min_pair_threshold, "pair": list(self.pair), "floor": self.floor,
                "publishable": self.publishable}


def predicted_pair_thresholds(cardinalities: Sequence[int], split: NoiseSplit,
                              records: float) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Every column pair and the gate's predicted threshold for it: ``max(min_factor E, E +
    sd_factor SD)`` with E and SD as :func:`dpsynth.evaluation.predicted.predicted_tvds` gives them
    for a uniform table of the pair's d cells (in closed form: s = sqrt((1/d)(1 - 1/d)/n +
    (sd/n)^2), E = d s / sqrt(2 pi), SD = 0.5 sqrt(1 - 2/pi) s sqrt(d + 1); no table is
    built), ``records`` rows and records, and the noise sd sigma_2 sqrt(C(p, 2)) (Delta_2 at
    its bound; the DP percentile takes it wherever every record holds every pair, as with
    ``empty_cells="value"``)."""
    cards = [int(c) for c in cardinalities]
    pairs = list(combinations(range(len(cards)), 2))
    if not pairs:
        return pairs, np.empty(0)
    sd = split.sigmas[1] * math.sqrt(math.comb(len(cards), 2))
    d = np.array([cards[a] * cards[b] for a, b in pairs], dtype=np.float64)
    n = max(1.0, float(records))
    rows = max(1, int(round(n)))
    q = 1.0 / d
    s = np.sqrt(q * (1.0 - q) / rows + (sd / n) ** 2)
    e = d * s / math.sqrt(2.0 * math.pi)
    spread = 0.5 * math.sqrt(1.0 - 2.0 / math.pi) * s * np.sqrt(d + 1.0)
    return pairs, np.maximum(DEFAULT_MIN_FACTOR * e, e + DEFAULT_SD_FACTOR * spread)


def applies(params: SdsParams) -> bool:
    """Whether the rule covers these parameters: the complete sampler with the sds estimator
    (the configuration it was set on) measuring at least pairs."""
    return params.synthesis == "complete" and params.estimator == "sds" and params.reporting_length >= 2


def forecast(params: SdsParams, cardinalities: Sequence[int], split: NoiseSplit, records: float) -> Forecast | None:
    """The rule's prediction, or None where it does not apply (see :func:`applies`; fewer
    than two columns)."""
    if not applies(params) or len(cardinalities) < 2:
        return None
    pairs, limits = predicted_pair_thresholds(cardinalities, split, records)
    i = int(np.argmin(limits))
    tightest = float(limits[i])
    floor = floor_for(records, len(cardinalities))
    return Forecast(min_pair_threshold=tightest, pair=pairs[i], floor=floor, publishable=tightest >= floor)


def floor_for(records: float, columns: int) -> float:
    """The floor that applies to a release of about ``records`` records (the DP count) at
    ``columns`` columns: :data:`MIN_PAIR_THRESHOLD_EXPANDED` where it would be expanded from
    one pool (:func:`.expand.expands`), else :data:`MIN_PAIR_THRESHOLD`."""
    from .expand import expands

    return MIN_PAIR_THRESHOLD_EXPANDED if expands(int(max(0.0, float(records))), columns) else MIN_PAIR_THRESHOLD


def refuse_if_unpublishable(params: SdsParams, schema: Any, split: NoiseSplit, records: float) -> Forecast | None:
    """Raises :class:`SdsCannotPublish` when :func:`forecast` says the gate would refuse the
    release; else returns the forecast. Called after the DP record count, before anything
    else is measured."""
    f = forecast(params, schema.cardinalities, split, records)
    if f is None or f.publishable:
        return f
    a, b = (schema.columns[j].name for j in f.pair)
    raise SdsCannotPublish(
        f"sds cannot publish this release: with about {max(0.0, float(records)):,.0f} records (DP count) at "
        f"epsilon {split.epsilon:g}, the validation gate would hold the 2-way table of columns {a!r}, {b!r} "
        f"within a TVD of {f.min_pair_threshold:.4f}, below the {f.floor:g} that sds's sampler meets "
        f"(docs/sds-generalisation.md, sixth and twelfth rounds). Refused before measuring the marginals: only the DP "
        f"record count was spent. Change one of: the method (--method auto, or pgm), the columns (drop "
        f"{a!r} or {b!r}, whose pair is the tightest), a smaller epsilon (the gate's thresholds follow the "
        f"noise), or --param reporting_length=1 (the columns alone)", f)
