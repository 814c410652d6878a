"""Benchmark: dpsynth ``pgm select=aim degree=2`` (and ``auto``) against the reference mbi AIM.

The peer is ``mechanisms/aim.py`` of the private-pgm repository, imported unmodified by
benchmarks/aim_reference_peer.py and run in its own environment (``--peer-python``, default
/tmp/mbi-venv/bin/python: that repository's mbi at the commit of the script,
``--mechanisms`` its mechanisms/ folder). Issue 27 section 2; results and commands in
docs/pgm.md ("Head to head with the reference mbi AIM").

Tables (integer codes; the same codes for both sides): ``adult`` as the private-pgm repository
encodes it (shared/data/adult, its domain file), ``nist-<state>``: the 10 SDNist demographic
columns of ma2019, tx2019, national2019 binned by schemas/nist.yaml, and ``car``, ``mushroom``,
``asia`` (shared/data; each column's distinct values, sorted, are its codes; mushroom's ``?``
is a value). Workload: the reference script's default (its ``__main__``): every 2-way marginal
of at most 10,000 cells, weight 1; both sides get that workload (ours through ``degree=2``).

Scores against the real codes: ``werr``, the AIM paper's workload error (mean over the
workload of the L1 distance between the normalised marginals of real and synthetic data,
:func:`workload_error`; the reference script prints half of it as "Average Error"), and TVD by
k = 1, 2, 3 (:func:`tvd_by_k`, mean over all k-subsets of columns). Per process: wall (the
mechanism's own select-measure-fit-sample time, excluding interpreter and imports), ``proc_s``
(the whole process, wall), ``cpu_s`` (user + system CPU seconds of the process, from wait4: the
steadier figure on a shared machine), peak RSS (VmHWM) and the 1-minute load average at the end.
Every process is capped (``--time-limit``, 30 minutes); a capped run is recorded as a timeout.
Ours runs as benchmarks/aim_child.py (its doc: what that process holds and why it is not this
module); benchmarks/import_footprint.py ``--cells`` reads its memory step by step.

Order (so a partial grid still covers every table): every table at epsilon 1 seed 0, then
epsilon 0.1 and 10 seed 0, then seeds 1 and 2. Results accumulate in
benchmarks/results/aim_head_to_head.json; a cell already there is skipped, so the script
resumes where it stopped, and it prints a table of every cell done::

    python benchmarks/aim_head_to_head.py                         # the whole grid, resuming
    python benchmarks/aim_head_to_head.py --methods pgm-aim2,auto # only our side
    python benchmarks/aim_head_to_head.py --data car,asia --eps 1 --seeds 1
    python benchmarks/aim_head_to_head.py --report                # the table of what is done
    python benchmarks/aim_head_to_head.py --data adult-pub025 --methods pgm-aim2,mbi-jam --eps 1 --seeds 1
    python benchmarks/aim_head_to_head.py --out scratch ...      # a second runner, its own file
    python benchmarks/aim_head_to_head.py --merge benchmarks/results/scratch.json  # then merge it
    python benchmarks/aim_head_to_head.py --merge OTHER_TREE/benchmarks/results/aim_head_to_head.json \
        --relabel pgm-aim2=pgm-aim2-midrule   # a variant run from a tree with a reverted rule

The report also gives, where two methods share two or more seeds, the seed-by-seed difference
of their workload errors with its standard error (``pgm-aim2`` against ``mbi-aim``, and against
``pgm-aim2-midrule``: the estimator's step rule of 2026-11-25, run from a tree with commit
24ccf70 reverted), and a table of the issue's target cell by cell (:func:`verdicts`: accuracy at or
above the peer on the seeds both finished, CPU and peak RSS at 1/20 of the peer's; lower bounds
where the peer only timed out).

``mbi-jam`` is ``mechanisms/jam.py`` of the same repository with its script's defaults (degree-3
workload, 30 rounds, alpha 0.2) on its own table ``adult-pub025`` (private part priv.csv; JAM also
reads the public part pub.csv, which ours does not get). JAM is calibrated for bounded
(replace-one) neighbours, i.e. twice the add/remove sensitivity at the same rho.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import RESULTS, print_table, write_json  # noqa: E402
from benchmarks.aim_child import child_ours, plain_input  # noqa: E402,F401  (the child's code, kept out of this module)

DELTA = 1e-9
OUT_NAME = "aim_head_to_head"
WORK = Path(tempfile.gettempdir()) / "mbi-aim" / "cells"
DATA_DIR = next((p for p in (ROOT.parents[0] / "shared" / "data", ROOT.parents[1] / "shared" / "data")
                 if p.is_dir()), ROOT.parents[0] / "shared" / "data")
#: Fastest peer first, so that a partial grid has as many tables as possible.
TABLES = ("car", "asia", "nist-ma2019", "nist-tx2019", "nist-national2019", "adult", "mushroom")
METHODS = ("pgm-aim2", "auto", "mbi-aim")
#: pgm-aim2: the configuration under test. Diagnostics (run by name with --methods, not in the default
#: grid): -nt0 without the estimator's noise_tol stop; -exact also float64 and AIM's 1000 refit steps
#: per round (the reference's estimator settings); -r1000 only the 1000 refit steps; -f64 only float64;
#: -nc without compression of rare values; -mstrule with MST's compression rule (every value below 3 sds
#: merged, no bound on the merged group's share of the records: pgm-aim2 before issue 27's low-budget fix);
#: -groupbound with the group bound only (no per-value bound: pgm-aim2 before branch aim-compress).
OURS = {"pgm-aim2": {"select": "aim", "degree": 2},
        "pgm-aim2-nt0": {"select": "aim", "degree": 2, "noise_tol": 0},
        "pgm-aim2-exact": {"select": "aim", "degree": 2, "noise_tol": 0, "precision": "double", "refit_iters": 1000},
        "pgm-aim2-nc": {"select": "aim", "degree": 2, "compress": False},
        "pgm-aim2-mstrule": {"select": "aim", "degree": 2, "compress_share": 1e12},
        "pgm-aim2-groupbound": {"select": "aim", "degree": 2, "compress_value_share": 1e12},
        "pgm-aim2-r1000": {"select": "aim", "degree": 2, "refit_iters": 1000},
        "pgm-aim2-f64": {"select": "aim", "degree": 2, "precision": "double"}}
#: The reference script's workload (its __main__ defaults): every DEGREE-way marginal of at most MAX_CELLS cells.
DEGREE, MAX_CELLS = 2, 10_000
UCI = {"car": "uci/car.csv", "mushroom": "uci/mushroom.csv", "asia": "asia/asia.csv"}
#: JAM's own table (its script's default): adult split by the private-pgm repository into a private
#: part (priv.csv) and a public part (pub.csv, used by JAM only); ours sees the private part only.
JAM_TABLE, JAM_FOLDER = "adult-pub025", "adult_pub025_01"
PEER_CHECKOUT = Path("/tmp/mbi-aim/src")


# --- scoring ---------------------------------------------------------------------------------


def marginal(codes: np.ndarray, sizes: Sequence[int], cols: Sequence[int]) -> np.ndarray:
    """The normalised marginal (a distribution over the cells of ``cols``) of integer codes."""
    idx = np.ravel_multi_index(tuple(codes[:, j] for j in cols), tuple(int(sizes[j]) for j in cols))
    counts = np.bincount(idx, minlength=int(np.prod([sizes[j] for j in cols]))).astype(float)
    return counts / max(counts.sum(), 1.0)


def workload_error(real: np.ndarray, synth: np.ndarray, sizes: Sequence[int],
                   workload: Sequence[tuple[Sequence[int], float]]) -> float:
    """The AIM paper's workload error: the weighted mean, over the workload's marginals, of
    the L1 distance between the real and the synthetic marginal, each normalised by its rows."""
    errs = [w * float(np.abs(marginal(real, sizes, cl) - marginal(synth, sizes, cl)).sum()) for cl, w in workload]
    return float(np.mean(errs))


def tvd_by_k(real: np.ndarray, synth: np.ndarray, sizes: Sequence[int], ks: Sequence[int] = (1, 2, 3)) -> dict[int, float]:
    """Mean total variation distance over every k-subset of columns, per k (half the L1)."""
    d = real.shape[1]
    return {k: float(np.mean([0.5 * np.abs(marginal(real, sizes, cl) - marginal(synth, sizes, cl)).sum()
                              for cl in combinations(range(d), k)])) for k in ks if k <= d}


def default_workload(sizes: Sequence[int]) -> list[tuple[tuple[int, ...], float]]:
    """The reference script's default workload on columns of these sizes (see the module doc)."""
    return [(cl, 1.0) for cl in combinations(range(len(sizes)), DEGREE)
            if int(np.prod([sizes[j] for j in cl])) <= MAX_CELLS]


