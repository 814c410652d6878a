"""Default t, alpha and b from the paper's error bound (Section 5.8), and our tuned ones.

The paper's choice (``preset="paper"``), for n records, p coordinates, the records' l1
radius R and the budget eps_y of the means (the formulas did not survive in our copy of
the text; these are our reading of Section 5.8):

* t = max(1, floor(kappa ln n / ln ln n)) with kappa = 1/3 (Remark 5.16);
* alpha = 1 / sqrt(t): the net term then matches the 1/sqrt(t) projection term;
* b minimises the two b-dependent terms of Theorem 5.9's bound: the noise on the means,
  sum_j w_j ||r_j||_2 ~ sqrt(2p) * 2 R / (b eps_y), against the mass of damped cells,
  2 s b / n; so b = sqrt(sqrt(2 p) R n / (s eps_y)).

``preset="tuned"`` (set on generated tables of 3,000 and 30,000 rows and the demo table;
adult and national2019 are the held-out check, see docs/microaggregation.md): b is
``b_factor`` = 8 times the rule above (damping every cell is cheaper than the paper's
worst case suggests: it shrinks small cells towards the uniform record instead of
letting noise through), and the net has alpha = 0.5 and the largest t <= 5 whose net has
at most n / (64 K) points, K = sqrt(2p) R / eps_y (the number of cells that can still
hold about b records each: s <= n / b with b = 8 sqrt(K n / s); the first benchmark run
used n / (8 K), which did not match this rule and over-refined the net); below 13 points it falls back to (t, alpha) = (2, 0.8) or
(1, 1).

For the anonymous method (Theorem 4.1) the net is chosen for k' = floor(sqrt(k)) cells:
t = max(1, floor(ln k' / ln ln k')) when k' >= 16 (2 below, where the formula is on its
decreasing branch), lowered until a net finer than alpha = 1 fits, and the smallest alpha
whose net has at most k' points (counted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .net import alpha_for_size, alpha_net, estimate_net_size

__all__ = ["Design", "paper_design", "tuned_design", "damping_level", "anonymous_net"]


@dataclass(frozen=True, kw_only=True)
class Design:
    """A net and damping design: dimension t, net radius alpha, damping level b."""

    t: int
    alpha: float
    b: float


def damping_level(n: float, p: int, l1_radius: float, s: float, eps_y: float) -> float:
    """The b that balances the means' noise against the mass of damped cells (Theorem 5.9)."""
    return max(1.0, math.sqrt(math.sqrt(2.0 * p) * l1_radius * max(n, 1.0) / (max(s, 1.0) * eps_y)))


def _t_paper(n: float, kappa: float) -> int:
    if n <= math.e ** math.e:
        return 1
    return max(1, math.floor(kappa * math.log(n) / math.log(math.log(n))))


def paper_design(n: float, p: int, l1_radius: float, eps_y: float, *, kappa: float = 1 / 3,
                 t: int | None = None, alpha: float | None = None, b: float | None = None,
                 b_factor: float = 1.0, t_cap: int = 8) -> Design:
    """t, alpha and b as the paper chooses them (Section 5.8, our reading)."""
    tt = min(t if t is not None else _t_paper(n, kappa), t_cap, p)
    a = alpha if alpha is not None else 1.0 / math.sqrt(tt)
    s = 1.3 * estimate_net_size(tt, a) + 1
    return Design(t=tt, alpha=a, b=b if b is not None else b_factor * damping_level(n, p, l1_radius, s, eps_y))


def tuned_design(n: float, p: int, l1_radius: float, eps_y: float, *, t: int | None = None,
                 alpha: float | None = None, b: float | None = None, b_factor: float = 8.0,
                 t_cap: int = 5) -> Design:
    # Cells that can still hold b = b_factor * sqrt(K n / s) records each: s <= n / b, i.e.
    # s <= n / (b_factor^2 K).
    """Our defaults: t and alpha capped so that every cell can hold b records."""
    K = math.sqrt(2.0 * p) * l1_radius / eps_y
    s_max = max(n, 1.0) / (b_factor**2 * K)
    if t is None and alpha is None:
        if estimate_net_size(2, 0.5) > s_max:
            t, alpha = (2, 0.8) if estimate_net_size(2, 0.8) <= s_max else (1, 1.0)
        else:
            t = max(c for c in range(2, min(t_cap, p) + 1) if c == 2 or estimate_net_size(c, 0.5) <= s_max)
            alpha = 0.5
    elif t is None:
        t = max([c for c in range(1, min(t_cap, p) + 1) if estimate_net_size(c, alpha) <= s_max] or [1])
    elif alpha is None:
        alpha = max(0.5, min(2.0, alpha_for_size(t, s_max)))
    tt = min(t, p)
    s = 1.3 * estimate_net_size(tt, alpha) + 1
    return Design(t=tt, alpha=alpha, b=b if b is not None else b_factor * damping_level(n, p, l1_radius, s, eps_y))


def anonymous_net(k: int, t: int | None = None, alpha: float | None = None) -> tuple[int, float]:
    """t and alpha of the net for the anonymous method with k blocks: a net of at most
    k' = floor(sqrt(k)) points (counted on the net itself, not estimated).

    t follows ln k' / ln ln k' on the branch where that formula grows (k' >= 16; below,
    ln ln k' nears 0 and the formula blows up: at k' = 3 it gave t = 11), and is lowered
    until some alpha below 1 gives a net of at most k' points (a coarser net is no better
    than the single point 0). alpha is the smallest (to 3 digits) whose net has at most
    k' points.
    """
    kp = max(1, math.isqrt(k))
    if t is None:
        t = _anonymous_t(kp)
    if alpha is None:
        alpha = _alpha_for_points(t, kp)
    return t, alpha


def _anonymous_t(kp: int) -> int:
    t = max(1, math.floor(math.log(kp) / math.log(math.log(kp)))) if kp >= _FORMULA_FROM else 2
    while t > 1 and _alpha_for_points(t, kp) >= 1.0:
        t -= 1
    return t


# ln x / ln ln x decreases up to x = e^e (about 15.2), where it equals e, and grows after.
_FORMULA_FROM = 16


def _net_points(t: int, alpha: float) -> int:
    return len(alpha_net(t, alpha))


def _alpha_for_points(t: int, points: int) -> float:
    """The smallest alpha (to 3 digits, at most 4) whose t-dimensional net has at most
    ``points`` points (4 when none has); the volume estimate only brackets the search,
    so no net much larger than ``points`` is ever built."""
    hi = 4.0
    if _net_points(t, hi) > points:
        return hi
    lo = max(1e-3, alpha_for_size(t, 8.0 * points + 64))  # the estimate is within a few percent there
    for _ in range(40):
        if hi - lo < 5e-4:
            break
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _net_points(t, mid) <= points else (mid, hi)
    alpha = math.ceil(hi * 1000) / 1000
    while _net_points(t, alpha) > points:  # the count is not monotone in alpha everywhere
        alpha = round(alpha + 0.001, 3)
    return alpha
