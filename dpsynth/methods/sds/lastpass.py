"""``sds``'s last pass on the pool: the tables the gate would refuse, brought under a margin by swaps.

The descent (:mod:`.descent`) lowers a chi-square-like misfit; the validation gate reads
another statistic, per measured table the TVD ``0.5 sum_i |p_i - q_i|`` between the release's
shares ``p`` and the DP table clipped and normalised ``q``, against its threshold
``t = max(2 E, E + 6 SD)`` at the release's rows (:func:`dpsynth.evaluation.predicted.allowed_tvd`).
The two rank tables differently, so the descent can stop with one table just over the gate
(docs/sds-generalisation.md, fifteenth round, second part). This pass works on the gate's own
ratio ``TVD / t``, computed exactly from the records (each written equally often, as the
release writes them: ``p = counts / records``).

While some table is above :data:`MARGIN`, the worst such table is taken and a batch of record
pairs is proposed for it: records in its cells above ``q`` (whose leaving lowers its TVD),
each with the value of one of its columns that would put it in its most-under cell, and
partners holding that value in a cell above ``q`` too; the two exchange that column's values
(a swap keeps every 1-way table, as the descent left them exact). The exact change of every
table's ratio is computed for each pair against the current counts; a pair is kept only if
it lowers the table's ratio and pushes no other table above :data:`MARGIN` (or, for one already
above, does not raise it); of the kept, one pair per record, the lowest sum of ratio changes
first. The batch is applied and the touched tables' ratios re-read: if together the pairs
broke that rule, the batch is undone and halved. A table that keeps no pair in :data:`STALL`
batches in a row is left. Bounded work: at most :data:`MAX_BATCHES` batches; deterministic for
the generator (never a clock). Nothing is drawn from the generator when no table is above the
margin: the records come back unchanged.

On an expanded pool the update left alone (:func:`.expand.pass_pool`), the gate's view of the
weighted pool is read first (:func:`weighted_gate_ratios`); where a table is above the margin
the pool is rounded to equal records and :func:`set_columns` gives each column back the weighted
pool's 1-way table (swaps cannot), choosing the rewrites that raise the gate ratios least,
before the pass (docs/sds-generalisation.md, seventeenth round, second part).

Post-processing of the measurement only: it reads the noisy tables, their public noise
scales and the DP record count (the thresholds), the records and the generator; never the real
rows. Design and figures: docs/sds-generalisation.md, sixteenth round.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...evaluation.metrics import clipped_distributions
from ...evaluation.predicted import allowed_tvds
from ...measurement import Measurement
from ...schema import Schema
from .descent import _Group, swap_term_changes
from .refit import record_cells

__all__ = ["MARGIN", "BATCH", "SEEN", "PARTNERS", "MAX_BATCHES", "STALL", "GateTable", "gate_tables", "gate_ratios",
           "weighted_gate_ratios", "set_columns", "last_pass"]

#: Tables whose exact gate ratio is above this are worked on (and no move may push another
#: table above it). Below 1 for the copies' rounding (:func:`.expand.copies`), which the pass
#: cannot see: on the tuning captures (int7's generator at 5M, int6's at 3M; 12 roundings each)
#: it moved a table's gate ratio by up to +.033 (sd .002-.007); the margin is 1 - 3 x that
#: (docs/sds-generalisation.md, sixteenth round).
MARGIN = 0.9
#: Pairs proposed per batch at most (halved after a batch that was undone, doubled after one kept).
BATCH = 256
#: Records looked at per pair proposed, when drawing a batch's records from the table's cells.
SEEN = 8
#: Partners tried per record (the one with the lowest sum of ratio changes is kept).
PARTNERS = 4
#: Batches at most (the bound on the pass's work).
MAX_BATCHES = 400
#: A table is left after this many batches in a row kept none of its pairs.
STALL = 6
#: Records tried per record to rewrite, when :func:`set_columns` gives a column its 1-way table.
COLUMN_CANDIDATES = 4
#: Rounds of rewrites per column: the first half each take an equal share of what is left off
#: (the costs are re-read between rounds, so the cheapest rewrites do not all pile into one
#: cell), the others the rest.
COLUMN_ROUNDS = 8
#: The gate's smallest threshold (:mod:`dpsynth.gate.thresholds`).
_MIN_THRESHOLD = 1e-9


@dataclass(frozen=True)
class GateTable:
    """One measured table as the gate reads it: its columns, shape, the DP table as a
    distribution ``q`` (flat, row-major) and its TVD threshold ``limit`` at the release's rows."""

    cols: tuple[int, ...]
    shape: tuple[int, ...]
    q: np.ndarray
    limit: float


