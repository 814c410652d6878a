"""Lifetime privacy registry: every noise draw of a declared dataset, charged against its cap.

A release's own budget bounds what *that* release reveals; a table released every night
reveals more every night. The registry (SQLite, ``WORKSPACE/registry.sqlite``, private)
adds up what the measurements of one dataset reveal (DESIGN.md, decisions 10 and 14):

* the user declares a dataset identity (a public name, never derived from the rows) and
  a cap: lifetime (epsilon, delta), optionally a per-period epsilon (day, week, month);
* every noise draw is charged before it happens, in one ``BEGIN IMMEDIATE`` transaction
  (check, then insert), so two racing releases cannot both take the last budget;
* the registry records draws, not release keys: a run is free only when it reuses the
  stored complete measurement of its key (``reuse=True``); any other run of a known key
  (its measurement was deleted, or a crash came before it was complete) is charged again;
* :func:`charge` returns a :class:`Draw`, and the measure stage may draw noise only after
  :func:`consume_draw` marks that charge used (once): no draw without a charge;
* composition across draws: zCDP rho adds, pure-epsilon parts add, and the total is
  pure + CKS(rho, delta_cap) (:func:`dpsynth.privacy.budget.total_epsilon`).

A dataset without a declared cap is still recorded (so a cap set later counts the past),
and the caller is told there is no cap. Every function opens the workspace privately
(:func:`dpsynth.privacy.workspace.private_workspace`). Pure library: no Prefect.
"""

from __future__ import annotations

import math
import sqlite3
import unicodedata
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable, Iterator, Literal

from .budget import BudgetExceeded, Charge, check_delta, total_epsilon
from .workspace import private_workspace

__all__ = [
    "REGISTRY_FILE",
    "PERIODS",
    "Cap",
    "DatasetState",
    "Draw",
    "DrawCost",
    "DrawRefused",
    "ReleaseCost",
    "RegistryRefused",
    "registry_path",
    "settle_draw",
    "set_cap",
    "get_cap",
    "charge",
    "consume_draw",
    "state",
    "check_dataset_name",
    "dataset_name_key",
    "near_twin_warning",
    "near_twins",
    "check_period",
    "period_start",
]

REGISTRY_FILE = "registry.sqlite"
PERIODS = ("day", "week", "month")
Period = Literal["day", "week", "month"]
_TOL = 1e-9

_SCHEMA = """
CREATE TABLE IF NOT EXISTS caps (
    dataset TEXT PRIMARY KEY,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    period TEXT,
    period_epsilon REAL,
    set_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS draws (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL,
    release_key TEXT NOT NULL,
    name TEXT NOT NULL,
    rho REAL NOT NULL,
    pure_epsilon REAL NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    charged_at TEXT NOT NULL,
    measured_at TEXT,
    delta_extra REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS draws_by_key ON draws (dataset, release_key);
"""

_COST_COLUMNS = "dataset, release_key, name, rho, pure_epsilon, epsilon, delta, charged_at"


class RegistryRefused(BudgetExceeded):
    """A release that would take its dataset past its lifetime or period cap."""


class DrawRefused(RuntimeError):
    """The measure stage was asked to draw noise without an unused charge for its release."""


def check_dataset_name(name: str) -> str:
    """Refuses a dataset name that is empty, too long, spans lines, has surrounding spaces
    or is not in Unicode NFC form (another spelling of one name would silently open a new,
    uncapped dataset); returns it."""
    if not isinstance(name, str) or not name.strip() or len(name) > 200 or any(ch in name for ch in "\0\n\r"):
        raise ValueError(f"dataset name {name!r} must be a non-empty line of at most 200 characters")
    canonical = unicodedata.normalize("NFC", name.strip())
    if canonical != name:
        raise ValueError(f"dataset name {name!r} has surrounding spaces or decomposed Unicode: write it as "
                         f"{canonical!r} (another spelling of a name would count as another dataset)")
    return name


def dataset_name_key(name: str) -> str:
    """What two dataset names are compared by: stripped, NFKC, case-folded."""
    return unicodedata.normalize("NFKC", name.strip()).casefold()


def near_twins(workspace: Path, dataset: str) -> tuple[str, ...]:
    """Datasets in the registry whose names differ from ``dataset`` only by case, spaces or
    Unicode form (likely the same data under a second, separately capped name)."""
    if not registry_path(workspace).is_file():
        return ()
    with _open(workspace) as conn:
        names = {r[0] for r in conn.execute("SELECT dataset FROM caps UNION SELECT dataset FROM draws")}
    key = dataset_name_key(dataset)
    return tuple(sorted(n for n in names if n != dataset and dataset_name_key(n) == key))