# --- tables ----------------------------------------------------------------------------------


def load(name: str, part: str = "priv") -> tuple[list[str], np.ndarray, list[int]]:
    """Column names, integer codes and domain sizes of one benchmark table."""
    import pandas as pd  # here: the child that runs ours (aim_child.py) reads codes only and never loads pandas
    if name == JAM_TABLE:  # read from the peer's checkout (its data/ folder)
        folder = PEER_CHECKOUT / "data" / JAM_FOLDER
        sizes = json.loads((folder / f"{JAM_FOLDER}-domain.json").read_text())
        df = pd.read_csv(folder / f"{part}.csv")
        return list(sizes), df[list(sizes)].to_numpy(dtype=np.int64), [int(v) for v in sizes.values()]
    if name == "adult":
        sizes = json.loads((DATA_DIR / "adult" / "adult-domain.json").read_text())
        df = pd.read_csv(DATA_DIR / "adult" / "adult.csv")
        return list(sizes), df[list(sizes)].to_numpy(dtype=np.int64), [int(v) for v in sizes.values()]
    if name.startswith("nist-"):
        from benchmarks.pgm_vs_mbi import load as nist_load

        data = nist_load(f"nist-demo-{name.split('-', 1)[1]}")
        schema = data["schema"]
        return list(schema.names), data["codes"], [int(c) for c in schema.cardinalities]
    if name in UCI:
        df = pd.read_csv(DATA_DIR / UCI[name], dtype=str, keep_default_na=False)
        cols, sizes = [], []
        for c in df.columns:
            values = sorted(df[c].unique())
            cols.append(pd.Categorical(df[c], categories=values).codes.astype(np.int64))
            sizes.append(len(values))
        return list(df.columns), np.column_stack(cols), sizes
    raise SystemExit(f"unknown table {name!r}; known: {TABLES}")


