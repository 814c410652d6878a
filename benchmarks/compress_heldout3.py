"""A second, independent held-out set for select=aim's value compression (issue 27 §1/§2, session 38).

Five generated tables (``HELD3``) of shapes the earlier held-out sets (``compress_rules.HELD``,
``HELD2``) do not cover, fixed and committed BEFORE any run on them, run once per rule with
nothing tuned: the product default (``e5``) against no compression (``nc``), p5 beside them for
comparison only. ``compress_rules.load_any`` and ``ordered_of`` read them from here, so they run
as every other table: ``python benchmarks/compress_rules.py --data hg-gaps,... --rules e5,nc,p5``.
docs/pgm.md, "A second held-out set (session 38)", has the table.

Every table draws 5 latent classes and, per class, each column's distribution
(``compress_rules._class_table``), so every pair of columns is related through the class.
Seeds 51-55, which no other table uses.
"""

from __future__ import annotations

import numpy as np

from benchmarks.compress_rules import _class_table, _held2_probs

#: rows, seed, shape (``HELD3_SHAPES``).
HELD3 = {"hg-gaps": (20_000, 51, "gaps"), "hg-long": (60_000, 52, "long"), "hg-small": (1_500, 53, "small"),
         "hg-cats": (40_000, 54, "cats"), "hg-months": (50_000, 55, "months")}
#: The columns per shape, beside ``HELD2_SHAPES``' kinds ("s", "b", "g", "zr", "mx"):
#: ("gy", v, missing) years with missing years: a wide bell per class, ``missing`` interior codes
#: truly empty in every class (gaps inside the support), so real small values in the tails sit
#: among empty codes; ("ah", v) ages heaped on multiples of 5 (x3-8 per class), the other codes
#: cut at 2.5 sds of the class's bell, the multiples of 5 kept beyond it (a real small heap among
#: empty codes); ("lt", v, lo, hi) a high-cardinality ordered column whose codes below lo x v and
#: from hi x v on are truly empty in every class (long empty tails on both sides), a bell per
#: class over a floor inside; ("cr", v, rare) categorical, ``rare`` values at random codes
#: holding 0.1-0.4% of each class's rows (real and rare), the rest Dirichlet(1) over a floor:
#: no value empty; ("dm", v, lead) months (v / 12 years): a trend and a season per class, 2-3
#: dense years (x8-25 per class), the first ``lead`` months truly empty (collection began late).
HELD3_SHAPES: dict[str, list[tuple]] = {
    "gaps": [("gy", 50, 12), ("s", 3), ("ah", 85), ("s", 4), ("gy", 35, 8), ("s", 6), ("ah", 70), ("s", 2),
             ("gy", 60, 15), ("s", 5)],
    "long": [("lt", 300, 0.35, 0.7), ("s", 4), ("lt", 150, 0.2, 0.5), ("s", 3), ("lt", 220, 0.4, 0.75), ("s", 5),
             ("lt", 120, 0.25, 0.6), ("s", 2)],
    "small": [("s", 2), ("b", 30), ("s", 4), ("g", 20), ("zr", 15), ("s", 3), ("mx", 25, 6, 6), ("b", 40), ("s", 5),
              ("gy", 25, 6), ("s", 2), ("zr", 20), ("s", 7), ("ah", 40), ("s", 3), ("g", 16), ("s", 4),
              ("mx", 18, 4, 5)],
    "cats": [("cr", 12, 3), ("cr", 30, 8), ("cr", 5, 1), ("cr", 40, 10), ("cr", 8, 2), ("cr", 20, 5), ("cr", 3, 1),
             ("cr", 25, 6), ("cr", 6, 2), ("cr", 16, 4), ("cr", 35, 9), ("cr", 10, 3)],
    "months": [("dm", 240, 12), ("s", 3), ("s", 5), ("b", 30), ("s", 2), ("dm", 120, 0), ("s", 4), ("g", 24),
               ("s", 6)],
}
#: The kinds whose codes are in order (declared numeric in the benchmark's schema; "dm" is a
#: month index, declared numeric as the benchmark declares every ordered column).
ORDERED3 = ("b", "g", "gy", "ah", "lt", "dm")