def near_twin_warning(workspace: Path, dataset: str) -> str | None:
    """A warning naming the near twins of ``dataset`` (:func:`near_twins`), or None."""
    twins = near_twins(workspace, dataset)
    if not twins:
        return None
    return (f"dataset {dataset!r} differs from {', '.join(map(repr, twins))} in the registry only by case, "
            f"spaces or Unicode form: each has its own budget. If it is the same data, use --dataset {twins[0]!r}")


@dataclass(frozen=True, kw_only=True)
class Cap:
    """A dataset's declared budget: lifetime (epsilon, delta) and an optional period epsilon."""

    epsilon: float
    delta: float
    period: Period | None = None
    period_epsilon: float | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.epsilon, (int, float)) and math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"cap epsilon must be a finite number > 0, got {self.epsilon!r}")
        if not (isinstance(self.delta, (int, float)) and 0 < self.delta < 1):
            raise ValueError(f"cap delta must lie in (0, 1), got {self.delta!r}")
        check_period(self.period, self.period_epsilon)


def check_period(period: str | None, epsilon: float | None) -> None:
    """A per-period budget: both or neither, a known period, a finite epsilon > 0."""
    if (period is None) != (epsilon is None):
        raise ValueError("period and period epsilon go together")
    if period is not None:
        if period not in PERIODS:
            raise ValueError(f"period must be one of {list(PERIODS)}, got {period!r}")
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"period epsilon must be a finite number > 0, got {epsilon!r}")


@dataclass(frozen=True, kw_only=True)
class DrawCost:
    """One charged noise draw (no key, no data: safe to print)."""

    name: str
    rho: float
    pure_epsilon: float
    epsilon: float
    delta: float
    charged_at: str
    # delta spent outside the zCDP conversion (a thresholded histogram's chance of letting
    # a rare value through, as in a DP schema draft); the dataset converts its rho at the
    # cap's delta less the sum of these
    delta_extra: float = 0.0


ReleaseCost = DrawCost  # the name before draws were recorded one by one


@dataclass(frozen=True, kw_only=True)
class Draw:
    """The registry's answer to a charge: which draw record the run may use.

    ``fresh``: a new, unused charge; the measure stage may draw noise once with it
    (:func:`consume_draw`). Not fresh: the run reuses the stored complete measurement of
    its key and must not draw. ``id`` is the record's number (no key, no data).
    """

    id: int
    dataset: str
    release_key: str = field(repr=False)
    fresh: bool


@dataclass(frozen=True, kw_only=True)
class DatasetState:
    """A dataset's cap and what its draws have spent (composed at the cap's delta)."""

    dataset: str
    cap: Cap | None
    draws: tuple[DrawCost, ...]
    delta: float  # the delta the spend is stated at
    spent_epsilon: float
    release_count: int = 0  # distinct releases (keys) among the draws
    period_spent_epsilon: float | None = None
    charged_now: bool = False  # whether the last charge() recorded a draw (False: a free reuse)
    draw: Draw | None = None  # the draw the last charge() granted

    @property
    def releases(self) -> tuple[DrawCost, ...]:
        """Every draw, oldest first (a release measured twice appears twice)."""
        return self.draws

    @property
    def remaining_epsilon(self) -> float | None:
        """Epsilon left under the lifetime cap (None without a cap)."""
        return None if self.cap is None else max(0.0, self.cap.epsilon - self.spent_epsilon)

    def draws_by_name(self) -> dict[str, list[str]]:
        """Release name -> the times of its draws (oldest first): what ``budget show`` lists."""
        out: dict[str, list[str]] = {}
        for d in self.draws:
            out.setdefault(d.name, []).append(d.charged_at)
        return out

    def to_manifest(self) -> dict[str, object]:
        """Public summary for the manifest: names, totals and the cap (no keys, no times)."""
        out: dict[str, object] = {
            "name": self.dataset,
            "cap_epsilon": None if self.cap is None else self.cap.epsilon,
            "cap_delta": None if self.cap is None else self.cap.delta,
            "spent_epsilon_including_this": self.spent_epsilon,
            "spent_delta": self.delta,
            "remaining_epsilon": self.remaining_epsilon,
            "releases_including_this": self.release_count,
            "draws_including_this": len(self.draws),
            "composition": "zCDP rho and pure epsilon added over every noise draw of the dataset's releases "
            "(a release measured again is counted again), converted with Canonne-Kamath-Steinke at the cap's delta "
            "less the delta that thresholded draws (DP schema drafts) spent outside zCDP",
        }
        extra = sum(d.delta_extra for d in self.draws)
        if extra > 0:
            out["threshold_delta_including_this"] = extra
        if self.cap is not None and self.cap.period is not None:
            out["period"] = self.cap.period
            out["period_cap_epsilon"] = self.cap.period_epsilon
            out["period_spent_epsilon_including_this"] = self.period_spent_epsilon
        return out