# --- one cell: a process ---------------------------------------------------------------------


def _proc_usage(pid: int) -> dict[str, float]:
    """CPU seconds and peak RSS so far of a running process (what a timeout had used)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    hwm = next((float(s.split()[1]) / 1024.0 for s in status if s.startswith("VmHWM:")), float("nan"))
    return {"cpu_s": (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), "peak_mb": hwm}


def run_process(cmd: list[str], limit: float, log: Path) -> dict[str, Any]:
    """Run ``cmd`` (its own process group), at most ``limit`` seconds; its last stdout line
    (JSON) with the process's wall, CPU seconds and max RSS (wait4), or a timeout/failure."""
    t0 = time.perf_counter()
    with open(log, "w") as err, open(log.with_suffix(".out"), "w") as out:  # kept for a failed run
        proc = __import__("subprocess").Popen(cmd, stdout=out, stderr=err, start_new_session=True)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > limit:
                spent = _proc_usage(proc.pid)
                os.killpg(proc.pid, signal.SIGKILL)
                os.wait4(proc.pid, 0)
                return {"status": f"timeout after {limit:.0f} s", "proc_s": time.perf_counter() - t0, **spent,
                        "load1": os.getloadavg()[0]}
            time.sleep(0.5)
    base = {"proc_s": time.perf_counter() - t0, "cpu_s": usage.ru_utime + usage.ru_stime,
            "maxrss_mb": usage.ru_maxrss / 1024.0, "load1": os.getloadavg()[0]}
    if os.waitstatus_to_exitcode(status) != 0:
        return {"status": "failed", "error": log.read_text().strip().splitlines()[-3:], **base}
    return {**json.loads(log.with_suffix(".out").read_text().strip().splitlines()[-1]), **base, "status": "ok"}


