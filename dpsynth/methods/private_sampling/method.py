"""Method ``private-sampling``: noiseless private sampling on the Boolean cube.

Wraps :mod:`.algorithm` (Boedihardjo, Strohmer and Vershynin) for the release
pipeline. The encoded table's one-hot view is the point set in {0,1}^p; the
density h* fitted to it is private and never leaves this module; only the k sampled
points are the DP output (Theorem 12.2: pure epsilon-DP for k up to a bound that
depends on n, p, d, m, delta and Delta).

Honesty about the bound (see the practical paper): for real tables the theorem covers
a tiny k, so a release asking for usable row counts is refused before anything runs,
with the largest k the theorem allows. ``heuristic=true`` runs it anyway; the manifest
then states in plain words that the release is NOT differentially private.

Assumptions made explicit:

* like the paper, the method treats the number of input records n as public (the
  theorem is stated for neighbouring datasets of equal size: replace one record). The
  data owner must declare it with ``public_n=N``; every file then says "n declared
  public by the data owner; neighbours: replace one record". The theorem is checked
  against the declared n at plan time, before any row is read, so no refusal and no
  published number depends on the private n; an input whose size differs from the
  declaration is refused (the declaration, not the data, is then wrong). Heuristic
  mode needs no declaration and is labelled NOT differentially private everywhere;
* ``Delta`` bounds the data density (density <= Delta / 2^p); it is public knowledge
  the user must supply. dpsynth never derives it from the rows (2^p ||f_n||_inf, as in
  the paper's experiments, is not private). In heuristic mode it defaults to m, which
  removes the upper box constraint on h*.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pandas as pd

from ...rows.encoding import EncodedTable, code_dtype, onehot
from ...privacy.budget import Budget, Charge, Ledger
from ...schema import Schema
from ..base import Measurement, MethodBase, ParamError, PrivacyStatement, params_to_dict
from .algorithm import private_sample
from .bounds import check_release, epsilon_for_k, n_walsh
from .params import PrivateSamplingParams

__all__ = ["N_PUBLIC", "NOT_DP", "REPLACE_ONE", "PrivateSamplingMethod", "bits_to_codes", "walsh_refusal"]

STAGE = "measure/private-sampling"
# Theorem 12.2 compares tables of equal size (n is public): neighbours differ in one record's values.
N_PUBLIC = "n declared public by the data owner; neighbours: replace one record"
REPLACE_ONE = PrivacyStatement(kind="dp", neighbours="replace one record", detail=N_PUBLIC)
NOT_DP = "This release is NOT differentially private"


def _widths(schema: Schema, compact: bool) -> list[int]:
    return [1 if compact and card == 2 else card for card in schema.cardinalities]


def bits_to_codes(
    bits: np.ndarray, schema: Schema, rng: np.random.Generator, compact: bool = False
) -> EncodedTable:
    """One-hot cube points back to codes (post-processing).

    A cube point need not be a valid one-hot row: a column block with several bits set
    takes one of them at random, and a block with none takes a code drawn from the
    block's valid rows in the sample (uniform if there are none).
    """
    k = bits.shape[0]
    codes = np.empty((k, len(schema.columns)), dtype=code_dtype(schema.cardinalities))
    start = 0
    for j, (card, width) in enumerate(zip(schema.cardinalities, _widths(schema, compact))):
        if width == 1:  # a two-value column stored as its code bit
            codes[:, j] = bits[:, start]
            start += 1
            continue
        block = bits[:, start : start + card].astype(bool)
        start += card
        ones = block.sum(axis=1)
        # random choice among set bits: argmax of random keys on the set positions
        keys = np.where(block, rng.random(block.shape), -1.0)
        chosen = keys.argmax(axis=1)
        valid = ones == 1
        empty = ones == 0
        if empty.any():
            counts = np.bincount(chosen[valid], minlength=card).astype(float)
            p = counts / counts.sum() if counts.sum() > 0 else np.full(card, 1.0 / card)
            chosen[empty] = rng.choice(card, size=int(empty.sum()), p=p)
        codes[:, j] = chosen
    return EncodedTable(schema=schema, codes=codes)


def walsh_refusal(params: PrivateSamplingParams, schema: Schema, p: int, L: int) -> str:
    """The refusal of an ``m`` below the Walsh basis, with the changes that would pass it
    (public: schema and parameters only)."""
    fixes = [f"pass --param m={L} or more"]
    if params.d > 1:
        fixes.append(f"lower d to {params.d - 1} (needs m >= {n_walsh(p, params.d - 1)})")
    if not params.compact and any(card == 2 for card in schema.cardinalities):
        p_c = sum(_widths(schema, True))
        fixes.append(f"pass --param compact=true ({p_c} features, needs m >= {n_walsh(p_c, params.d)})")
    fixes.append("drop columns or merge categories in the schema")
    return (f"parameter 'm' = {params.m} is below the {L} Walsh functions of degree <= {params.d} on the {p} "
            f"one-hot features of schema {schema.name!r}, so the reduced space can never be well conditioned. "
            f"To change: {'; or '.join(fixes)}. Even then Theorem 12.2 certifies few or no rows of a real "
            "table (docs/private-sampling.md): for a DP synthetic table use --method pgm or sds")


class PrivateSamplingMethod(MethodBase):
    """Method ``private-sampling``: noiseless private sampling on the Boolean cube."""

    name: ClassVar[str] = "private-sampling"
    params_type: ClassVar[type] = PrivateSamplingParams
    takes_rows_as: ClassVar[str] = "k"
    provides_marginals: ClassVar[bool] = False  # only sampled points: nothing to correct towards
    requires: ClassVar[tuple[str, ...]] = ("cvxpy",)  # its LP and QP (the `solvers` extra)
    guarantee: ClassVar[PrivacyStatement] = PrivacyStatement(
        kind="dp", neighbours=REPLACE_ONE.neighbours,
        detail="the data owner declares n public (public_n); pure epsilon-DP only when Theorem 12.2 covers "
               "k rows (else refused); heuristic=true runs it anyway and the release is then NOT DP")

    def __init__(self, params: PrivateSamplingParams):
        """Takes the parameters; refuses, before anything runs, a release they leave unstated
        (the row count k, the public record count, the density bound Delta)."""
        if params.k is None:
            raise ParamError("private-sampling needs the number of rows to release: pass --rows K (or --param k=K)")
        if params.public_n is None and not params.heuristic:
            raise ParamError(
                "private-sampling treats the record count n as public (neighbours: replace one record): "
                "the data owner must declare it with --param public_n=N (or run heuristic=true, NOT DP)"
            )
        if params.Delta is None and not params.heuristic:
            raise ParamError(
                "private-sampling needs Delta, a public bound on the data density (density <= Delta/2^p); "
                "dpsynth does not derive it from the rows. Pass --param Delta=..."
            )
        self.params = params

    def plan(self, schema: Schema, budget: Budget) -> tuple[Charge, ...]:
        """One pure-epsilon charge; refuses an m below the Walsh basis and, with a declared n,
        a k that Theorem 12.2 does not cover (before any row is read)."""
        p = sum(_widths(schema, self.params.compact))
        L = n_walsh(p, self.params.d)
        if self.params.m < L:
            raise ParamError(walsh_refusal(self.params, schema, p, L))
        detail = {"theorem": "12.2", "k": self.params.k, "features": p, "walsh_functions": L}
        if self.params.public_n is not None:
            # Checked now, on the declared n: refuses before any row is read (or, in
            # heuristic mode, only records what the theorem certifies).
            check_release(int(self.params.public_n), p, self.params, float(budget.epsilon))
            detail["public_n"] = int(self.params.public_n)
        # Theorem 12.2 gives pure epsilon-DP: charged by basic composition.
        return (Charge(stage=STAGE, epsilon=float(budget.epsilon), mechanism="private-sampling", detail=detail),)

    def statement(self, p: int, epsilon: float) -> tuple[PrivacyStatement, float | None]:
        """The guarantee, from public information only (declared n, p, parameters, epsilon),
        and the epsilon Theorem 12.2 certifies for the declared n (None without one)."""
        core = self.params
        if self.params.public_n is None:
            return PrivacyStatement(kind="heuristic", detail=(
                f"{NOT_DP} at epsilon = {epsilon:g}: heuristic mode without a declared record count, "
                "so Theorem 12.2 was not checked.")), None
        n = int(self.params.public_n)
        certified = epsilon_for_k(n, p, core.d, core.m, core.delta, core.density_bound, core.rows)
        if certified <= epsilon * (1 + 1e-12):
            return REPLACE_ONE, certified
        return PrivacyStatement(kind="heuristic", detail=(
            f"{NOT_DP} at epsilon = {epsilon:g}: it was run in heuristic mode; Theorem 12.2 certifies "
            f"epsilon = {certified:.4g} for k = {core.rows} rows and the declared n = {n}. {N_PUBLIC}.")), certified

    def measure(self, codes: EncodedTable, ledger: Ledger, rng: np.random.Generator) -> Measurement:
        """Samples k points of the one-hot cube from the private density h*; only the points
        are kept (table ``sample``), with the statement the declared n supports."""
        X, features = onehot(codes, binary_as_bit=self.params.compact)
        n, p = X.shape
        if self.params.public_n is not None and n != int(self.params.public_n):
            # Under the declared model n is public, so this refusal reveals nothing it does not.
            raise ValueError("the input's record count differs from the declared public_n: "
                             "the guarantee would rest on a false declaration (nothing was sampled); "
                             "declare the input's exact record count with --param public_n=N")
        core = self.params
        epsilon = float(ledger.budget.epsilon)
        statement, certified = self.statement(p, epsilon)
        charge = ledger.spend(STAGE)
        result = private_sample(X, core, rng)
        bits = pd.DataFrame(result.samples, columns=[f"f{i}" for i in range(p)])
        meta = {
            "features": [f"{c}={k}" for c, k in features],
            "public_n": self.params.public_n,
            "epsilon_theorem": certified,  # from the declared n only (None without one)
            "heuristic": core.heuristic,
            "certified": statement.differentially_private,
            "sigma_min": result.diagnostics.sigma_min,
            "conditioning_tries": result.diagnostics.conditioning_tries,
            "walsh_functions": result.diagnostics.n_walsh,
        }
        return Measurement(method=self.name, params=params_to_dict(self.params), charges=(charge,),
                           statement=statement, tables={"sample": bits}, meta=meta)

    def synthesize(self, m: Measurement, schema: Schema, rows: int | None, rng: np.random.Generator) -> EncodedTable:
        """The sampled points back to codes (post-processing), resampled to ``rows`` if asked."""
        bits = m.tables["sample"].to_numpy(dtype=np.uint8)
        enc = bits_to_codes(bits, schema, rng, compact=bool(m.params.get("compact", False)))
        if rows is None or rows == enc.n:
            return enc
        pick = rng.integers(0, enc.n, size=rows)
        return EncodedTable(schema=schema, codes=enc.codes[pick])
