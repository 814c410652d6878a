"""NIST CRC (SDNist v2.3.0) k-marginal score of a synthetic table against its target.

:func:`nist_kmarginal_score` on DataFrames of raw values, with SDNist's binning
(percentile-rank bins of the target data, log-spaced DENSITY bins), counted with the
engine of :mod:`dpsynth.rows.counting`. It reads real rows: benchmarks and private internal
reports only.
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Any, Sequence, TYPE_CHECKING

import numpy as np

from ..rows.counting import Subset, iter_marginals_many

if TYPE_CHECKING:  # imported where used, so a release from codes loads neither pandas nor pyarrow
    import pandas as pd

__all__ = [
    "NIST_PERCENTILE_FEATURES",
    "NIST_DEMOGRAPHIC_FEATURES",
    "NIST_DENSITY_MAX",
    "nist_encode",
    "nist_marginal_tvds",
    "nist_kmarginal_score",
]

#: Features put in 20 percentile-rank bins of the target data.
NIST_PERCENTILE_FEATURES = ("AGEP", "POVPIP", "PINCP", "PWGTP", "WGTP")
#: SDNist's "demographic" feature set (no PUMA: 2-way marginals).
NIST_DEMOGRAPHIC_FEATURES = (
    "AGEP", "SEX", "MSP", "RAC1P", "HOUSING_TYPE", "OWN_RENT", "EDU", "PINCP_DECILE", "DVET", "DEYE",
)
#: DENSITY maximum from the excerpts' public data_dictionary.json; SDNist's log bins end 500 above it.
NIST_DENSITY_MAX = 52864.7
_NIST_MISSING = "N"
_NIST_POVERTY_TOP = 501  # POVPIP "income above 5 x poverty line": a bin of its own in SDNist
_PERCENTILE_BINS = 20


def _text(series: pd.Series) -> np.ndarray:
    """Cells as stripped text; nulls become the missing token."""
    s = series.astype("string").fillna(_NIST_MISSING).str.strip()
    return s.to_numpy(dtype=object)


def _whole_numbers(text: np.ndarray) -> np.ndarray:
    """Numbers truncated towards zero, as SDNist's ``astype(int)`` does; NaN if not a number."""
    import pandas as pd
    x = pd.to_numeric(pd.Series(text, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    return np.trunc(x)


def _percentile_codes(
    name: str, target: np.ndarray, synthetic: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """Percentile-rank bins of the target, and the same value ranges applied to synthetic.

    Codes 0..19 are the bins, 20 is POVPIP's 501 bucket, 21 (or 20) the missing token.
    Target: among its non-missing values, pct = average rank / count, bin =
    floor(20 pct) (19 when pct is 1). Synthetic: a value goes to the first target bin
    whose largest target value it does not exceed (the last bin takes everything
    above). An unparsable cell counts as missing.
    """
    import pandas as pd
    top_code = _PERCENTILE_BINS if name == "POVPIP" else None
    missing_code = _PERCENTILE_BINS + (1 if top_code is not None else 0)
    card = missing_code + 1

    t_num = _whole_numbers(target)
    t_code = np.full(target.shape[0], missing_code, dtype=np.int64)
    special = (target == str(_NIST_POVERTY_TOP)) if top_code is not None else np.zeros(target.shape[0], bool)
    regular = ~np.isnan(t_num) & (target != _NIST_MISSING) & ~special
    if top_code is not None:
        t_code[special] = top_code
    vals = t_num[regular]
    bin_max: list[tuple[int, float]] = []
    if vals.size:
        pct = pd.Series(vals).rank(method="average", pct=True).to_numpy()
        bins = np.where(pct < 1, np.floor(_PERCENTILE_BINS * pct), _PERCENTILE_BINS - 1).astype(np.int64)
        t_code[regular] = bins
        for b in np.unique(bins):
            bin_max.append((int(b), float(vals[bins == b].max())))
    if special.any():
        bin_max.append((top_code, float(_NIST_POVERTY_TOP)))

    s_num = _whole_numbers(synthetic)
    s_code = np.full(synthetic.shape[0], missing_code, dtype=np.int64)
    numeric = ~np.isnan(s_num) & (synthetic != _NIST_MISSING)
    if bin_max:
        labels = np.array([b for b, _ in bin_max], dtype=np.int64)
        upper = np.array([m for _, m in bin_max], dtype=np.float64)
        s_code[numeric] = labels[np.searchsorted(upper[:-1], s_num[numeric], side="left")]
    return t_code, s_code, card


def _density_edges(density_max: float) -> np.ndarray:
    # SDNist: 21 log-spaced edges from 10 to max + 500, the first 8 dropped and
    # [0, 150] put in front (bottom-codes sparse PUMAs): 14 right-closed bins.
    n_max = density_max + 500.0
    logs = np.logspace(1.0, math.log10(n_max), num=_PERCENTILE_BINS + 1)
    return np.concatenate([[0.0, 150.0], logs[8:]])


def _density_codes(text: np.ndarray, density_max: float) -> tuple[np.ndarray, int]:
    """Log-spaced DENSITY bins; code ``len(bins)`` marks rows SDNist leaves out.

    Values are truncated to whole numbers, negatives raised to 0, values above
    max + 500 lowered to max + 400. Bins are right-closed, so 0 falls in none: SDNist
    (pandas ``cut`` then ``groupby``) drops such rows from the marginal while still
    dividing by the full row count; so do we. Unparsable cells are dropped alike.
    """
    edges = _density_edges(density_max)
    n_bins = edges.size - 1
    x = _whole_numbers(text)
    n_max = density_max + 500.0
    x = np.where(x < 0, 0.0, x)
    x = np.where(x > n_max, n_max - 100.0, x)
    code = np.searchsorted(edges, x, side="left") - 1
    dropped = np.isnan(x) | (code < 0) | (code >= n_bins)
    return np.where(dropped, n_bins, code).astype(np.int64), n_bins + 1


def _canonical(text: np.ndarray) -> np.ndarray:
    """Categorical cells as written, except that whole numbers lose a trailing ``.0``."""
    import pandas as pd
    uniques, inverse = np.unique(text.astype(str), return_inverse=True)
    num = pd.to_numeric(pd.Series(uniques, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    canon = np.array(
        [
            str(int(v)) if math.isfinite(v) and float(v).is_integer() and u.strip() != "" else u
            for u, v in zip(uniques, num)
        ],
        dtype=object,
    )
    return canon[inverse]


def nist_encode(
    target: pd.DataFrame,
    synthetic: pd.DataFrame,
    features: Sequence[str],
    *,
    density_max: float = NIST_DENSITY_MAX,
) -> tuple[np.ndarray, np.ndarray, tuple[int, ...], tuple[int | None, ...]]:
    """SDNist's binning of raw values into integer codes shared by both tables.

    Returns (target codes, synthetic codes, cardinalities, dropped code per column);
    a row holding a column's dropped code (only DENSITY has one) is left out of every
    marginal with that column but still counted in the normaliser, as in SDNist.
    """
    features = list(features)
    for frame, label in ((target, "target"), (synthetic, "synthetic")):
        absent = [f for f in features if f not in frame.columns]
        if absent:
            raise ValueError(f"{label} data lacks feature(s) {absent}")
    n_t, n_s = len(target), len(synthetic)
    t_codes = np.empty((n_t, len(features)), dtype=np.int64)
    s_codes = np.empty((n_s, len(features)), dtype=np.int64)
    cards: list[int] = []
    dropped: list[int | None] = []
    for j, f in enumerate(features):
        t_text, s_text = _text(target[f]), _text(synthetic[f])
        if f in NIST_PERCENTILE_FEATURES:
            tc, sc, card = _percentile_codes(f, t_text, s_text)
            drop = None
        elif f == "DENSITY":
            both, card = _density_codes(np.concatenate([t_text, s_text]), density_max)
            tc, sc = both[:n_t], both[n_t:]
            drop = card - 1
        else:
            both_text = _canonical(np.concatenate([t_text, s_text]))
            cats, both = np.unique(both_text.astype(str), return_inverse=True)
            tc, sc, card = both[:n_t], both[n_t:], max(1, cats.size)
            drop = None
        t_codes[:, j], s_codes[:, j] = tc, sc
        cards.append(int(card))
        dropped.append(drop)
    return t_codes, s_codes, tuple(cards), tuple(dropped)


def _nist_marginals(
    features: Sequence[str], group: str | None, exclude: Sequence[str], seed: int,
    all_pairs_below: int, random_pairs: int,
) -> list[tuple[str, ...]]:
    cols = sorted(f for f in dict.fromkeys(features) if f != group and f not in set(exclude))
    if not cols:
        raise ValueError("no feature left to score")
    if len(cols) == 1:
        pairs: list[tuple[str, ...]] = [(cols[0],)]
    elif len(cols) < all_pairs_below:
        pairs = list(combinations(cols, 2))
    else:
        rng = np.random.default_rng(seed)
        draws = [rng.choice(len(cols), size=2, replace=False) for _ in range(random_pairs)]
        pairs = [(cols[i], cols[j]) for i, j in draws]
    with_group = group is not None and group in features
    return [((group,) + pr) if with_group else pr for pr in pairs]


def nist_marginal_tvds(
    target: pd.DataFrame,
    synthetic: pd.DataFrame,
    features: Sequence[str] | None = None,
    *,
    group: str | None = "PUMA",
    exclude: Sequence[str] = (),
    seed: int = 0,
    all_pairs_below: int = 30,
    random_pairs: int = 200,
    density_max: float = NIST_DENSITY_MAX,
) -> list[tuple[tuple[str, ...], float]]:
    """TVD of each marginal the NIST k-marginal score averages, as ``(features, tvd)``.

    Marginals: every pair of the features other than ``group`` (when there are fewer
    than ``all_pairs_below``; otherwise ``random_pairs`` random pairs of two distinct
    features drawn with ``seed``), each taken together with ``group`` when ``group`` is
    among the features (3-way). Densities are counts / row count, as in SDNist. The
    same marginal drawn twice counts twice.
    """
    features = list(target.columns) if features is None else list(features)
    marginals = _nist_marginals(features, group, exclude, seed, all_pairs_below, random_pairs)
    used = list(dict.fromkeys(f for m in marginals for f in m))
    t_codes, s_codes, cards, dropped = nist_encode(target, synthetic, used, density_max=density_max)
    if t_codes.shape[0] == 0 or s_codes.shape[0] == 0:
        raise ValueError("target and synthetic data need at least one row each")
    position = {f: j for j, f in enumerate(used)}
    subsets = [tuple(sorted(position[f] for f in m)) for m in marginals]
    found: dict[Subset, float] = {}
    for s, (t, q) in iter_marginals_many([t_codes, s_codes], cards, subsets):
        t = t.astype(np.float64)
        q = q.astype(np.float64)
        for axis, j in enumerate(s):
            if dropped[j] is not None:
                cut = (slice(None),) * axis + (dropped[j],)
                t[cut] = 0.0
                q[cut] = 0.0
        found[s] = 0.5 * float(np.abs(t / t_codes.shape[0] - q / s_codes.shape[0]).sum())
    return [(m, found[s]) for m, s in zip(marginals, subsets)]


def nist_kmarginal_score(
    target: pd.DataFrame,
    synthetic: pd.DataFrame,
    features: Sequence[str] | None = None,
    **options: Any,
) -> float:
    """NIST SDNist k-marginal score: ``1000 * (1 - mean TVD)`` over the SDNist marginals.

    ``target`` and ``synthetic`` hold raw values (read the excerpts with ``dtype=str,
    keep_default_na=False``; the missing token is ``N``). ``features`` defaults to the
    target's columns, e.g. :data:`NIST_DEMOGRAPHIC_FEATURES`. Options as in
    :func:`nist_marginal_tvds` (``exclude=("INDP",)`` reproduces v2.3.0's code,
    which also leaves INDP out of the pairs). SDNist reports ``int(score)``.
    """
    tvds = nist_marginal_tvds(target, synthetic, features, **options)
    return 1000.0 * (1.0 - float(np.mean([v for _, v in tvds])))