def registry_path(workspace: Path) -> Path:
    """The registry's SQLite file inside a workspace."""
    return Path(workspace) / REGISTRY_FILE


@contextmanager
def _open(workspace: Path) -> Iterator[sqlite3.Connection]:
    """A connection to the workspace's registry, the workspace opened privately (its file,
    journal and WAL are created owner-only) and the table of draws migrated."""
    with private_workspace(workspace) as ws:
        with closing(sqlite3.connect(str(registry_path(ws)), timeout=60.0, isolation_level=None)) as conn:
            conn.execute("PRAGMA busy_timeout = 60000")
            conn.executescript(_SCHEMA)
            _migrate(conn)
            yield conn


def _migrate(conn: sqlite3.Connection) -> None:
    """A registry written before draws were recorded: its one row per release key becomes
    one draw (already measured). Once, under the write lock. A table of draws from before
    ``delta_extra`` gains the column (0: those draws spent all their delta in zCDP)."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(draws)")}
    if "delta_extra" not in columns:
        try:
            conn.execute("ALTER TABLE draws ADD COLUMN delta_extra REAL NOT NULL DEFAULT 0")
        except sqlite3.OperationalError:  # another process added it first
            pass
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'releases'").fetchone():
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'releases'").fetchone():
            conn.execute(f"INSERT INTO draws ({_COST_COLUMNS}, measured_at) SELECT {_COST_COLUMNS}, charged_at "
                         "FROM releases ORDER BY charged_at")
            conn.execute("DROP TABLE releases")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _now_text(now: datetime | None) -> tuple[datetime, str]:
    when = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return when, when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def period_start(period: Period, when: datetime) -> datetime:
    """Start (UTC) of the calendar day, ISO week (Monday) or month containing ``when``."""
    day = when.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


def set_cap(workspace: Path, dataset: str, cap: Cap, now: datetime | None = None) -> None:
    """Declares (or replaces) a dataset's cap. Past draws keep counting against it."""
    check_dataset_name(dataset)
    check_delta(cap.delta, "cap delta")
    _, at = _now_text(now)
    with _open(workspace) as conn:
        conn.execute(
            "INSERT INTO caps (dataset, epsilon, delta, period, period_epsilon, set_at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(dataset) DO UPDATE SET epsilon=excluded.epsilon, delta=excluded.delta, "
            "period=excluded.period, period_epsilon=excluded.period_epsilon, set_at=excluded.set_at",
            (dataset, float(cap.epsilon), float(cap.delta), cap.period,
             None if cap.period_epsilon is None else float(cap.period_epsilon), at),
        )


def _cap(conn: sqlite3.Connection, dataset: str) -> Cap | None:
    row = conn.execute(
        "SELECT epsilon, delta, period, period_epsilon FROM caps WHERE dataset = ?", (dataset,)
    ).fetchone()
    if row is None:
        return None
    return Cap(epsilon=row[0], delta=row[1], period=row[2], period_epsilon=row[3])


def get_cap(workspace: Path, dataset: str) -> Cap | None:
    """The dataset's declared cap, or None."""
    with _open(workspace) as conn:
        return _cap(conn, dataset)


def _draws(conn: sqlite3.Connection, dataset: str) -> tuple[tuple[DrawCost, ...], int]:
    """The dataset's draws, oldest first, and how many distinct release keys they hold."""
    rows = conn.execute(
        "SELECT name, rho, pure_epsilon, epsilon, delta, charged_at, release_key, delta_extra FROM draws "
        "WHERE dataset = ? ORDER BY charged_at, id", (dataset,),
    ).fetchall()
    draws = tuple(DrawCost(name=r[0], rho=r[1], pure_epsilon=r[2], epsilon=r[3], delta=r[4], charged_at=r[5],
                           delta_extra=r[7]) for r in rows)
    return draws, len({r[6] for r in rows})


def _composed(costs: Iterable[DrawCost], delta: float) -> float:
    """Epsilon of the draws together at ``delta``: their rho converted at ``delta`` less the
    delta they spent outside zCDP (infinite when nothing is left for the conversion)."""
    costs = tuple(costs)
    parts = [Charge(stage=c.name or "release", rho=c.rho, epsilon=c.pure_epsilon) for c in costs]
    if not parts:
        return 0.0
    left = float(delta) - sum(c.delta_extra for c in costs)
    if left <= 0:
        return math.inf
    return total_epsilon(parts, left)