def child_command(params: dict[str, Any], src: Path, dst: Path) -> list[str]:
    """The command of one run of ours: benchmarks/aim_child.py, not this module (see its doc)."""
    return [sys.executable, str(ROOT / "benchmarks" / "aim_child.py"), json.dumps(params), str(src), str(dst)]


def write_cell_input(src: Path, data: tuple, eps: float, seed: int, public: np.ndarray | None = None) -> None:
    """The file both sides' processes read: the codes, column names and sizes, seed, epsilon,
    delta, rho, the workload and (JAM only) the public part; and the same cell as ``.npy`` and
    JSON beside it (:func:`aim_child.plain_input`: what ours reads)."""
    from dpsynth.privacy.budget import Budget

    names, codes, sizes = data
    if public is None:
        public = np.zeros((0, len(names)), dtype=np.int64)
    rho = Budget(epsilon=eps, delta=DELTA).rho
    np.savez(src, codes=codes, names=np.array(names), sizes=np.array(sizes), seed=seed, epsilon=eps, delta=DELTA,
             rho=rho, workload=np.array([cl for cl, _ in default_workload(sizes)]), public=public)
    plain_codes, plain_rest = plain_input(src)  # the same for ours (aim_child.py), without a zip reader
    np.save(plain_codes, codes.astype(np.uint16))  # the dtype ours measures (never an int64 copy in its process)
    plain_rest.write_text(json.dumps({"names": [str(n) for n in names], "sizes": [int(s) for s in sizes],
                                      "seed": int(seed), "epsilon": float(eps), "delta": DELTA, "rho": rho}))


def run_cell(table: str, data: tuple, method: str, eps: float, seed: int, args) -> dict[str, Any]:
    """One (table, method, epsilon, seed) run in its own process, scored against the real codes."""
    names, codes, sizes = data
    WORK.mkdir(parents=True, exist_ok=True)
    stem = f"{table}-{method}-eps{eps:g}-seed{seed}-pid{os.getpid()}"  # runners of other worktrees share WORK
    src, dst, log = WORK / f"{stem}.npz", WORK / f"{stem}.npy", WORK / f"{stem}.log"
    workload = default_workload(sizes)
    public = load(table, "pub")[1] if method == "mbi-jam" else None
    write_cell_input(src, data, eps, seed, public)
    out: dict[str, Any] = {}
    if method == "auto":
        from dpsynth.methods.auto import choose_for

        # the true row count stands in for auto's DP record count (1% of the budget; its noise
        # is small against these tables' sizes), so the cell follows auto's count-based rule
        choice = choose_for(sizes, eps, DELTA, records=float(len(codes)))
        params = {k: (int(v) if v.isdigit() else v) for k, v in choice.params.items()}
        out["auto_chose"] = choice.to_dict()
        same = next((m for m, p in OURS.items() if choice.method == "pgm" and p == params), None)
        if same is not None:  # the same configuration and seed as a run of ours: the same release
            for p in (src, *plain_input(src)):
                p.unlink()
            return {**out, "status": "same as " + same}
        run = params if choice.method == "pgm" else {"method": choice.method, **params}
        cmd = child_command(run, src, dst)
    elif method in OURS:
        cmd = child_command(OURS[method], src, dst)
    else:
        cmd = [args.peer_python, str(ROOT / "benchmarks" / "aim_reference_peer.py"), args.mechanisms, str(src), str(dst),
               method.split("-", 1)[1]]
    out["command"] = " ".join(cmd)
    out.update(run_process(cmd, args.time_limit, log))
    if out["status"] == "ok":
        synth = np.load(dst).astype(np.int64)  # ours writes its own code dtype (aim_child.py), the peer int64
        out["werr"] = workload_error(codes, synth, sizes, workload)
        out.update({f"tvd{k}": v for k, v in tvd_by_k(codes, synth, sizes).items()})
    for p in (src, dst, *plain_input(src)):
        p.unlink(missing_ok=True)
    return out


# --- driver ----------------------------------------------------------------------------------


