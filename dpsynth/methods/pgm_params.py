"""Method ``pgm``'s parameters: the :class:`PgmParams` a user sets (``--param``), their
checks, and the compression bounds select=aim uses by default. The method itself, its
measurement and synthesis, is :mod:`dpsynth.methods.pgm`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from .base import ParamError, param

__all__ = ["COMPRESS_EMPTY_SHARE", "COMPRESS_SHARE", "COMPRESS_VALUE_SHARE", "PgmParams"]

#: select=aim: the largest share of the records a merged group of rare values may hold, even
#: compress_threshold sds above its noisy sum (dpsynth.inference.compression.compression_maps).
#: Set on the tuning half (car, nist tx2019, rare-a at epsilon 0.1 and 1; docs/pgm.md,
#: "Compression of rare values"). select=mst keeps MST's rule (no bound): no bound tried there
#: was better on that half.
COMPRESS_SHARE = 0.15
#: select=aim with its default reading (compress_bound posterior: only values that look empty
#: merge, as runs in ordered columns; compression_maps' ``empty_only``): the group share. Set on
#: the tuning half of issue 27 §1/§2 session 37 and held out (docs/pgm.md, "Empty values pooled,
#: runs only where the schema says ordered"); the counts reading keeps COMPRESS_SHARE.
COMPRESS_EMPTY_SHARE = 0.05
#: select=aim: the largest share of the records one merged value may hold on its own, even
#: compress_threshold sds above its noisy count. Set on the same tuning half (5 seeds; docs/pgm.md,
#: "The per-value bound"): without it, values that may hold a real share of a small table's
#: column were merged at epsilon 0.1 and cost more than the merge saved. select=mst: no bound.
COMPRESS_VALUE_SHARE = 0.05

_AIM = {"select": "aim"}  # the parameters only AIM uses (the report leaves them out of an MST release's)


@dataclass(frozen=True, kw_only=True)
class PgmParams:
    """``select``: mst or aim. ``degree``: AIM's largest candidate marginal (2 or 3).
    ``units``: AIM's budget units (default 16 x columns, AIM's round count).
    ``max_model_cells``: AIM's limit on the junction tree's total cells (AIM's own is 80 MB
    of float64 = 1e7; ours is 1e6, see below). ``max_clique_cells``: candidates larger than
    this are never measured. ``iters``: the estimator's iteration cap for the released model.
    ``refit_iters``: its cap for AIM's refit after each round (warm-started from the previous
    round's model). ``noise_tol``: every fit also stops once 10 accepted steps together gained
    less than this share of the noise's expected loss (0: off; see dpsynth.inference).
    ``precision``: the fits' arithmetic, float32 ("single", about twice as fast, the same
    scores on the NIST tables) or float64; the released model's beliefs are float64 either way.
    ``compress``: merge each column's values whose noisy 1-way count is below
    ``compress_threshold`` times its noise sd into one value before selecting and measuring
    the larger marginals (MST's compression; 3 sds as in MST). ``compress_share``: merge only
    the smallest of those values, as many as keep the merged group's mass, ``compress_threshold``
    sds above its noisy sum, at most this share of the records (default: 0.05 for aim, 0.15 for
    aim with compress_bound counts, no bound for mst: MST's rule). ``compress_value_share``: and only values that hold, each on its
    own and ``compress_threshold`` sds above its noisy count, at most this share of the records
    (default: 0.05 for aim, no bound for mst). ``compress_bound``: what the group bound reads,
    "counts" (the noisy sum, biased low by selecting the smallest counts) or "posterior" (the sum
    of the values' posterior means given their column's counts, 5 posterior sds up; default: aim
    posterior, mst counts); with aim's posterior reading only the values that look empty merge,
    as runs of neighbours in the columns the schema orders (numeric, datetime), one value elsewhere. ``sampling``: "rounded"
    (each value's rows by randomised rounding of their expected count, per separator cell)
    or "iid" (every row drawn independently; for comparison).

    What bounds AIM's time, by construction: every estimator iteration costs a few passes over
    the junction tree's cells (at most ``max_model_cells``), and there are at most
    ``units`` refits of ``refit_iters`` iterations plus one fit of ``iters`` (a fit on a tree
    of size S with 1000 x S <= FIT_CELL_STEPS / units takes 1000 steps, see FIT_CELL_STEPS)."""

    select: Literal["mst", "aim"] = "mst"
    degree: int = param(3, "2 or 3 (aim only)", only=_AIM)
    units: int | None = param(None, "whole number >= 1, or none (aim only; none: 16 x columns)", only=_AIM)
    max_model_cells: int = param(1_000_000, "whole number >= 1 (aim only)", only=_AIM)
    max_clique_cells: int = param(1_000_000, "whole number >= 1; must be >= every column's code count")
    iters: int = param(1000, "whole number >= 1")
    refit_iters: int = param(30, "whole number >= 1 (aim only)", only=_AIM)
    noise_tol: float = param(0.03, "number >= 0 (0: run every iteration)")
    precision: Literal["single", "double"] = param("single", "single or double (the fits' float width)")
    compress: bool = param(True, "true or false (merge rare values before the larger marginals)")
    compress_threshold: float = param(3.0, "number >= 0, in noise sds of the 1-way counts")
    compress_share: float | None = param(
        None, f"number > 0, or none (aim: {COMPRESS_EMPTY_SHARE:g}, {COMPRESS_SHARE:g} with compress_bound=counts; "
        "mst: no bound): the largest share of the records a merged group may hold")
    compress_value_share: float | None = param(
        None, f"number > 0, or none (aim: {COMPRESS_VALUE_SHARE:g}, mst: no bound): the largest share of the "
        "records one merged value may hold")
    compress_bound: Literal["posterior", "counts"] | None = param(
        None, "posterior, counts or none (aim: posterior, mst: counts): what the group bound reads")
    sampling: Literal["rounded", "iid"] = param("rounded", "rounded or iid")

    def __post_init__(self) -> None:
        if self.select not in ("mst", "aim"):
            raise ParamError(f"parameter 'select' must be 'mst' or 'aim', got {self.select!r}")
        if self.degree not in (2, 3):
            raise ParamError(f"parameter 'degree' must be 2 or 3, got {self.degree!r}")
        if self.units is not None and self.units < 1:
            raise ParamError(f"parameter 'units' must be >= 1, got {self.units!r}")
        for name in ("max_model_cells", "max_clique_cells", "iters", "refit_iters"):
            if getattr(self, name) < 1:
                raise ParamError(f"parameter {name!r} must be >= 1, got {getattr(self, name)!r}")
        if self.precision not in ("single", "double"):
            raise ParamError(f"parameter 'precision' must be 'single' or 'double', got {self.precision!r}")
        if not (isinstance(self.noise_tol, (int, float)) and math.isfinite(self.noise_tol) and self.noise_tol >= 0):
            raise ParamError(f"parameter 'noise_tol' must be a number >= 0, got {self.noise_tol!r}")
        if not isinstance(self.compress, bool):
            raise ParamError(f"parameter 'compress' must be true or false, got {self.compress!r}")
        t = self.compress_threshold
        if isinstance(t, bool) or not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0):
            raise ParamError(f"parameter 'compress_threshold' must be a number >= 0, got {t!r}")
        for name in ("compress_share", "compress_value_share"):  # a positive number, or none (the default per select)
            f = getattr(self, name)
            if f is not None and (isinstance(f, bool) or not (isinstance(f, (int, float)) and not math.isnan(f) and f > 0)):
                raise ParamError(f"parameter {name!r} must be a number > 0, got {f!r}")
        if self.compress_bound not in (None, "posterior", "counts"):
            raise ParamError(f"parameter 'compress_bound' must be 'posterior', 'counts' or none, got {self.compress_bound!r}")
        if self.sampling not in ("rounded", "iid"):
            raise ParamError(f"parameter 'sampling' must be 'rounded' or 'iid', got {self.sampling!r}")