def _period_spent(draws: Iterable[DrawCost], period: Period, when: datetime, delta: float) -> float:
    """Composed epsilon of the draws charged in the calendar period containing ``when``."""
    start = _now_text(period_start(period, when))[1]  # same fixed-width text: compares in time order
    return _composed((r for r in draws if r.charged_at >= start), delta)


def _state(conn: sqlite3.Connection, dataset: str, delta: float, when: datetime,
           extra: DrawCost | None = None, limit: tuple[Period, float] | None = None,
           new_key: bool = False) -> DatasetState:
    cap = _cap(conn, dataset)
    draws, keys = _draws(conn, dataset)
    draws += (extra,) if extra else ()
    # Without a cap: the largest delta of the dataset's draws (a pure-epsilon release's
    # delta 0 cannot bound the zCDP draws charged before it).
    at = cap.delta if cap is not None else max([float(delta)] + [float(r.delta) for r in draws])
    period = cap.period if cap is not None and cap.period else (limit[0] if limit else None)
    period_spent = _period_spent(draws, period, when, at) if period is not None else None
    return DatasetState(dataset=dataset, cap=cap, draws=draws, delta=at, spent_epsilon=_composed(draws, at),
                        release_count=keys + int(new_key), period_spent_epsilon=period_spent)


def state(workspace: Path, dataset: str, delta: float = 1e-6, now: datetime | None = None) -> DatasetState:
    """The dataset's cap and spend (at the cap's delta, or ``delta`` without a cap)."""
    check_dataset_name(dataset)
    when, _ = _now_text(now)
    with _open(workspace) as conn:
        return _state(conn, dataset, delta, when)


def charge(
    workspace: Path,
    dataset: str,
    release_key: str,
    name: str,
    charges: Iterable[Charge],
    delta: float,
    *,
    reuse: bool = False,
    limit: tuple[Period, float] | None = None,
    now: datetime | None = None,
    delta_extra: float = 0.0,
) -> DatasetState:
    """Charges one noise draw of a release to its dataset atomically, or raises RegistryRefused.

    ``charges`` are the release's planned charges; ``delta`` its own delta. ``limit``
    is an extra per-period epsilon declared by the caller (a scheduled deployment), checked
    beside the dataset's own caps. The returned state's ``draw`` says what the run may do.

    ``reuse=True`` is the caller's statement that the stored complete measurement of
    ``release_key`` exists and will be reused (no noise drawn): then a key with a draw on
    record is not charged again. Every other call records a new draw, even for a known
    key: its stored measurement is gone and measuring again draws fresh noise.

    ``delta_extra`` is the part of ``delta`` the draw spends outside the zCDP conversion
    (a thresholded histogram's failure probability); its rho converts at the rest.
    """
    check_dataset_name(dataset)
    if isinstance(delta_extra, bool) or not (
            isinstance(delta_extra, (int, float)) and (delta_extra == 0 or 0 < delta_extra < float(delta))):
        raise ValueError(f"delta_extra must lie in [0, delta), got {delta_extra!r}")
    charges = tuple(charges)
    rho = float(sum(c.rho for c in charges))
    pure = float(sum(c.epsilon for c in charges))
    when, at = _now_text(now)
    own = float(delta) - float(delta_extra)
    cost = DrawCost(name=name, rho=rho, pure_epsilon=pure, epsilon=total_epsilon(charges, own) if own > 0 else pure,
                    delta=float(delta), charged_at=at, delta_extra=float(delta_extra))
    with _open(workspace) as conn:
        conn.execute("BEGIN IMMEDIATE")  # one writer from here to COMMIT: check-then-insert is atomic
        try:
            known = conn.execute("SELECT id FROM draws WHERE dataset = ? AND release_key = ? ORDER BY id DESC "
                                 "LIMIT 1", (dataset, release_key)).fetchone()
            if reuse and known:
                conn.execute("COMMIT")
                free = _state(conn, dataset, delta, when, limit=limit)
                return replace(free, draw=Draw(id=known[0], dataset=dataset, release_key=release_key, fresh=False))
            after = _state(conn, dataset, delta, when, extra=cost, limit=limit, new_key=not known)
            _refuse_over_cap(after, limit, cost, when, again=bool(known))
            cursor = conn.execute(
                f"INSERT INTO draws ({_COST_COLUMNS}, measured_at, delta_extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (dataset, release_key, name, rho, pure, cost.epsilon, cost.delta, at, at if reuse else None,
                 cost.delta_extra),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    draw = Draw(id=int(cursor.lastrowid), dataset=dataset, release_key=release_key, fresh=not reuse)
    return replace(after, charged_now=True, draw=draw)