def cells(args) -> list[tuple[str, float, int, str]]:
    """The grid in run order: every table at eps 1 seed 0, then eps 0.1 and 10, then more seeds."""
    tables = args.data.split(",") if args.data else list(TABLES)
    epss = [float(e) for e in args.eps.split(",")] if args.eps else [1.0, 0.1, 10.0]
    methods = args.methods.split(",") if args.methods else list(METHODS)
    order = [(e, 0) for e in epss] + [(e, s) for s in range(1, args.seeds) for e in epss]
    return [(t, e, s, m) for e, s in order for t in tables for m in methods]


def main() -> None:
    """Run (resuming) and report; ``--child`` is one run of ours (as aim_child.py, which run_cell runs)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data"), ap.add_argument("--eps"), ap.add_argument("--methods")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--peer-python", default="/tmp/mbi-venv/bin/python")
    ap.add_argument("--mechanisms", default="/tmp/mbi-aim/src/mechanisms",
                    help="the mechanisms/ folder of the private-pgm checkout whose mbi the peer venv holds")
    ap.add_argument("--time-limit", type=float, default=30 * 60)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--report", action="store_true", help="print the tables of what is done; run nothing")
    ap.add_argument("--markdown", action="store_true", help="print the tables as markdown")
    ap.add_argument("--child", nargs=3, metavar=("PARAMS", "SRC", "DST"))
    ap.add_argument("--out", default=OUT_NAME, help="results file name under benchmarks/results (a scratch file "
                    "lets a second runner work beside one writing the main file; --merge it in afterwards)")
    ap.add_argument("--merge", metavar="PATH", help="add the runs of another results file to --out's; run nothing")
    ap.add_argument("--relabel", metavar="OLD=NEW", help="with --merge: take only OLD's runs, recorded as NEW")
    args = ap.parse_args()
    if args.child:
        child_ours(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return
    global PEER_CHECKOUT
    PEER_CHECKOUT = Path(args.mechanisms).resolve().parent
    path = RESULTS / f"{args.out}.json"
    runs: dict[str, Any] = json.loads(path.read_text()).get("runs", {}) if path.is_file() else {}
    if args.merge:
        old, _, new = (args.relabel or "").partition("=")
        runs = merge_runs(runs, json.loads(Path(args.merge).read_text())["runs"], old or None, new or None)
        _write(args.out, runs)
    elif not args.report:
        loaded: dict[str, Any] = {}
        for t, e, s, m in cells(args):
            key = f"{t}|{e}|{s}|{m}"
            latest = json.loads(path.read_text()).get("runs", {}) if path.is_file() else {}
            if key in latest and latest[key].get("status") != "failed" and not args.force:  # failed: retried
                continue
            loaded.setdefault(t, load(t))
            print(f"running {key} ...", flush=True)
            res = {"table": t, "epsilon": e, "seed": s, "method": m, **run_cell(t, loaded[t], m, e, s, args)}
            print("  " + json.dumps({k: v for k, v in res.items() if k != "command"}), flush=True)
            # Re-read before writing: several runners may share the file (disjoint cells).
            latest = json.loads(path.read_text()).get("runs", {}) if path.is_file() else {}
            runs = {**latest, key: res}
            _write(args.out, runs)
    report(runs, args.markdown)


def _write(name: str, runs: dict[str, Any]) -> None:
    """Write the results file ``name`` with these runs."""
    write_json(name, {"delta": DELTA, "workload": f"every {DEGREE}-way marginal of at most {MAX_CELLS} "
                      "cells, weight 1 (the reference script's default)", "runs": runs})


def merge_runs(runs: dict[str, Any], other: dict[str, Any], old: str | None = None,
               new: str | None = None) -> dict[str, Any]:
    """``runs`` with the runs of ``other`` added (a cell in both takes ``other``'s). With ``old``
    and ``new``: only ``other``'s runs of method ``old``, recorded as method ``new`` (a variant run
    from another tree, e.g. a reverted rule, kept beside the default's cells)."""
    out = dict(runs)
    for r in other.values():
        if old is not None and r["method"] != old:
            continue
        r = {**r, "method": new} if old is not None and new else dict(r)
        out[f"{r['table']}|{r['epsilon']}|{r['seed']}|{r['method']}"] = r
    return out


def _table(headers: list[str], rows: list[list[Any]], markdown: bool) -> None:
    """Print a table: aligned text, or markdown (for docs/pgm.md); floats to 4 decimals."""
    cells = [[f"{v:.4f}" if isinstance(v, float) else str(v) for v in r] for r in rows]
    if not markdown:
        print_table(headers, cells)
        return
    print("| " + " | ".join(headers) + " |\n|" + "---|" * len(headers))
    for r in cells:
        print("| " + " | ".join(r) + " |")


def _mean_werr(runs: dict[str, Any], t: str, e: float, method: str) -> str:
    """Mean workload error over the seeds of one of our methods (``auto``: a seed recorded as
    "same as X" takes X's cell), with what auto chose; "-" when none ran."""
    w, chose = [], set()
    for r in runs.values():
        if (r["table"], r["epsilon"], r["method"]) != (t, e, method):
            continue
        if str(r.get("status", "")).startswith("same as "):
            r = runs.get(f"{t}|{e}|{r['seed']}|{r['status'][8:]}", {}) | {"auto_chose": r.get("auto_chose")}
        if r.get("status") == "ok":
            w.append(r["werr"])
            if r.get("auto_chose"):
                c = r["auto_chose"]
                chose.add(" ".join([c["method"]] + [f"{k}={v}" for k, v in c["params"].items()]))
    return f"{np.mean(w):.4f} ({len(w)})" + (f" {', '.join(sorted(chose))}" if chose else "") if w else "-"


def _ok(runs: dict[str, Any], t: str, e: float, method: str) -> list[dict[str, Any]]:
    """The finished runs of one method on one (table, epsilon), by seed."""
    return sorted((r for r in runs.values() if (r["table"], r["epsilon"], r["method"]) == (t, e, method)
                   and r.get("status") == "ok"), key=lambda r: r["seed"])


def _spread(w: Sequence[float]) -> str:
    """Mean (range, count) of workload errors."""
    return f"{np.mean(w):.4f} ({min(w):.4f}-{max(w):.4f}, {len(w)})"


def _peer_cell(runs: dict[str, Any], t: str, e: float) -> str:
    """The peer's mean over its finished seeds, and the seeds that timed out or failed."""
    done = _ok(runs, t, e, "mbi-aim")
    other = sorted((r for r in runs.values() if (r["table"], r["epsilon"], r["method"]) == (t, e, "mbi-aim")
                    and r.get("status") != "ok"), key=lambda r: r["seed"])
    parts = [_spread([r["werr"] for r in done])] if done else []
    for r in other:  # what a timeout or a failure had used, where it was read
        used = f", {r['cpu_s']:.0f} CPU s, {r['peak_mb']:.0f} MB" if r.get("cpu_s") and r.get("peak_mb") else ""
        parts.append(f"seed {r['seed']} {r['status']}{used}")
    return "; ".join(parts) or "not run"


def summary(runs: dict[str, Any]) -> list[list[Any]]:
    """Per (table, epsilon): our mean workload error over seeds (range, count) beside the peer's
    over its finished seeds (and its timeouts or failures), with TVD3, CPU seconds and peak RSS
    of both (means over each side's finished seeds) and the peer / ours ratios of CPU and RSS,
    and the means of ``auto`` and of pgm-aim2 with MST's compression rule (before the
    low-budget bound)."""
    out = []
    for t in TABLES:
        for e in (0.1, 1.0, 10.0):
            ours, peer = _ok(runs, t, e, "pgm-aim2"), _ok(runs, t, e, "mbi-aim")
            if not ours:
                continue
            m = lambda rs, k: float(np.mean([r[k] for r in rs]))  # noqa: E731
            pair = lambda k, f: (f"{m(ours, k):{f}} / {m(peer, k):{f}}" if peer  # noqa: E731
                                 else f"{m(ours, k):{f}} / -")
            ratio = (f"{m(peer, 'cpu_s') / m(ours, 'cpu_s'):.0f}x / {m(peer, 'peak_mb') / m(ours, 'peak_mb'):.1f}x"
                     if peer else "-")
            out.append([t, f"{e:g}", _spread([r["werr"] for r in ours]), _peer_cell(runs, t, e),
                        pair("tvd3", ".4f"), pair("cpu_s", ".1f"), pair("peak_mb", ".0f"), ratio,
                        _mean_werr(runs, t, e, "auto"), _mean_werr(runs, t, e, "pgm-aim2-mstrule")])
    return out


def paired(runs: dict[str, Any], a: str, b: str) -> list[list[Any]]:
    """Per (table, epsilon) where both methods finished on two or more of the same seeds: each
    one's mean over those seeds with its standard error, and the mean of the seed-by-seed
    difference a - b with its standard error (negative: ``a`` lower, i.e. better)."""
    out = []
    for t in TABLES:
        for e in (0.1, 1.0, 10.0):
            wa = {r["seed"]: r["werr"] for r in _ok(runs, t, e, a)}
            wb = {r["seed"]: r["werr"] for r in _ok(runs, t, e, b)}
            seeds = sorted(set(wa) & set(wb))
            if len(seeds) < 2:
                continue
            x, y = np.array([wa[s] for s in seeds]), np.array([wb[s] for s in seeds])
            se = lambda v: float(np.std(v, ddof=1) / np.sqrt(len(v)))  # noqa: E731
            d = x - y
            out.append([t, f"{e:g}", f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1))
                        else ",".join(map(str, seeds)), f"{x.mean():.4f} ± {se(x):.4f}", f"{y.mean():.4f} ± {se(y):.4f}",
                        f"{d.mean():+.4f} ± {se(d):.4f}", f"{d.mean() / se(d):+.1f}" if se(d) > 0 else "-"])
    return out