def gate_tables(scaled: Measurement, schema: Schema) -> list[GateTable] | None:
    """The gate's view of every measured k-way table (k >= 2) of ``scaled``
    (:func:`.expand.scaled_measurement`: counts and noise scale times the pool's share, the
    release's rows in ``meta["sample_rows"]``, the share in ``meta["pool_share"]``): ``q`` and
    the threshold the gate will use for a release of ``sample_rows`` records. None where the
    gate's view cannot be rebuilt (no share or rows, no DP record count, merged columns)."""
    share = float(scaled.meta.get("pool_share", 0.0))
    rows = int(scaled.meta.get("sample_rows", 0))
    tables = [nm for nm in scaled.measured if len(nm.attrs) >= 2]
    if not share > 0 or rows <= 0 or scaled.records is None or not tables or any(nm.groups for nm in tables):
        return None
    # the gate's thresholds of the unscaled noise (the record count is not scaled)
    limits = allowed_tvds(dataclasses.replace(scaled, measured=tuple(
        dataclasses.replace(nm, stddev=float(nm.stddev) / share) for nm in tables)), rows)
    sizes = np.array([nm.counts.size for nm in tables], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    q = clipped_distributions(np.concatenate([np.asarray(nm.counts, dtype=np.float64).ravel() for nm in tables]),
                              starts, sizes)
    return [GateTable(cols=tuple(schema.index(a) for a in nm.attrs), shape=tuple(schema.cardinalities[schema.index(a)]
                                                                                 for a in nm.attrs),
                      q=q[s:s + z], limit=max(_MIN_THRESHOLD, limits[tuple(nm.attrs)]))
            for nm, s, z in zip(tables, starts, sizes)]


def _cells(t: GateTable, rows: np.ndarray) -> np.ndarray:
    """Each of ``rows``' cell in table ``t`` (row-major over its columns)."""
    return record_cells(rows, t.cols, t.shape)


class _State:
    """Every table's cells in one flat array: counts of the records, ``q``, each table's TVD
    (exact, from the counts) and threshold; tables grouped by length as the descent groups them."""

    def __init__(self, codes: np.ndarray, tables: Sequence[GateTable]):
        self.tables = list(tables)
        self.n = int(codes.shape[0])
        sizes = np.array([t.q.size for t in self.tables], dtype=np.int64)
        self.start = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        self.table = np.repeat(np.arange(len(self.tables)), sizes)
        self.q = np.concatenate([np.asarray(t.q, dtype=np.float64) for t in self.tables])
        self.limit = np.array([t.limit for t in self.tables], dtype=np.float64)
        self.mults = []
        for t in self.tables:
            m = np.ones(len(t.cols), dtype=np.int64)
            for a in range(len(t.cols) - 2, -1, -1):
                m[a] = m[a + 1] * t.shape[a + 1]
            self.mults.append(m)
        self.groups = []
        for k in sorted({len(t.cols) for t in self.tables}):
            ids = np.array([i for i, t in enumerate(self.tables) if len(t.cols) == k], dtype=np.int64)
            self.groups.append(_Group(ids=ids, cols=np.array([self.tables[i].cols for i in ids], dtype=np.int64),
                                      mult=np.array([self.mults[i] for i in ids], dtype=np.int64),
                                      offset=self.start[ids]))
        self.counts = np.zeros(self.q.size, dtype=np.int64)
        by_col = np.asfortranarray(codes)  # every table reads whole columns: one column-major copy
        for i, t in enumerate(self.tables):
            lo = self.start[i]
            self.counts[lo:lo + t.q.size] = np.bincount(self.local(i, by_col), minlength=t.q.size)
        del by_col
        self.settle()

    def settle(self) -> None:
        """Every cell's term and every table's TVD computed afresh from the exact counts (as a
        new state of the same records has them: the incremental sums of :meth:`apply` differ
        in the last bits)."""
        self.dev = np.abs(self.counts / max(self.n, 1) - self.q)
        self.tvd = 0.5 * np.bincount(self.table, weights=self.dev, minlength=len(self.tables))

    @property
    def ratio(self) -> np.ndarray:
        """Each table's gate ratio, TVD over threshold."""
        return self.tvd / self.limit

    def local(self, i: int, rows: np.ndarray) -> np.ndarray:
        """Cells (within table ``i``) of ``rows``."""
        return _cells(self.tables[i], rows)

    def term(self, counts: np.ndarray, cells: np.ndarray) -> np.ndarray:
        """``|count / records - q|`` of ``cells`` at ``counts``."""
        return np.abs(counts / self.n - self.q[cells])

    def swap_ratios(self, one: np.ndarray, two: np.ndarray, j: int) -> tuple[np.ndarray, np.ndarray]:
        """For records ``one[b]`` and ``two[b]`` exchanging column ``j``'s values: the ids of
        the tables holding ``j`` (U,) and the exact change of each one's ratio (U, B),
        against the current counts."""
        ids, out = [], []
        for h, delta in swap_term_changes(self.groups, one, two, j, self.counts, self.dev, self.term):
            ids.append(h.ids)
            out.append(0.5 * delta / self.limit[h.ids][:, None])
        if not ids:
            return np.zeros(0, dtype=np.int64), np.zeros((0, one.shape[0]))
        return np.concatenate(ids), np.concatenate(out)

    def apply(self, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        """Records ``old`` become ``new``: counts, terms and TVDs updated; the tables touched."""
        touched = []
        for g in self.groups:
            io, inn = g.cells(old), g.cells(new)
            moved = io != inn
            np.subtract.at(self.counts, io[moved], 1)
            np.add.at(self.counts, inn[moved], 1)
            touched += [io[moved], inn[moved]]
        cells = np.unique(np.concatenate(touched)) if touched else np.zeros(0, dtype=np.int64)
        before = self.dev[cells].copy()
        self.dev[cells] = self.term(self.counts[cells], cells)
        np.add.at(self.tvd, self.table[cells], 0.5 * (self.dev[cells] - before))
        return np.unique(self.table[cells])


def gate_ratios(codes: np.ndarray, tables: Sequence[GateTable]) -> np.ndarray:
    """Each table's exact gate ratio for ``codes`` written equally often."""
    return _State(np.asarray(codes), tables).ratio


def weighted_gate_ratios(pool: np.ndarray, weights: np.ndarray, tables: Sequence[GateTable]) -> np.ndarray:
    """Each table's gate ratio for ``pool``'s records weighted by ``weights``: the release's
    tables before the copies' rounding (:func:`.expand.copies` writes record i about
    rows x its share of the weights). Reads the records, nothing drawn."""
    w = np.clip(np.asarray(weights, dtype=np.float64), 0.0, None)
    w = w / max(float(w.sum()), 1e-300)
    by_col = np.asfortranarray(pool)  # every table reads whole columns
    out = np.zeros(len(tables))
    for i, t in enumerate(tables):
        p = np.bincount(_cells(t, by_col), weights=w, minlength=t.q.size)
        out[i] = 0.5 * float(np.abs(p - t.q).sum()) / t.limit
    return out


def set_columns(codes: np.ndarray, tables: Sequence[GateTable], goals: dict[int, np.ndarray],
                rng: np.random.Generator) -> int:
    """Each column ``j`` of ``codes`` (equally weighted records, edited in place) given the 1-way
    table ``goals[j]`` (whole records summing to the records) by rewriting it in as many records
    as it is off, choosing among :data:`COLUMN_CANDIDATES` records per rewrite (drawn from the
    over-filled values) the records and new values that raise the sum of the gate ratios of the
    tables holding ``j`` the least (each rewrite alone, against the counts before the round's
    rewrites; :data:`COLUMN_ROUNDS`); what is left after them is rewritten in random records of the over-filled
    values. How many records were rewritten. The columns are set in order: rewriting one keeps
    the others."""
    return _set_columns(_State(codes, tables), codes, goals, rng)


def _set_columns(st: _State, codes: np.ndarray, goals: dict[int, np.ndarray], rng: np.random.Generator) -> int:
    """:func:`set_columns` on the state ``st`` of ``codes`` (its counts follow the rewrites)."""
    moved = 0
    for j, goal in goals.items():
        holding = [(i, t.cols.index(j)) for i, t in enumerate(st.tables) if j in t.cols]
        for step in range(COLUMN_ROUNDS):
            gap = np.bincount(codes[:, j], minlength=goal.size)[:goal.size] - goal
            if not gap.any():
                break
            size = -(-int(gap.clip(0).sum()) // max(1, COLUMN_ROUNDS // 2 - step))  # a share, then the rest
            over = np.flatnonzero(gap[codes[:, j]] > 0)
            r = np.sort(over[rng.choice(over.size, size=min(over.size, COLUMN_CANDIDATES * int(gap.clip(0).sum())),
                                        replace=False)])
            under = np.flatnonzero(gap < 0)
            d = np.zeros((under.size, r.size))
            rows = codes[r]
            for i, a in holding:
                old = st.start[i] + st.local(i, rows)
                new = old[None, :] + (under[:, None] - rows[:, j].astype(np.int64)[None, :]) * int(st.mults[i][a])
                leave = st.term(st.counts[old] - 1, old) - st.dev[old]
                d += 0.5 * (leave[None, :] + st.term(st.counts[new] + 1, new) - st.dev[new]) / st.limit[i]
            need, give = np.clip(-gap, 0, None), np.clip(gap, 0, None)
            used = np.zeros(r.size, dtype=bool)
            pick, vals = [], []
            for u, b in zip(*np.unravel_index(np.argsort(d.ravel(), kind="stable"), d.shape)):
                v, x = int(under[u]), int(rows[b, j])
                if used[b] or need[v] == 0 or give[x] == 0:
                    continue
                used[b] = True
                need[v] -= 1
                give[x] -= 1
                pick.append(int(r[b]))
                vals.append(v)
                if not need.any() or len(pick) >= size:
                    break
            if not pick:
                break
            moved += _rewrite(st, codes, np.array(pick), j, np.array(vals))
        gap = np.bincount(codes[:, j], minlength=goal.size)[:goal.size] - goal
        if gap.any():  # what the rounds left: random records of the over-filled values
            over = np.flatnonzero(gap[codes[:, j]] > 0)
            out = over[rng.permutation(over.size)]
            out = np.concatenate([out[codes[out, j] == x][:int(g)] for x, g in enumerate(gap) if g > 0])
            vals = np.repeat(np.arange(goal.size), np.clip(-gap, 0, None))
            moved += _rewrite(st, codes, np.sort(out), j, vals[rng.permutation(vals.size)])
    return moved


def _rewrite(st: _State, codes: np.ndarray, rows: np.ndarray, j: int, vals: np.ndarray) -> int:
    """Records ``rows`` get ``vals`` in column ``j`` (codes and counts); how many."""
    old = codes[rows].copy()
    new = old.copy()
    new[:, j] = vals
    st.apply(old, new)
    codes[rows] = new
    return int(rows.size)


def _proposals(st: _State, codes: np.ndarray, t: int, size: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """Up to ``size`` x :data:`PARTNERS` candidate pairs (first, second) for table ``t`` and
    the column they would swap."""
    tab = st.tables[t]
    n = codes.shape[0]
    j_at = int(rng.integers(0, len(tab.cols)))
    j, mj = int(tab.cols[j_at]), int(st.mults[t][j_at])
    seen = np.sort(rng.choice(n, size=SEEN * size, replace=False)) if SEEN * size < n else np.arange(n)
    cell = st.local(t, codes[seen])
    lo = st.start[t]
    g = st.counts[lo + cell] / n - st.q[lo + cell]
    leave = np.abs(g - 1.0 / n) - np.abs(g)
    over, gain = seen[leave < 0], -leave[leave < 0]
    none = np.zeros(0, dtype=np.int64)
    if over.size < 2:
        return none, none, j
    first = over[rng.choice(over.size, size=min(size, over.size), replace=False, p=gain / gain.sum())]
    # each first record's most-under cell along column j: the value it wants
    card = tab.shape[j_at]
    base = st.local(t, codes[first]) - codes[first, j].astype(np.int64) * mj
    cells = lo + base[:, None] + np.arange(card)[None, :] * mj
    gw = st.counts[cells] / n - st.q[cells]
    enter = np.abs(gw + 1.0 / n) - np.abs(gw)
    enter[np.arange(first.size), codes[first, j]] = np.inf
    want = np.argmin(enter, axis=1)
    ok = enter[np.arange(first.size), want] < 0
    first, want = first[ok], want[ok]
    # partners: records above q in table t holding the wanted value
    vals = codes[over, j].astype(np.int64)
    order = np.argsort(vals, kind="stable")
    sv = vals[order]
    a, b = np.searchsorted(sv, want, "left"), np.searchsorted(sv, want, "right")
    has = b > a
    first, a, b = first[has], a[has], b[has]
    if not first.size:
        return none, none, j
    pick = a[:, None] + np.floor(rng.random((first.size, PARTNERS)) * (b - a)[:, None]).astype(np.int64)
    second = over[order[pick]]
    return np.repeat(first, PARTNERS), second.ravel(), j


def _batch(st: _State, codes: np.ndarray, t: int, size: int, rng: np.random.Generator) -> int:
    """One batch for table ``t`` (module docstring); how many swaps were kept (-1: undone)."""
    one, two, j = _proposals(st, codes, t, size, rng)
    if not one.size:
        return 0
    ids, d = st.swap_ratios(codes[one], codes[two], j)
    ratio = st.ratio[ids][:, None]
    at = int(np.flatnonzero(ids == t)[0])
    fine = ((ratio + d <= MARGIN) | (d <= 1e-15)).all(axis=0) & (d[at] < -1e-15)
    score = d.sum(axis=0)
    cand = np.flatnonzero(fine)
    if not cand.size:
        return 0
    cand = cand[np.argsort(score[cand], kind="stable")]
    used: set[int] = set()
    keep = []
    for c in cand.tolist():  # one pair per record, the lowest sum of ratio changes first
        x, y = int(one[c]), int(two[c])
        if x in used or y in used:
            continue
        used.update((x, y))
        keep.append(c)
        if len(keep) >= size:
            break
    keep = np.array(sorted(keep), dtype=np.int64)
    rows = np.concatenate((one[keep], two[keep]))
    old = codes[rows].copy()
    new = old.copy()
    h = keep.size
    new[:h, j], new[h:, j] = old[h:, j], old[:h, j]
    before = st.ratio.copy()
    touched = st.apply(old, new)
    after = st.ratio[touched]
    if (not np.any(touched == t) or after[touched == t][0] >= before[t]
            or np.any((after > MARGIN) & (after > before[touched] + 1e-12))):
        st.apply(new, old)  # the pairs met in some cell: back
        return -1
    codes[rows] = new
    return int(h)


def last_pass(codes: np.ndarray, tables: Sequence[GateTable], rng: np.random.Generator,
              goals: dict[int, np.ndarray] | None = None) -> tuple[np.ndarray, dict]:
    """``codes`` (equally weighted records, edited in place) with every table's exact gate
    ratio brought to :data:`MARGIN` where swaps can (module docstring), and what the pass did.
    Draws nothing from ``rng`` when no table is above the margin. With ``goals``, the columns
    are first given those 1-way tables (:func:`set_columns`, on the pass's own counts: the
    tables are counted once), and the info starts with ``column_moves``, the records rewritten."""
    st = _State(codes, tables)
    head: dict = {}
    if goals is not None:
        head["column_moves"] = _set_columns(st, codes, goals, rng)
        st.settle()
    ratio = st.ratio
    info: dict = {**head, "above_before": int((ratio > MARGIN).sum()), "worst_before": float(ratio.max(initial=0.0)),
                  "batches": 0, "swaps": 0, "undone": 0, "left": 0}
    if not info["above_before"]:
        info.update(above_after=0, worst_after=info["worst_before"])
        return codes, info
    stalls = np.zeros(len(st.tables), dtype=np.int64)
    size = BATCH
    for _ in range(MAX_BATCHES):
        ratio = st.ratio
        live = (ratio > MARGIN) & (stalls < STALL)
        if not live.any():
            break
        t = int(np.argmax(np.where(live, ratio, -np.inf)))
        info["batches"] += 1
        kept = _batch(st, codes, t, size, rng)
        if kept < 0:
            info["undone"] += 1
            size = max(1, size // 2)
            continue
        stalls[t] = 0 if kept else stalls[t] + 1
        info["swaps"] += kept
        size = min(BATCH, size * 2)
    ratio = st.ratio  # the incremental sums (the tests check them against a count from scratch)
    info.update(above_after=int((ratio > MARGIN).sum()), worst_after=float(ratio.max(initial=0.0)),
                left=int(((ratio > MARGIN) & (stalls >= STALL)).sum()))
    return codes, info
