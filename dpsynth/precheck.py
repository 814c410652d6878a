"""Public checks that :func:`dpsynth.pipeline.prepare` runs before the first charge.

Everything here reads only public things: the schema, the method class and its
parameters, the planned charges, the command-line numbers and the input file's
header or Parquet schema (never a row). A problem found here raises before any
budget is spent (exit 2); a problem found after measuring would waste the budget.

* :func:`check_options`: every post-processing option is compatible with the method,
  decided from the method class, not from a measurement;
* :func:`check_rows`: the synthetic table of a method that holds it whole fits in memory
  (``--rows``, or the input's row count from Parquet metadata, against a stated limit,
  ``DPSYNTH_MAX_TABLE_BYTES``); methods that stream their synthesis are not limited;
* :func:`check_disk`: the synthetic files of ``--rows`` (or of the input's row count) fit
  the disks' free space;
* :func:`noise_warnings`: an epsilon so large that the counts are effectively exact
  is allowed, but said out loud (CLI warning and a manifest note).
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

from .privacy.budget import Charge
from .schema import Schema

__all__ = [
    "BYTES_PER_CELL",
    "DEFAULT_MAX_TABLE_BYTES",
    "EXACT_NOISE_SD",
    "PrecheckError",
    "check_disk",
    "check_options",
    "check_rows",
    "max_table_bytes",
    "min_noise_sd",
    "noise_sds",
    "noise_warnings",
    "pooled_noise_sd",
]

#: Peak bytes per synthetic cell across synthesize, decode and the CSV writer (codes as
#: int64, decoded values, one Python string per cell for the CSV), rounded up.
BYTES_PER_CELL = 128
DEFAULT_MAX_TABLE_BYTES = 4 << 30
#: Below this noise standard deviation (in counts) a noisy count is effectively exact.
EXACT_NOISE_SD = 0.5


class PrecheckError(ValueError):
    """A public problem found before any charge (names the parameter)."""


def check_options(method_cls: Any, options: Mapping[str, Any]) -> None:
    """Refuses post-processing the method's measurement cannot support.

    ``correct_marginals`` reweights to the measurement's DP marginals: a method class
    declares ``provides_marginals = True`` when its measurement has them (a class that
    does not say so is taken not to).
    """
    if options.get("correct_marginals") and not getattr(method_cls, "provides_marginals", False):
        raise PrecheckError(
            f"parameter 'correct_marginals' needs a measurement with DP marginals; method "
            f"{getattr(method_cls, 'name', method_cls)!r} measures none: drop correct_marginals"
        )


def check_installed(method_cls: Any, options: Mapping[str, Any], dask_address: str | None = None) -> None:
    """Refuses a request whose method, post-processing or cluster needs an optional
    dependency that is not installed, naming the extra (:mod:`dpsynth.extras`).

    A method class lists the modules it needs in ``requires``; ``correct_marginals``
    needs cvxpy; a Dask address needs dask.distributed.
    """
    from .extras import missing

    needs = [*getattr(method_cls, "requires", ())]
    needs += ["cvxpy"] if options.get("correct_marginals") else []
    needs += ["distributed"] if dask_address else []
    for module in needs:
        reason = missing(module)
        if reason is not None:
            what = f"method {getattr(method_cls, 'name', method_cls)!r}" if module in getattr(
                method_cls, "requires", ()) else ("correct_marginals" if module == "cvxpy" else "dask_address")
            raise PrecheckError(f"{what}: {reason}")


def max_table_bytes() -> int:
    """The memory cap of a synthetic table: ``$DPSYNTH_MAX_TABLE_BYTES`` or the default."""
    raw = os.environ.get("DPSYNTH_MAX_TABLE_BYTES")
    if raw is None:
        return DEFAULT_MAX_TABLE_BYTES
    try:
        value = int(float(raw))
    except ValueError:
        raise PrecheckError(f"DPSYNTH_MAX_TABLE_BYTES must be a number of bytes, got {raw!r}") from None
    if value <= 0:
        raise PrecheckError(f"DPSYNTH_MAX_TABLE_BYTES must be > 0, got {raw!r}")
    return value


def _gib(x: float) -> str:
    return f"{x / (1 << 30):.3g} GiB"


def check_rows(rows: int | None, schema: Schema, *, streams: bool = False, input_rows: int | None = None,
               bytes_per_cell: int | None = None, chunk_rows: int | None = None) -> None:
    """Refuses a synthetic table that would not fit the memory limit.

    A method that streams its synthesis (``streams``: it holds one block at a time) is
    never refused, unless it states the ``chunk_rows`` records it holds at once (``sds``):
    then one chunk must fit. Otherwise the table is ``--rows`` records, or about the
    input's when ``rows`` is None and its row count is known from metadata (``input_rows``)."""
    if streams and chunk_rows is None:
        return
    n = rows if rows is not None else input_rows
    if streams:
        n = int(chunk_rows) if n is None else min(int(n), int(chunk_rows))  # type: ignore[arg-type]
    if n is None:
        return
    per_cell = bytes_per_cell or BYTES_PER_CELL
    need = int(n) * len(schema.columns) * per_cell
    limit = max_table_bytes()
    if need > limit:
        if streams and n == chunk_rows:
            raise PrecheckError(
                f"one synthesis chunk of {n} records needs about {_gib(need)} ({len(schema.columns)} columns, "
                f"~{per_cell} bytes per cell), over the limit of {_gib(limit)} (DPSYNTH_MAX_TABLE_BYTES); "
                f"raise the limit or use a method that streams block by block (`dpsynth methods`: pgm, marginals)")
        most = max(1, limit // (len(schema.columns) * per_cell))
        what = f"--rows {rows}" if rows is not None else f"a synthetic table as large as the input ({n} rows)"
        raise PrecheckError(
            f"{what} needs about {_gib(need)} for the synthetic table ({len(schema.columns)} columns, "
            f"~{per_cell} bytes per cell), over the limit of {_gib(limit)} "
            f"(DPSYNTH_MAX_TABLE_BYTES); this method holds the whole synthetic table in memory: ask for "
            f"at most --rows {most}, or use a method that streams it (`dpsynth methods`: pgm, marginals)"
        )


#: Disk bytes per synthetic cell, one copy: codes (~1), values in Parquet (~8) and CSV
#: (~10), rounded up. Publish moves the synthetic files into the release when the output
#: folder is on the workspace's filesystem (no second copy); on another one it copies them.
DISK_BYTES_PER_CELL = 24


def _existing(path: Path) -> Path:
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_disk(rows: int | None, schema: Schema, folders: Sequence[Path], *, what: str | None = None) -> None:
    """Refuses a synthetic table of ``rows`` records whose files would not fit the free space
    of the disks holding ``folders`` (the workspace, then the output folder): each distinct
    filesystem among them holds one copy (streamed methods hold no table in memory, but
    write every row). ``what`` names the table in the message (default: ``--rows N``); the
    message names the folder as the caller gave it."""
    if rows is None:
        return
    cols = max(1, len(schema.columns))
    need = int(rows) * cols * DISK_BYTES_PER_CELL
    seen: set[int] = set()
    for folder in folders:
        where = _existing(folder)
        device = os.stat(where).st_dev
        if device in seen:
            continue
        seen.add(device)
        free = shutil.disk_usage(where).free
        if need > free:
            most = max(1, free // (cols * DISK_BYTES_PER_CELL))
            raise PrecheckError(
                f"{what or f'--rows {rows}'} needs about {_gib(need)} of disk for the synthetic files "
                f"(~{DISK_BYTES_PER_CELL} bytes per cell), more than the {_gib(free)} free on the disk of "
                f"{folder}: ask for at most --rows {most}, or free disk space"
            )


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def min_noise_sd(charges: Sequence[Charge]) -> float | None:
    """Smallest noise standard deviation (in counts) the plan implies, or None.

    Gaussian charges: sigma = sensitivity / sqrt(2 rho) (an L2 sensitivity given as text,
    e.g. sqrt(Delta_k), is at least 1); Laplace charges: sqrt(2) * sensitivity / epsilon.
    Charges of mechanisms that add no count noise are skipped.
    """
    sds = noise_sds(charges)
    return min(sds) if sds else None


def pooled_noise_sd(charges: Sequence[Charge]) -> float | None:
    """The least noise any estimate built from all the charges' measurements can have: the
    inverse-variance pool of every charge's noise (:func:`noise_sds`), or None. A marginal
    measured twice and merged (``pgm``'s AIM) is legitimately below :func:`min_noise_sd`."""
    sds = noise_sds(charges)
    return 1.0 / math.sqrt(sum(1.0 / (sd * sd) for sd in sds)) if sds else None


def noise_sds(charges: Sequence[Charge]) -> list[float]:
    """The count-noise standard deviation of each charge that adds noise to counts (see
    :func:`min_noise_sd` for the rules)."""
    sds: list[float] = []
    for c in charges:
        mech = c.mechanism.lower()
        if "gaussian" in mech and c.rho > 0:
            sens = _number(c.detail.get("sensitivity_l2")) or 1.0
            sds.append(sens / math.sqrt(2.0 * c.rho))
        elif "laplace" in mech:
            eps = c.epsilon or _number(c.detail.get("epsilon")) or (math.sqrt(2.0 * c.rho) if c.rho > 0 else 0.0)
            if eps > 0:
                sens = _number(c.detail.get("sensitivity_l1")) or 1.0
                sds.append(math.sqrt(2.0) * sens / eps)
    return sds


def noise_warnings(charges: Sequence[Charge], epsilon: float) -> tuple[str, ...]:
    """A note when the plan's smallest noise is below :data:`EXACT_NOISE_SD` counts."""
    sd = min_noise_sd(charges)
    if sd is None or sd >= EXACT_NOISE_SD:
        return ()
    return (
        f"epsilon {epsilon:g} is so large that the noise is negligible: the smallest noise standard "
        f"deviation is {sd:.3g} counts (below {EXACT_NOISE_SD}), so published counts are effectively exact",
    )