def consume_draw(workspace: Path, draw: Draw | None, dataset: str, release_key: str,
                 now: datetime | None = None) -> None:
    """Marks a fresh charge of ``(dataset, release_key)`` used, once; the measure stage calls
    it right before drawing noise. Raises :class:`DrawRefused` for no draw, a draw of
    another release, a reuse (not fresh), or a charge already used."""
    why = ("no registry charge was given" if draw is None
           else "the charge is for another release" if (draw.dataset, draw.release_key) != (dataset, release_key)
           else "the charge was granted for reusing a stored measurement" if not draw.fresh else None)
    if why is None:
        _, at = _now_text(now)
        with _open(workspace) as conn:
            used = conn.execute(
                "UPDATE draws SET measured_at = ? WHERE id = ? AND dataset = ? AND release_key = ? "
                "AND measured_at IS NULL", (at, draw.id, dataset, release_key)).rowcount  # type: ignore[union-attr]
        why = None if used == 1 else "the charge was already used by an earlier draw"
    if why is not None:
        raise DrawRefused(f"measure refused to draw noise: {why}; nothing was measured. Every draw must be "
                          "charged to the dataset's registry first: run the release again")


def settle_draw(workspace: Path, draw: Draw, charges: Iterable[Charge], delta: float) -> DrawCost | None:
    """Lowers a used draw's recorded cost to ``charges``, the part of its plan the measurement
    spent before it refused to go on (:class:`dpsynth.privacy.budget.RefusedMidPlan`): the rest
    drew no noise, so the dataset's lifetime spend counts only what was drawn. Never raises a
    cost (a settle above the charged cost changes nothing); returns the settled cost, or None
    when the draw is not on record."""
    charges = tuple(charges)
    rho = float(sum(c.rho for c in charges))
    pure = float(sum(c.epsilon for c in charges))
    eps = total_epsilon(charges, float(delta)) if charges else 0.0
    with _open(workspace) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT name, rho, pure_epsilon, epsilon, delta, charged_at, delta_extra FROM draws "
                               "WHERE id = ? AND dataset = ? AND release_key = ?",
                               (draw.id, draw.dataset, draw.release_key)).fetchone()
            if row is None:
                conn.execute("COMMIT")
                return None
            name, old_rho, old_pure, old_eps, d, at, extra = row
            if rho <= old_rho and pure <= old_pure and eps <= old_eps:
                conn.execute("UPDATE draws SET rho = ?, pure_epsilon = ?, epsilon = ? WHERE id = ?",
                             (rho, pure, eps, draw.id))
            else:
                rho, pure, eps = old_rho, old_pure, old_eps
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return DrawCost(name=name, rho=rho, pure_epsilon=pure, epsilon=eps, delta=d, charged_at=at,
                    delta_extra=float(extra or 0.0))


def _refuse_over_cap(after: DatasetState, limit: tuple[Period, float] | None, cost: DrawCost,
                     when: datetime, again: bool = False) -> None:
    cap = after.cap
    what = (f"measuring release {cost.name!r} again (its stored measurement is gone or incomplete, so new "
            f"noise would be drawn; epsilon {cost.epsilon:.4g})" if again
            else f"release {cost.name!r} (epsilon {cost.epsilon:.4g})")
    if cap is not None and after.spent_epsilon > cap.epsilon * (1 + _TOL):
        before = _composed(after.draws[:-1], after.delta)
        raise RegistryRefused(
            f"dataset {after.dataset!r}: {what} would bring its lifetime spend to epsilon "
            f"{after.spent_epsilon:.4g} over the cap {cap.epsilon:g} (spent {before:.4g}, delta {after.delta:g}); "
            f"nothing was measured. Lower --epsilon, or, if the data owner agrees, raise the cap: "
            f"dpsynth budget set {after.dataset} --epsilon E --delta D"
        )
    periods = []
    if cap is not None and cap.period is not None:
        periods.append((cap.period, float(cap.period_epsilon)))
    if limit is not None:
        periods.append(limit)
    for period, eps in periods:
        spent = _period_spent(after.draws, period, when, after.delta)
        if spent > eps * (1 + _TOL):
            raise RegistryRefused(
                f"dataset {after.dataset!r}: {what} would bring this {period}'s spend to epsilon {spent:.4g} "
                f"over the {period} budget {eps:g}; nothing was measured. Lower --epsilon or wait for the "
                f"next {period} (UTC)"
            )
