"""Default t, alpha and b from the paper's error bound (Section 5.8), and our tuned ones.

The paper's choice (kept as ``preset="paper"``), for n records, p coordinates and the
budget eps_y of the means:

* t = max(1, floor(kappa ln n / ln ln n)) with kappa = 1/3 (Remark 5.16);
* alpha = 1 / sqrt(t): the net term then matches the 1/sqrt(t) projection term;
* b minimises the two b-dependent terms of Theorem 5.9's bound: the noise on the means,
  sum_j w_j ||r_j||_2 ~ sqrt(2p) * 2 R / (b eps_y), against the mass of damped cells,
  2 s b / n; so b = sqrt(sqrt(2 p) R n / (s eps_y)) (R the records' l1 radius).

``preset="tuned"`` keeps the same b rule but picks the net so that the expected cell
size n / s stays near the level where the means' noise is small: it takes the largest
t <= t_cap and then the smallest alpha whose net has at most
s_max = n eps_y / (c sqrt(2 p) R) cells (c = 8: every occupied cell's mean then carries
noise of l2 size about 1/8 of a record's norm). See docs/microaggregation.md.

For the anonymous method (Theorem 4.1) the net is chosen for k' = floor(sqrt(k)) cells:
t = max(1, floor(ln k' / ln ln k')) when k' >= 3, and the smallest alpha whose net has at
most k' points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .net import alpha_for_size, estimate_net_size

__all__ = ["Design", "paper_design", "tuned_design", "damping_level", "anonymous_net"]


@dataclass(frozen=True, kw_only=True)
class Design:
    t: int
    alpha: float
    b: float


def damping_level(n: float, p: int, l1_radius: float, s: float, eps_y: float) -> float:
    return max(1.0, math.sqrt(math.sqrt(2.0 * p) * l1_radius * max(n, 1.0) / (max(s, 1.0) * eps_y)))


def _t_paper(n: float, kappa: float) -> int:
    if n <= math.e ** math.e:
        return 1
    return max(1, math.floor(kappa * math.log(n) / math.log(math.log(n))))


def paper_design(n: float, p: int, l1_radius: float, eps_y: float, *, kappa: float = 1 / 3,
                 t: int | None = None, alpha: float | None = None, b: float | None = None,
                 t_cap: int = 8) -> Design:
    tt = min(t if t is not None else _t_paper(n, kappa), t_cap, p)
    a = alpha if alpha is not None else 1.0 / math.sqrt(tt)
    s = 1.3 * estimate_net_size(tt, a) + 1
    return Design(t=tt, alpha=a, b=b if b is not None else damping_level(n, p, l1_radius, s, eps_y))


def tuned_design(n: float, p: int, l1_radius: float, eps_y: float, *, t: int | None = None,
                 alpha: float | None = None, b: float | None = None, t_cap: int = 4,
                 noise_ratio: float = 8.0) -> Design:
    s_max = max(3.0, max(n, 1.0) * eps_y / (noise_ratio * math.sqrt(2.0 * p) * l1_radius))
    if t is None:
        t = 1
        for cand in range(1, min(t_cap, p) + 1):
            if alpha_for_size(cand, s_max) <= 1.0:
                t = cand
    tt = min(t, p)
    a = alpha if alpha is not None else max(0.05, min(2.0, alpha_for_size(tt, s_max)))
    s = 1.3 * estimate_net_size(tt, a) + 1
    return Design(t=tt, alpha=a, b=b if b is not None else damping_level(n, p, l1_radius, s, eps_y))


def anonymous_net(k: int, t: int | None = None, alpha: float | None = None) -> tuple[int, float]:
    kp = max(1, math.isqrt(k))
    if t is None:
        t = max(1, math.floor(math.log(kp) / math.log(math.log(kp)))) if kp >= 3 else 1
    if alpha is None:
        alpha = min(2.0, alpha_for_size(t, max(kp, 3)))
    return t, alpha