#: The issue's cost target: at most 1/TARGET_RATIO of the peer's CPU seconds and peak memory.
TARGET_RATIO = 20.0


def _ratio(peer: Sequence[float], ours: Sequence[float], bound: bool = False) -> tuple[str, str]:
    """Peer / ours of the means (with the per-seed range where there are several) and whether it
    meets the 20x target; ``bound``: the peer's figures are what a killed run had used (at least)."""
    ratios = [p / o for p, o in zip(peer, ours)]
    mean = float(np.mean(peer)) / float(np.mean(ours))
    text = (">= " if bound else "") + f"{mean:.1f}x" + (f" ({min(ratios):.1f}-{max(ratios):.1f}x)" if len(ratios) > 1 else "")
    met = "met" if mean >= TARGET_RATIO and min(ratios) >= TARGET_RATIO else (
        "met on the mean" if mean >= TARGET_RATIO else ("unknown" if bound else "not met"))
    return text, met


def verdicts(runs: dict[str, Any]) -> list[list[Any]]:
    """Per (table, epsilon) where the peer ran: the issue's target cell by cell. Over the seeds
    both sides finished: the two means, the paired difference ours - peer (± its standard error
    with two or more seeds), whether ours is at or below the peer's mean (lower is better), and
    the peer / ours ratios of CPU seconds and peak RSS against 20x. Where the peer only timed
    out, the ratios are lower bounds from what it had used at the kill (against our mean)."""
    out = []
    for t in TABLES:
        for e in (0.1, 1.0, 10.0):
            mine = {r["seed"]: r for r in _ok(runs, t, e, "pgm-aim2")}
            peer_all = [r for r in runs.values() if (r["table"], r["epsilon"], r["method"]) == (t, e, "mbi-aim")]
            if not mine or not peer_all:
                continue
            peer = {r["seed"]: r for r in peer_all if r.get("status") == "ok"}
            lost = sorted(r["seed"] for r in peer_all if r.get("status") != "ok")
            notes = ", ".join(f"seed {r['seed']} {r['status']}" for r in sorted(peer_all, key=lambda r: r["seed"])
                              if r.get("status") != "ok") or "-"
            seeds = sorted(set(mine) & set(peer))
            if seeds:
                x = np.array([mine[s]["werr"] for s in seeds])
                y = np.array([peer[s]["werr"] for s in seeds])
                d = x - y
                se = f" ± {np.std(d, ddof=1) / np.sqrt(len(d)):.4f}" if len(d) > 1 else ""
                cpu = _ratio([peer[s]["cpu_s"] for s in seeds], [mine[s]["cpu_s"] for s in seeds])
                mem = _ratio([peer[s]["peak_mb"] for s in seeds], [mine[s]["peak_mb"] for s in seeds])
                out.append([t, f"{e:g}", ",".join(map(str, seeds)), f"{x.mean():.4f}", f"{y.mean():.4f}",
                            f"{d.mean():+.4f}{se}", "yes" if d.mean() <= 0 else "no", *cpu, *mem, notes])
                continue
            used = [r for r in peer_all if r.get("cpu_s") and r.get("peak_mb")]
            ours = list(mine.values())
            m = lambda rs, k: [float(np.mean([r[k] for r in rs]))]  # noqa: E731
            cpu = _ratio(m(used, "cpu_s"), m(ours, "cpu_s"), True) if used else ("-", "-")
            mem = _ratio(m(used, "peak_mb"), m(ours, "peak_mb"), True) if used else ("-", "-")
            out.append([t, f"{e:g}", f"none (peer: {','.join(map(str, lost))})", _spread([r["werr"] for r in ours]),
                        "-", "-", "peer did not finish", *cpu, *mem, notes])
    return out