def _bell(v: np.ndarray, lo: float, hi: float, sd_lo: float, sd_hi: float, classes: int,
          rng: np.random.Generator) -> np.ndarray:
    """Per class, the standardised distance of each code from a bell's centre (centre uniform in
    [lo, hi] x v.size, sd uniform in [sd_lo, sd_hi] x v.size)."""
    mu, sd = rng.uniform(lo, hi, classes) * v.size, rng.uniform(sd_lo, sd_hi, classes) * v.size
    return (v[None, :] - mu[:, None]) / sd[:, None]


def _held3_probs(spec: tuple, classes: int, rng: np.random.Generator) -> np.ndarray:
    """Per latent class, a distribution over a session-38 held-out column's values (``HELD3_SHAPES``)."""
    kind, size = spec[0], spec[1]
    v = np.arange(size)
    if kind in ("s", "b", "g", "zr", "mx"):
        return _held2_probs(spec, classes, rng)
    if kind == "gy":
        p = np.exp(-0.5 * _bell(v, 0.3, 0.7, 0.15, 0.3, classes, rng) ** 2)
        p[:, 1 + rng.choice(size - 2, spec[2], replace=False)] = 0.0
    elif kind == "ah":
        u = _bell(v, 0.3, 0.7, 0.12, 0.2, classes, rng)
        heap = np.where(v % 5 == 0, 1.0, 0.0)[None, :] * rng.uniform(3.0, 8.0, (classes, 1))
        p = np.where(np.abs(u) <= 2.5, np.exp(-0.5 * u**2), 0.0) * (1.0 + heap) + heap * 0.02
    elif kind == "lt":
        lo, hi = int(spec[2] * size), int(spec[3] * size)
        w = np.arange(hi - lo)
        inner = np.exp(-0.5 * _bell(w, 0.2, 0.8, 0.15, 0.3, classes, rng) ** 2) + 0.01
        p = np.zeros((classes, size))
        p[:, lo:hi] = inner
    elif kind == "cr":
        rare = rng.permutation(size)[: spec[2]]
        rest = np.setdiff1d(v, rare)
        p = np.zeros((classes, size))
        p[:, rare] = rng.uniform(0.001, 0.004, (classes, rare.size))
        p[:, rest] = (rng.dirichlet(np.full(rest.size, 1.0), size=classes) + 0.02) / (1.0 + 0.02 * rest.size)
        p[:, rest] *= (1.0 - p[:, rare].sum(axis=1, keepdims=True))
    else:  # "dm": months with a trend, a season and a few dense years
        years = size // 12
        dense = rng.choice(np.arange(spec[2] // 12 + 1, years), 3 if years >= 15 else 2, replace=False)
        t = v / size
        trend = 1.0 + rng.uniform(-0.5, 1.5, (classes, 1)) * t[None, :]
        season = 1.0 + 0.3 * np.sin(2 * np.pi * v[None, :] / 12 + rng.uniform(0, 2 * np.pi, (classes, 1)))
        boost = np.ones((classes, size))
        for y in dense:
            boost[:, 12 * y: 12 * y + 12] = rng.uniform(8.0, 25.0, (classes, 1))
        p = trend * season * boost
        p[:, : spec[2]] = 0.0
    return p / p.sum(axis=1, keepdims=True)


def held3_table(n: int, seed: int, shape: str) -> tuple[np.ndarray, list[int]]:
    """A session-38 held-out table of ``n`` rows (``HELD3_SHAPES``): 5 latent classes, as
    ``compress_rules.wide_table``."""
    return _class_table(n, seed, HELD3_SHAPES[shape], _held3_probs)


def held3_ordered(name: str) -> dict[str, int]:
    """Per column of held-out table ``name`` whose codes are in order (``ORDERED3``), its number of codes."""
    return {f"w{j}": spec[1] for j, spec in enumerate(HELD3_SHAPES[HELD3[name][2]]) if spec[0] in ORDERED3}