def report(runs: dict[str, Any], markdown: bool = False) -> None:
    """Print every cell done, then ours against the peer per (table, epsilon, seed)."""
    rows = []
    for r in sorted(runs.values(), key=lambda r: (r["table"], r["epsilon"], r["seed"], r["method"])):
        ok = r.get("status") == "ok"
        proc = f"{r['proc_s']:.0f} (process)" if "proc_s" in r else ""
        rows.append([r["table"], f"{r['epsilon']:g}", r["seed"], r["method"], r.get("status") if not ok else "ok"]
                    + ([r["werr"], r["tvd1"], r["tvd2"], r.get("tvd3", float("nan")),
                        f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}", f"{r['peak_mb']:.0f}", f"{r['load1']:.1f}"]
                       if ok else ["", "", "", "", "", proc, "", ""]))
    _table(["table", "eps", "seed", "method", "status", "werr", "tvd1", "tvd2", "tvd3", "wall s", "cpu s",
            "peak MB", "load"], rows, markdown)
    pairs = []
    for key, r in sorted(runs.items()):
        if not r["method"].startswith("mbi-"):
            continue
        ours = runs.get(key.rsplit("|", 1)[0] + "|pgm-aim2", {})
        if ours.get("status") != "ok":
            continue
        if r.get("status") != "ok":
            pairs.append([r["table"], f"{r['epsilon']:g}", r["seed"], r["method"], ours["werr"], r["status"], "", "", "", ""])
            continue
        win = "ours" if ours["werr"] <= r["werr"] else "mbi"
        pairs.append([r["table"], f"{r['epsilon']:g}", r["seed"], r["method"], ours["werr"], r["werr"], win,
                      f"{r['wall_s'] / ours['wall_s']:.1f}x", f"{r['cpu_s'] / ours['cpu_s']:.1f}x",
                      f"{r['peak_mb'] / ours['peak_mb']:.1f}x"])
    print()
    _table(["table", "eps", "pgm-aim2 werr mean (range, seeds)", "mbi AIM werr mean (range, seeds)",
            "TVD3 ours / mbi", "cpu s ours / mbi", "peak MB ours / mbi", "mbi / ours: cpu / RSS",
            "auto werr mean (seeds) chose", "pgm-aim2 with MST's rule (before)"], summary(runs), markdown)
    print()
    _table(["table", "eps", "seed", "peer", "werr pgm-aim2", "werr peer", "lower", "peer wall / ours",
            "peer cpu / ours", "peer RSS / ours"], pairs, markdown)
    print()
    _table(["table", "eps", "seeds both finished", "pgm-aim2 werr", "mbi AIM werr", "ours - peer (paired, ± se)",
            "at or above the peer", "cpu peer / ours", "cpu 1/20", "RSS peer / ours", "memory 1/20", "peer not finished"],
           verdicts(runs), markdown)
    for a, b in (("pgm-aim2", "mbi-aim"), ("pgm-aim2", "pgm-aim2-midrule")):
        rows = paired(runs, a, b)
        if rows:
            print()
            _table(["table", "eps", "seeds", f"{a} mean ± se", f"{b} mean ± se", "difference ± se (paired)",
                    "difference / se"], rows, markdown)


if __name__ == "__main__":
    main()
